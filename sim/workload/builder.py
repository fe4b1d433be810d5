"""Turning a validated ``workload:`` section into the requests a serving node will receive."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import numpy as np

from sim.errors import InvariantError
from sim.random_streams import RandomStreams
from sim.workload.arrivals import ArrivalProcess, GammaArrivals, PoissonArrivals, ReplayedArrivals
from sim.workload.config import (
    ClosedLoopArrivalConfig,
    EmpiricalLengthConfig,
    FixedLengthConfig,
    GammaArrivalConfig,
    LengthConfig,
    LognormalLengthConfig,
    PoissonArrivalConfig,
    TraceArrivalConfig,
    UniformLengthConfig,
    WorkloadConfig,
)
from sim.workload.lengths import (
    EmpiricalLengths,
    FixedLengths,
    LengthDistribution,
    LognormalLengths,
    ReplayedLengths,
    UniformLengths,
)
from sim.workload.sharing import mean_prompt_tokens, num_sessions, share
from sim.workload.trace import (
    TraceRequests,
    read_length_values,
    read_trace,
    resolve_path,
    take_requests,
)


class AnalyticMeans(TypedDict):
    """What a workload's generators promise on average (see :meth:`Workload.analytic_means`)."""

    mean_prompt_tokens: float
    mean_output_tokens: float
    mean_gap_s: float | None
    request_rate_per_s: float | None


@dataclass(frozen=True, eq=False)
class Workload:
    """Every request of a run, in request order, with the processes that generated them.

    ``arrival_at_s`` is None for a closed loop: then ``concurrency`` clients each send their next
    request ``think_time_s`` after their previous one finishes. With both set, open-loop arrivals
    are capped at ``concurrency`` requests in flight (``arrival.max_concurrency``). With sessions
    it holds the first turns' arrivals only (NaN for later turns): ``next_turn[i]`` is sent
    ``turn_think_time_s`` after request ``i`` finishes (-1: none).
    ``prefix_id``/``prefix_tokens``/``session_id`` say what a request shares (see
    :mod:`sim.workload.sharing`). The arrays are read-only.
    """

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    arrival_at_s: np.ndarray | None
    concurrency: int | None
    think_time_s: float
    dataset: str | None
    temperature: float
    arrival_process: ArrivalProcess | None
    prompt_length: LengthDistribution
    output_length: LengthDistribution
    prefix_id: np.ndarray
    prefix_tokens: np.ndarray
    session_id: np.ndarray
    next_turn: np.ndarray
    turn_think_time_s: float
    mean_prompt_tokens: float

    @property
    def has_sessions(self) -> bool:
        """Whether later turns are released by earlier turns' finishes."""
        return bool((self.next_turn >= 0).any())

    @property
    def num_requests(self) -> int:
        return len(self.prompt_tokens)

    def analytic_means(self) -> AnalyticMeans:
        """The means the generators promise: lengths in tokens, the gap in s and the rate in 1/s.

        The gap and rate are None for a closed loop, whose rate depends on the server; the rate is
        None too when every request arrives at once.
        """
        mean_gap_s = None if self.arrival_process is None else self.arrival_process.mean
        return {
            "mean_prompt_tokens": self.mean_prompt_tokens,
            "mean_output_tokens": self.output_length.mean,
            "mean_gap_s": mean_gap_s,
            "request_rate_per_s": 1.0 / mean_gap_s if mean_gap_s else None,
        }


def _read_only(values: np.ndarray) -> np.ndarray:
    values.flags.writeable = False
    return values


def _arrival_process(config: WorkloadConfig, trace: TraceRequests | None) -> ArrivalProcess | None:
    """The open-loop process of ``config.arrival``, or None for a closed loop."""
    arrival = config.arrival
    if isinstance(arrival, PoissonArrivalConfig):
        return PoissonArrivals(arrival.rate_per_s)
    if isinstance(arrival, GammaArrivalConfig):
        return GammaArrivals(arrival.rate_per_s, arrival.cv)
    if isinstance(arrival, ClosedLoopArrivalConfig):
        return None
    assert trace is not None  # internal: a trace arrival always reads its trace first
    if trace.arrival_at_s is not None:
        return ReplayedArrivals(trace.arrival_at_s, source=trace.source)
    # A benchmark that recorded only its request rate: draw Poisson arrivals at that rate, as
    # `vllm bench serve --request-rate` does; with no finite rate it sent everything at once.
    rate_per_s = trace.request_rate_per_s
    if rate_per_s is not None and 0 < rate_per_s < float("inf"):
        return PoissonArrivals(rate_per_s)
    return ReplayedArrivals(np.zeros(trace.num_requests), source=trace.source)


def _length_distribution(
    config: LengthConfig,
    max_tokens: int | None,
    recorded: np.ndarray | None,
    key_path: str,
    base_dir: Path,
) -> LengthDistribution:
    """The length distribution of one ``*_tokens`` section, reading any file it names."""
    if isinstance(config, FixedLengthConfig):
        return FixedLengths(config.value, max_tokens)
    if isinstance(config, UniformLengthConfig):
        return UniformLengths(config.low, config.high, max_tokens)
    if isinstance(config, LognormalLengthConfig):
        return LognormalLengths(config.mean, config.sigma, max_tokens)
    if isinstance(config, EmpiricalLengthConfig):
        path = resolve_path(config.path, base_dir)
        values = read_length_values(path, config.column, key_path)
        return EmpiricalLengths(values, max_tokens, source=str(path))
    assert recorded is not None  # internal: the schema allows trace lengths only with a trace
    return ReplayedLengths(recorded, max_tokens)


def build_workload(
    config: WorkloadConfig,
    streams: RandomStreams,
    base_dir: Path,
    trace: TraceRequests | None = None,
) -> Workload:
    """Draw (or replay) every request's arrival time and lengths from ``config``.

    Arrivals, prompt lengths and output lengths come from the named streams ``"arrivals"``,
    ``"prompt_tokens"`` and ``"output_tokens"``, so changing one of them leaves the others' draws
    unchanged (common random numbers). Relative paths are resolved against ``base_dir``, the
    scenario file's folder. ``trace``, when given, is the file of ``workload.arrival.path``
    already read (:func:`sim.workload.trace.read_trace`), so a caller that runs one trace many
    times reads it once.

    Raise ScenarioError if a file is missing or malformed, or a trace holds fewer requests than
    ``num_requests`` without ``loop: true``; the vLLM artifact reader raises CalibrationError.
    Raise ValueError if ``trace`` is given for arrivals that are not a trace.
    """
    num_requests = config.num_requests
    if isinstance(config.arrival, TraceArrivalConfig):
        if trace is None:
            trace = read_trace(resolve_path(config.arrival.path, base_dir))
        trace = take_requests(trace, num_requests, config.arrival.loop)
    elif trace is not None:
        raise ValueError("build_workload: a trace was given but workload.arrival is not a trace")

    arrival_process = _arrival_process(config, trace)
    prompt_length = _length_distribution(
        config.prompt_tokens,
        config.max_prompt_tokens,
        None if trace is None else trace.prompt_tokens,
        "workload.prompt_tokens",
        base_dir,
    )
    output_length = _length_distribution(
        config.output_tokens,
        config.max_output_tokens,
        None if trace is None else trace.output_tokens,
        "workload.output_tokens",
        base_dir,
    )

    closed_loop = config.arrival if isinstance(config.arrival, ClosedLoopArrivalConfig) else None
    prompt_tokens = prompt_length.sample(num_requests, streams.stream("prompt_tokens"))
    output_tokens = output_length.sample(num_requests, streams.stream("output_tokens"))
    if len(prompt_tokens) != num_requests or len(output_tokens) != num_requests:
        raise InvariantError(f"workload: the generators did not yield {num_requests} requests")
    shared = None
    if config.prefix is not None or config.sessions is not None:
        shared = share(
            prompt_tokens, output_tokens, config.prefix, config.sessions, streams.stream("prefixes")
        )
        prompt_tokens = shared.prompt_tokens
    arrival_at_s = None
    if arrival_process is not None:
        # With sessions the process times new conversations; later turns follow answers.
        num_starts = num_sessions(num_requests, config.sessions)
        starts = arrival_process.sample_arrival_times(num_starts, streams.stream("arrivals"))
        if shared is not None and config.sessions is not None:
            times = np.full(num_requests, np.nan)
            times[shared.first_turns] = starts
            starts = times
        arrival_at_s = _read_only(starts)
    minus_one = np.full(num_requests, -1, dtype=np.int64)
    return Workload(
        prompt_tokens=_read_only(prompt_tokens),
        output_tokens=_read_only(output_tokens),
        arrival_at_s=arrival_at_s,
        concurrency=(
            getattr(config.arrival, "max_concurrency", None)
            if closed_loop is None
            else closed_loop.concurrency
        ),
        think_time_s=0.0 if closed_loop is None else closed_loop.think_time_s,
        dataset=config.dataset,
        temperature=config.temperature,
        arrival_process=arrival_process,
        prompt_length=prompt_length,
        output_length=output_length,
        prefix_id=_read_only(minus_one.copy() if shared is None else shared.prefix_id),
        prefix_tokens=_read_only(
            np.zeros_like(minus_one) if shared is None else shared.prefix_tokens
        ),
        session_id=_read_only(minus_one.copy() if shared is None else shared.session_id),
        next_turn=_read_only(minus_one.copy() if shared is None else shared.next_turn),
        turn_think_time_s=0.0 if config.sessions is None else config.sessions.think_time_s,
        mean_prompt_tokens=mean_prompt_tokens(
            prompt_length.mean, output_length.mean, config.prefix, config.sessions
        ),
    )
