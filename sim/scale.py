"""Before a run: how many records it will keep and roughly how long it will take.

A run keeps one row per request (:data:`sim.run.REQUEST_COLUMNS`, 8 bytes each) and one row per
engine step (:data:`sim.engine.recorder.STEP_COLUMNS`) in memory until it ends, unless it writes
its step records as it goes (``specsim run``: then it holds one chunk of them). The number of
steps is bounded two ways, and the estimate is the smaller:

- by work: no step emits fewer than one token for the sequences it decodes, so a run takes at most
  ``num_requests × mean output tokens`` decode steps (plus one prefill step per request);
- by time, for open-loop arrivals: the node is busy at most for the arrival span
  ``num_requests / rate`` plus the drain, and no step is shorter than reading the weights once,
  ``weight bytes per GPU / HBM bandwidth`` (the memory-bound floor of a decode step).

For the default scenario at 1,000,000 requests this gives 52M steps (5.6 GB of step records), the
size issue 15 measured (a 5.3 GB ``steps.csv`` and 7.6 GB peak). Above :data:`WARN_BYTES` or
:data:`WARN_SECONDS` the command warns; when the records would not fit in half the memory
available now, or a run that streams its steps would take over :data:`REFUSE_SECONDS`, it
refuses unless ``--yes`` is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from sim.errors import ScenarioError, SpecsimError
from sim.scenario import Scenario

#: Warn above a gigabyte of in-memory records, or ten minutes of expected wall time.
WARN_BYTES = 1e9
WARN_SECONDS = 600.0
#: A run that writes its steps as it goes holds little, so its length is what is refused
#: without ``--yes``: above an hour of expected wall time.
REFUSE_SECONDS = 3600.0
#: Wall time per engine step of a ``specsim run``, measured by benchmarks/bench_scale.py on the
#: default scenario (2 cores, start-up and writing included, the per-request part below taken
#: out: 9.4-9.7 us per step at 10,000 requests, 6.9-7.1 us at 100,000 and 1,000,000), rounded
#: up to the slowest. A coarse ETA: the step count it multiplies is an upper bound (1.8x the
#: steps the default scenario takes).
WALL_S_PER_STEP = 1.0e-5
#: Wall time per request for building the workload and summarising (same benchmark).
WALL_S_PER_REQUEST = 2e-5


@dataclass(frozen=True)
class RunEstimate:
    """Expected size of a run's in-memory records and its wall time."""

    num_requests: int
    num_steps: int | None
    request_bytes: int
    step_bytes: int
    wall_s: float | None

    @property
    def record_bytes(self) -> int:
        """Requests and steps together."""
        return self.request_bytes + self.step_bytes

    def describe(self) -> str:
        """One line: requests, steps, bytes and time."""
        steps = "an unknown number of" if self.num_steps is None else f"~{self.num_steps:,}"
        wall = "" if self.wall_s is None else f", roughly {_duration(self.wall_s)} to run"
        return (
            f"{self.num_requests:,} requests and {steps} engine steps: "
            f"~{self.record_bytes / 1e9:.2f} GB of records in memory{wall}"
        )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _mean_output_tokens(scenario: Scenario, base_dir: Path) -> float | None:
    """The exact mean output length of the scenario's distribution, or None for trace lengths."""
    from sim.workload.builder import _length_distribution
    from sim.workload.config import TraceLengthConfig

    workload = scenario.workload
    if isinstance(workload.output_tokens, TraceLengthConfig):
        return None
    try:
        distribution = _length_distribution(
            workload.output_tokens,
            workload.max_output_tokens,
            None,
            "workload.output_tokens",
            base_dir,
        )
    except ScenarioError:
        return None  # the run itself reports the unreadable file
    return float(distribution.mean)


def _min_step_s(scenario: Scenario) -> float | None:
    """The memory-bound floor of one decode step: the weights read once, over HBM bandwidth."""
    from sim.catalogue import get_gpu, get_model

    if scenario.fleet is not None:
        return None  # replicas step in parallel: the time bound does not hold per node
    try:
        model = get_model(scenario.model)
        gpu = get_gpu(scenario.hardware.gpu)
    except SpecsimError:  # a catalogue error is reported by the run itself
        return None
    per_gpu = model.weight_bytes / scenario.hardware.num_gpus
    return float(per_gpu / gpu.hbm_bandwidth_bytes_per_s)


def estimate_run(scenario: Scenario, base_dir: Path) -> RunEstimate:
    """The estimate for ``scenario`` (see the module's docstring for the bounds used)."""
    from sim.engine.recorder import STEP_COLUMNS
    from sim.run import REQUEST_COLUMNS
    from sim.workload.config import GammaArrivalConfig, PoissonArrivalConfig

    n = scenario.workload.num_requests
    request_bytes = n * (len(REQUEST_COLUMNS) + 3) * 8  # with id, ttft and e2e when written
    step_row = sum(np.dtype(dtype).itemsize for dtype in STEP_COLUMNS.values())
    mean_out = _mean_output_tokens(scenario, base_dir)
    bounds: list[float] = []
    if mean_out is not None:
        bounds.append(n * (mean_out + 1.0))
    arrival = scenario.workload.arrival
    floor_s = _min_step_s(scenario)
    if isinstance(arrival, PoissonArrivalConfig | GammaArrivalConfig) and floor_s:
        bounds.append(n / arrival.rate_per_s / floor_s)
    steps = int(min(bounds)) if bounds else None
    wall = None if steps is None else steps * WALL_S_PER_STEP + n * WALL_S_PER_REQUEST
    return RunEstimate(n, steps, request_bytes, (steps or 0) * step_row, wall)


def _available_bytes() -> float | None:
    try:
        import psutil
    except ImportError:
        return None
    return float(psutil.virtual_memory().available)


def preflight(
    scenario: Scenario,
    *,
    yes: bool,
    keep_steps: bool = True,
    warn: Callable[[str], object],
    base_dir: Path | None = None,
    copies: int = 1,
    parallel: bool = False,
    streamed: bool = False,
) -> RunEstimate:
    """Estimate a run before it starts: warn when it is large, refuse when it would not fit.

    ``copies`` runs of this size held at once (a comparison keeps every method's records; a sweep
    runs a point per worker) count ``copies`` times; their wall time too unless ``parallel``.
    ``streamed``: the run writes its step records as it goes and holds one chunk of them;
    otherwise ``keep_steps=False`` holds only the columns its summary reads.
    Raise ScenarioError if ``yes`` is false and the records would need more than half the memory
    available now, or a streamed run would take over :data:`REFUSE_SECONDS`.
    """
    from sim.engine.recorder import CHUNK_ROWS, STEP_COLUMNS, SUMMARY_COLUMNS

    single = estimate_run(scenario, base_dir or Path.cwd())
    if single.num_steps is not None and (streamed or not keep_steps):
        rows = min(single.num_steps, CHUNK_ROWS) if streamed else single.num_steps
        names = STEP_COLUMNS if streamed else SUMMARY_COLUMNS
        row = sum(np.dtype(STEP_COLUMNS[name]).itemsize for name in names)
        single = replace(single, step_bytes=rows * row)
    estimate = RunEstimate(
        single.num_requests * copies,
        None if single.num_steps is None else single.num_steps * copies,
        single.request_bytes * copies,
        single.step_bytes * copies,
        None if single.wall_s is None else single.wall_s * (1 if parallel else copies),
    )
    available = _available_bytes()
    held = f" ({copies} runs held at once)" if copies > 1 else ""
    if streamed and estimate.wall_s is not None and estimate.wall_s > REFUSE_SECONDS and not yes:
        raise ScenarioError(
            f"{estimate.describe()}{held}. Lower workload.num_requests, or pass --yes to run anyway"
        )
    if available is not None and estimate.record_bytes > available / 2 and not yes:
        raise ScenarioError(
            f"{estimate.describe()}{held}; only {available / 1e9:.1f} GB of memory is available. "
            "Lower workload.num_requests, or pass --yes to run anyway"
        )
    slow = estimate.wall_s is not None and estimate.wall_s > WARN_SECONDS
    if estimate.record_bytes > WARN_BYTES or slow:
        note = (
            " (step records written as the run goes)"
            if streamed
            else ""
            if keep_steps
            else " (the steps' summary columns are kept, not written)"
        )
        warn(f"warning: {estimate.describe()}{held}{note}")
    return estimate
