"""Build a serving node from a scenario, run it, and collect its result.

The lifecycle is named and linear: resolve the scenario (preset defaults filled in:
:mod:`sim.node_settings`) → build the workload, the drafting strategy, the acceptance plans, the
KV pool and the engine (:mod:`sim.build`) → run the SimPy node until every request has finished →
summarise the flat records (here). :func:`build_simulation`, :class:`Simulation`,
:func:`resolve_engine` and :func:`resolved_document` are importable from here too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import simpy

from sim import __version__
from sim.build import Simulation, build_simulation
from sim.engine.memory import MemoryPlan
from sim.engine.node import ServingNode
from sim.engine.recorder import CHUNK_ROWS, STEP_COLUMNS
from sim.metrics import summarize
from sim.node_settings import resolve_engine, resolved_document
from sim.scenario import Scenario
from sim.step_stats import MemorySteps, StepFile, StepSource
from sim.summary import Summary

__all__ = [
    "REQUEST_COLUMNS",
    "ScenarioResult",
    "Simulation",
    "build_simulation",
    "execute",
    "resolve_engine",
    "resolved_document",
    "run_scenario",
]

REQUEST_COLUMNS = (
    "prompt_tokens",
    "output_tokens",
    "arrival_at_s",
    "engine_arrival_at_s",
    "scheduled_at_s",
    "first_token_at_s",
    "finished_at_s",
    "num_preemptions",
    "num_decode_steps",
    "num_drafted",
    "num_accepted",
    "num_cached_tokens",
    "prefix_id",
    "session_id",
)


@dataclass
class ScenarioResult:
    """A finished run: summary, flat records, the resolved scenario and how it was produced."""

    summary: Summary
    requests: dict[str, np.ndarray]
    steps: dict[str, np.ndarray]
    resolved_scenario: dict[str, Any]
    memory: MemoryPlan
    #: Inter-token gaps spanning more than one step, and when each ended (ITL's other samples).
    irregular_itl: tuple[np.ndarray, np.ndarray] = field(
        default_factory=lambda: (np.zeros(0), np.zeros(0))
    )
    #: Where the step records were written as the run went (then ``steps`` is empty).
    steps_file: Path | None = None

    def step_source(self) -> StepSource:
        """The step records, from memory or from the file they were streamed to."""
        return StepFile(self.steps_file) if self.steps_file is not None else MemorySteps(self.steps)


def execute(
    simulation: Simulation,
    progress: Callable[[int], None] | None = None,
    *,
    steps_to: Path | None = None,
    chunk_rows: int = CHUNK_ROWS,
    node: ServingNode | None = None,
) -> ScenarioResult:
    """Run a built simulation to completion and summarise it.

    ``node``: the simulation's node, already started and paused by its caller
    (``node.env.run(until=t)``); the run continues it, and ends as one run from the start would.

    ``steps_to``: a folder to write the step records into as the run goes (``steps.parquet``,
    or ``steps.csv`` without pyarrow), ``chunk_rows`` steps at a time, instead of holding them;
    the file appears under its name only when the run ends, and a failed or interrupted run
    leaves none (:class:`sim.results.StepStreamWriter`). The summary is then read from the file,
    and is the one the run held in memory would give. Raise ValueError if ``steps_to`` is given
    for a simulation built to keep only the summary's step columns, or with ``node``.
    """
    if steps_to is not None and node is not None:
        raise ValueError("steps_to: a continued run's earlier steps were not streamed")
    if steps_to is not None and len(simulation.core.recorder.column_names) != len(STEP_COLUMNS):
        raise ValueError("steps_to: the simulation keeps only some step columns (step_records)")
    started = time.perf_counter()
    if node is None:
        node = ServingNode(simpy.Environment(), simulation.core, simulation.arrivals, progress)
    env = node.env
    core = simulation.core
    steps_file = None
    if steps_to is None:
        env.run(until=node.process)
    else:
        from sim.results import StepStreamWriter, steps_file_name

        with StepStreamWriter(steps_to / steps_file_name()) as writer:
            core.recorder.stream_to(writer, chunk_rows)
            env.run(until=node.process)
            core.recorder.flush()
        steps_file = writer.path
    wall = time.perf_counter() - started
    requests = {name: getattr(core.requests, name) for name in REQUEST_COLUMNS}
    egress_s = simulation.engine.frontend.egress_s
    if egress_s > 0:
        # The client sees every streamed chunk egress_s after the engine emits it.
        for name in ("first_token_at_s", "finished_at_s"):
            requests[name] = requests[name] + egress_s
    steps = {} if steps_file is not None else core.recorder.columns()
    source = StepFile(steps_file) if steps_file is not None else MemorySteps(steps)
    irregular, irregular_at = core.recorder.irregular_itl()
    scenario = simulation.scenario
    summary = summarize(
        requests,
        source,
        irregular,
        irregular_at,
        scenario.measurement.warmup_requests,
        simulation.memory.num_blocks,
        scenario=scenario.name,
        method=scenario.speculation.method,
        seed=scenario.seed,
        prefix_caching=simulation.engine.enable_prefix_caching,
        trim_fractions=scenario.measurement.trim_fractions,
        goodput_ms=scenario.measurement.goodput,
    )
    summary = replace(summary, wall_time_s=wall, specsim_version=__version__)
    resolved = resolved_document(scenario, simulation.engine)
    memory = simulation.memory
    resolved["derived"] = {
        "strategy": simulation.strategy.describe(),
        "kv_cache": {
            "num_blocks": memory.num_blocks,
            "block_size": memory.block_size,
            "num_tokens": memory.num_kv_tokens,
            "kv_bytes_per_token_per_gpu": memory.kv_bytes_per_token,
            "weight_bytes_per_gpu": memory.weight_bytes,
            "activation_bytes_per_gpu": memory.activation_bytes,
        },
    }
    return ScenarioResult(
        summary, requests, steps, resolved, memory, (irregular, irregular_at), steps_file
    )


def run_scenario(
    scenario: Scenario,
    base_dir: Path,
    progress: Callable[[int], None] | None = None,
    *,
    steps_to: Path | None = None,
    **build: Any,
) -> ScenarioResult:
    """Build and run ``scenario`` (a fleet when it has a ``fleet`` section: see
    :func:`sim.fleet.runner.run_fleet`); see :func:`build_simulation` for the errors and
    :func:`execute` for ``steps_to`` (a fleet holds its replicas' steps and ignores it)."""
    if scenario.fleet is not None:
        from sim.fleet.runner import run_fleet

        return run_fleet(scenario, base_dir, progress, **build)
    return execute(build_simulation(scenario, base_dir, **build), progress, steps_to=steps_to)
