"""The ``workload:`` section of a scenario: who sends requests, when, and how long they are.

Every key has its default here and nowhere else. The models are frozen and forbid unknown keys, so a
mistyped key fails validation with its key path. Validation never touches the file system: paths are
kept as written and resolved against the scenario file's folder when the workload is built.

Arrival processes (``arrival.process``):

- ``poisson``: exponential gaps with mean ``1 / rate_per_s``, never truncated.
- ``max_concurrency`` (poisson and gamma): at most that many requests in flight; a request due
  while the cap is reached is sent when one finishes (``vllm bench serve --max-concurrency``
  with a finite ``--request-rate``); latencies count from the send, as the benchmark's do.
- ``gamma``: gamma gaps with mean ``1 / rate_per_s`` and coefficient of variation ``cv`` (``cv = 1``
  is Poisson, ``cv > 1`` burstier, ``cv < 1`` smoother). ``vllm bench serve --burstiness b`` is
  ``cv = 1 / sqrt(b)``.
- ``closed_loop``: ``concurrency`` clients, each sending its next request when its previous one
  finishes, after ``think_time_s``. A static batch is ``concurrency = num_requests``.
- ``trace``: replays a recorded run (CSV with ``arrived_at``, ``num_prefill_tokens``,
  ``num_decode_tokens``; a ``vllm bench serve`` result JSON; or a request-timings ``.jsonl``). The
  first ``num_requests`` requests are replayed; asking for more than the trace holds is an error
  unless ``loop: true``.

Length distributions (``prompt_tokens`` and ``output_tokens``, ``distribution``):

- ``fixed`` (``value``), ``uniform`` (``low``, ``high``, both inclusive integers),
  ``lognormal`` (``mean`` in tokens, ``sigma`` of the log), ``empirical`` (samples with replacement
  from a CSV ``column`` or a JSON list at ``path``), and ``trace``: the lengths recorded in the
  arrival trace, request by request. Under a trace arrival the lengths default to ``trace``; giving
  a distribution explicitly replaces the recorded lengths with samples. ``trace`` lengths without a
  trace arrival are an error.

Every length is an integer clipped to ``[1, max_*_tokens]`` (no upper cap when the cap is absent).

Shared prefixes (``prefix``) and multi-turn sessions (``sessions``) are described in
:mod:`sim.workload.sharing`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, model_validator

from sim.inputs import SCHEMA_CONFIG
from sim.workload.sharing import MAX_THINK_TIME_S, MAX_TOKENS, PrefixConfig, SessionConfig

_FROZEN_STRICT = SCHEMA_CONFIG
#: Ten million requests is weeks of traffic: a cap so that a typo cannot ask for terabytes.
MAX_REQUESTS = 10_000_000
#: Arrival rates: one request in 11.6 days to a million a second. Below, a run spans years of
#: simulated time and loses precision (see sim.scale); above, no one endpoint is offered that.
MIN_RATE_PER_S = 1e-6
MAX_RATE_PER_S = 1e6
#: Coefficient of variation of gamma gaps: 1 is Poisson; 100 puts almost all requests in a few
#: bursts (vllm bench serve's burstiness 1e-4), past any measured trace.
MAX_CV = 100.0
#: Sigma of a lognormal length: above 3 the median is below exp(-4.5) = 1/90 of the mean, so
#: nearly every length clips to 1 token and the mean rests on a few huge draws. Published fits of
#: ShareGPT and LMSYS lengths have sigma near 1.
MAX_LOGNORMAL_SIGMA = 3.0
#: Sampling temperatures above 2 are outside the OpenAI API's range [0, 2], which vLLM serves.
MAX_TEMPERATURE = 2.0
#: Simulated times stay below 2**32 s (136 years), where float64 spacing is 2**-20 s < 1 us, so a
#: latency, a difference of two times, keeps microsecond resolution (IEEE 754: the spacing at t is
#: 2**(floor(log2 t) - 52)).
MAX_SIMULATED_S = float(2**32)


class PoissonArrivalConfig(BaseModel):
    """Open-loop arrivals with exponential gaps at ``rate_per_s`` requests per second."""

    model_config = _FROZEN_STRICT
    process: Literal["poisson"] = "poisson"
    rate_per_s: float = Field(default=4.0, ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S)
    max_concurrency: int | None = Field(default=None, ge=1)


class GammaArrivalConfig(BaseModel):
    """Open-loop arrivals with gamma gaps of mean ``1 / rate_per_s`` and variation ``cv``."""

    model_config = _FROZEN_STRICT
    process: Literal["gamma"]
    rate_per_s: float = Field(default=4.0, ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S)
    cv: float = Field(default=1.0, gt=0, le=MAX_CV)
    max_concurrency: int | None = Field(default=None, ge=1)


class ClosedLoopArrivalConfig(BaseModel):
    """``concurrency`` clients, each sending a request ``think_time_s`` after its last one ends."""

    model_config = _FROZEN_STRICT
    process: Literal["closed_loop"]
    concurrency: int = Field(default=1, ge=1, le=MAX_REQUESTS)
    think_time_s: float = Field(default=0.0, ge=0, le=MAX_THINK_TIME_S)


class TraceArrivalConfig(BaseModel):
    """Replay of a recorded run's arrivals (and, by default, its lengths) from ``path``."""

    model_config = _FROZEN_STRICT
    process: Literal["trace"]
    path: Path = Field(strict=False)
    loop: bool = False


ArrivalConfig = Annotated[
    PoissonArrivalConfig | GammaArrivalConfig | ClosedLoopArrivalConfig | TraceArrivalConfig,
    Field(discriminator="process"),
]


class FixedLengthConfig(BaseModel):
    """Every request has ``value`` tokens."""

    model_config = _FROZEN_STRICT
    distribution: Literal["fixed"]
    value: int = Field(ge=1, le=MAX_TOKENS)


class UniformLengthConfig(BaseModel):
    """Integers drawn uniformly from ``low`` to ``high``, both included.

    Raise ValueError (a pydantic ValidationError) if ``high < low``.
    """

    model_config = _FROZEN_STRICT
    distribution: Literal["uniform"]
    low: int = Field(ge=1, le=MAX_TOKENS)
    high: int = Field(ge=1, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _high_not_below_low(self) -> UniformLengthConfig:
        if self.high < self.low:
            raise ValueError(f"high must be >= low, got low={self.low}, high={self.high}")
        return self


class LognormalLengthConfig(BaseModel):
    """Lognormal lengths with mean ``mean`` tokens and standard deviation ``sigma`` of the log."""

    model_config = _FROZEN_STRICT
    distribution: Literal["lognormal"]
    mean: float = Field(ge=1, le=MAX_TOKENS)
    sigma: float = Field(ge=0, le=MAX_LOGNORMAL_SIGMA)


class EmpiricalLengthConfig(BaseModel):
    """Lengths drawn with replacement from recorded values: a CSV ``column`` or a JSON list.

    A JSON file holds either a list of numbers or, when ``column`` is given, an object whose
    ``column`` key holds that list. A CSV file needs ``column``; the check happens when the file is
    read, since validation does no I/O.
    """

    model_config = _FROZEN_STRICT
    distribution: Literal["empirical"]
    path: Path = Field(strict=False)
    column: str | None = None


class TraceLengthConfig(BaseModel):
    """The lengths recorded in the arrival trace, request by request (needs a trace arrival)."""

    model_config = _FROZEN_STRICT
    distribution: Literal["trace"]


LengthConfig = Annotated[
    FixedLengthConfig
    | UniformLengthConfig
    | LognormalLengthConfig
    | EmpiricalLengthConfig
    | TraceLengthConfig,
    Field(discriminator="distribution"),
]

_DEFAULT_PROMPT_TOKENS: dict[str, Any] = {"distribution": "fixed", "value": 512}
_DEFAULT_OUTPUT_TOKENS: dict[str, Any] = {"distribution": "lognormal", "mean": 256, "sigma": 0.6}
_TRACE_LENGTHS: dict[str, Any] = {"distribution": "trace"}


def _arrival_process(arrival: object) -> object:
    """The ``process`` of a raw or validated arrival section, or None."""
    if isinstance(arrival, dict):
        return arrival.get("process", "poisson")
    return getattr(arrival, "process", None)


class WorkloadConfig(BaseModel):
    """The scenario's ``workload:`` section, validated and with every default filled in.

    Omitted ``prompt_tokens`` / ``output_tokens`` become ``{distribution: trace}`` under a trace
    arrival, and ``fixed 512`` / ``lognormal(mean 256, sigma 0.6)`` otherwise; the filled-in value
    is what a dumped (resolved) scenario shows.

    Raise pydantic ValidationError on an unknown key, a wrong type, a value out of range, ``trace``
    lengths without a trace arrival, sessions with a trace arrival, or a closed loop with more
    clients than requests.
    """

    model_config = _FROZEN_STRICT
    num_requests: int = Field(default=1000, ge=1, le=MAX_REQUESTS)
    arrival: ArrivalConfig = PoissonArrivalConfig(process="poisson", rate_per_s=4.0)
    prompt_tokens: LengthConfig = FixedLengthConfig(**_DEFAULT_PROMPT_TOKENS)
    output_tokens: LengthConfig = LognormalLengthConfig(**_DEFAULT_OUTPUT_TOKENS)
    max_prompt_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    max_output_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    temperature: float = Field(default=0.0, ge=0, le=MAX_TEMPERATURE)
    dataset: str | None = "mt-bench"
    prefix: PrefixConfig | None = None
    sessions: SessionConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _default_lengths_follow_arrival(cls, data: Any) -> Any:
        # The length defaults depend on the arrival process, so they are filled in before field
        # validation: a trace replays its own lengths unless told otherwise.
        if not isinstance(data, dict):
            return data
        filled = dict(data)
        arrival = filled.get("arrival")
        if isinstance(arrival, dict) and "process" not in arrival:
            # The default process is Poisson: ``--set workload.arrival.rate_per_s=8`` on a file
            # without an arrival section means a Poisson rate, as the schema's default says.
            filled["arrival"] = {"process": "poisson", **arrival}
        is_trace = _arrival_process(filled.get("arrival", {})) == "trace"
        if "prompt_tokens" not in filled:
            filled["prompt_tokens"] = _TRACE_LENGTHS if is_trace else _DEFAULT_PROMPT_TOKENS
        if "output_tokens" not in filled:
            filled["output_tokens"] = _TRACE_LENGTHS if is_trace else _DEFAULT_OUTPUT_TOKENS
        return filled

    @model_validator(mode="after")
    def _time_resolution(self) -> WorkloadConfig:
        span = expected_span_s(self)
        if span > MAX_SIMULATED_S:
            raise ValueError(
                f"the arrivals alone span ~{span:.3g} s of simulated time; past "
                f"{MAX_SIMULATED_S:.3g} s (136 years) float64 seconds resolve less than 1 us "
                "and latencies lose their precision. Raise the rate or lower num_requests"
            )
        return self

    @model_validator(mode="after")
    def _consistent(self) -> WorkloadConfig:
        is_trace = isinstance(self.arrival, TraceArrivalConfig)
        for key in ("prompt_tokens", "output_tokens"):
            if isinstance(getattr(self, key), TraceLengthConfig) and not is_trace:
                raise ValueError(
                    f"{key}: distribution 'trace' needs arrival.process 'trace', "
                    f"got {self.arrival.process!r}"
                )
        arrival = self.arrival
        if self.sessions is not None and is_trace:
            raise ValueError(
                "sessions: a trace replays recorded arrivals; sessions need arrival.process "
                "poisson, gamma or closed_loop"
            )
        cap = getattr(arrival, "max_concurrency", None)
        if cap is not None and self.sessions is not None:
            raise ValueError(
                "arrival.max_concurrency: a cap on requests in flight does not combine with "
                "sessions; drop one of them"
            )
        if isinstance(arrival, ClosedLoopArrivalConfig) and arrival.concurrency > self.num_requests:
            raise ValueError(
                f"arrival.concurrency: {arrival.concurrency} clients exceed "
                f"num_requests {self.num_requests}"
            )
        return self


def expected_span_s(workload: WorkloadConfig) -> float:
    """A lower bound on the simulated time the arrivals span: conversations over the rate for
    open loops, rounds of think time for closed loops, plus the think time between turns."""
    arrival = workload.arrival
    turns = workload.sessions.num_turns if workload.sessions is not None else 1
    conversations = -(-workload.num_requests // turns)
    between_turns = (turns - 1) * (workload.sessions.think_time_s if workload.sessions else 0.0)
    if isinstance(arrival, PoissonArrivalConfig | GammaArrivalConfig):
        return conversations / arrival.rate_per_s + between_turns
    if isinstance(arrival, ClosedLoopArrivalConfig):
        return (conversations // arrival.concurrency) * arrival.think_time_s + between_turns
    return 0.0
