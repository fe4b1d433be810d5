"""The compiled loop is an optimisation only: with it on or off, every record is identical.

``sim.engine.compiled_loop`` runs a lone node's steps (open loop or closed-loop clients) in
compiled code (the scheduler's step, the cost evaluator, the requests' progress, completions,
the clients' next requests and the records), handing control back to the Python path for a
preemption. The Python path (the stretch planner and the scheduler) is
the reference: step rows, request rows and irregular ITL samples must match bit for bit
(``np.array_equal``, NaNs equal) over random small nodes (tight pools that preempt, small
budgets that chunk prompts, random acceptance plans) and whole scenarios.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings

from sim.engine import compiled_loop, loop_kernel
from sim.engine.core import EngineCore
from sim.run import REQUEST_COLUMNS, build_simulation, execute
from sim.scenario import load_scenario

from .harness import EngineSetup, Monitor, build_core, check_finished, drive_node, record_of
from .strategies import engine_setups
from .test_fast_forward import _assert_identical

pytest.importorskip("numba")

REFERENCE = Path(__file__).resolve().parents[2] / "benchmarks" / "reference_llama2_70b_a100.yaml"


def _compiled_core(setup: EngineSetup) -> EngineCore:
    core = build_core(setup)
    core.compiled_loop = True
    core.compiled_loop_min_requests = 0
    return core


def _both(setup: EngineSetup) -> tuple[int, int]:
    """Run ``setup`` with the compiled loop and on the Python path; return the steps the loop
    ran and all the steps, after checking that every record is the same (and saying whether
    requests were preempted)."""
    compiled_core = _compiled_core(setup)
    compiled_core, _ = drive_node(setup, core=compiled_core)
    python_core = build_core(setup)
    python_core, _ = drive_node(setup, core=python_core)
    check_finished(compiled_core)
    assert python_core.num_compiled_steps == 0
    _assert_identical(record_of(compiled_core), record_of(python_core))
    event(f"preempted: {bool(compiled_core.requests.num_preemptions.any())}")
    return compiled_core.num_compiled_steps, compiled_core.num_steps


EQUIVALENCE = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@EQUIVALENCE
@given(setup=engine_setups(speculative=False, policies=("in_place",)))
def test_identical_records_without_speculation(setup: EngineSetup) -> None:
    num_compiled, num_steps = _both(setup)
    assert num_compiled > 0  # every setup here is one the loop covers
    event(f"steps on the Python path: {num_compiled < num_steps}")


@EQUIVALENCE
@given(setup=engine_setups(speculative=True, policies=("in_place",)))
def test_identical_records_with_random_acceptance_plans(setup: EngineSetup) -> None:
    num_compiled, num_steps = _both(setup)
    assert num_compiled > 0
    event(f"steps on the Python path: {num_compiled < num_steps}")


def test_sessions_and_scratch_rollback_stay_on_the_python_path() -> None:
    # A session's next turn follows its answer and a capped open loop waits for a slot (Python
    # answers both); scratch rollback is not compiled.
    rng = np.random.default_rng(3)
    base: dict[str, Any] = dict(
        prompt_tokens=rng.integers(1, 40, 12),
        output_tokens=rng.integers(1, 30, 12),
        num_blocks=40,
        block_size=4,
        max_num_seqs=4,
        max_num_batched_tokens=64,
    )
    turns = np.full(12, -1)
    turns[:6] = np.arange(6, 12)
    first_turns = np.full(12, np.nan)  # later turns follow their predecessor's answer
    first_turns[:6] = 0.0
    for setup in (
        EngineSetup(**base, arrival_at_s=first_turns, next_turn=turns),
        EngineSetup(**base, rollback_policy="scratch", arrival_at_s=np.zeros(12)),
    ):
        core = _compiled_core(setup)
        core, _ = drive_node(setup, core=core)
        check_finished(core)
        assert core.num_compiled_steps == 0


def _scenario_records(
    overrides: list[str], loop: bool, path: Path = REFERENCE
) -> tuple[dict[str, Any], Any, EngineCore]:
    scenario, base_dir = load_scenario(path, overrides)
    simulation = build_simulation(scenario, base_dir)
    simulation.core.compiled_loop = loop
    simulation.core.compiled_loop_min_requests = 0
    result = execute(simulation)
    core = simulation.core
    records = {f"step.{k}": v.copy() for k, v in core.recorder.columns().items()}
    records.update({f"request.{k}": getattr(core.requests, k).copy() for k in REQUEST_COLUMNS})
    itl, itl_at = core.recorder.irregular_itl()
    records["itl.values"], records["itl.at"] = itl, itl_at
    summary = {k: v for k, v in result.summary.to_dict().items() if k != "wall_time_s"}
    return records, summary, core


@pytest.mark.parametrize(
    "overrides",
    [
        ["workload.arrival.rate_per_s=0.8"],
        ["workload.arrival.rate_per_s=6"],
        ["workload.arrival={process: closed_loop, concurrency: 64}"],
        # A pool a few requests fill: preemptions, which the Python path decides.
        ["workload.arrival.rate_per_s=20", "engine.gpu_memory_utilization=0.85"],
        [
            "workload.arrival.rate_per_s=3",
            "speculation.method=eagle3",
            "speculation.num_speculative_tokens=3",
            "speculation.acceptance.trace=llama-3.1-8b/sharegpt",
        ],
    ],
)
def test_reference_workload_identical(overrides: list[str]) -> None:
    overrides = ["workload.num_requests=300", *overrides]
    fast, fast_summary, core = _scenario_records(overrides, loop=True)
    slow, slow_summary, _ = _scenario_records(overrides, loop=False)
    assert core.num_compiled_steps > 0
    _assert_identical(fast, slow)
    assert fast_summary == slow_summary


def test_a_changed_evaluator_source_changes_the_loop_stamp() -> None:
    # The loop's disk cache holds the evaluator's machine code: its key must follow the source.
    stamp = loop_kernel._source_stamp()
    assert stamp >= 0
    assert loop_kernel._loop(stamp).__closure__ is not None
    cells = [cell.cell_contents for cell in loop_kernel._loop(stamp).__closure__ or ()]
    assert stamp in cells


@EQUIVALENCE
@given(setup=engine_setups(speculative=True, policies=("in_place",)))
def test_engine_properties_hold_between_compiled_steps(setup: EngineSetup) -> None:
    # The monitor's checks after every step (blocks held match committed tokens, nothing
    # emitted is lost, FCFS admissions, a preempted request recomputes what it knew), the loop
    # made to return after each step (its checks are per step: within an event of many steps a
    # request can be preempted, readmitted and finish).
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compiled_loop, "STEPS_PER_CALL", 1)
        core = _compiled_core(setup)
        monitor = Monitor(core, setup.max_accepted)
        core, _ = drive_node(setup, observer=monitor, core=core)
    check_finished(core)
    assert core.num_compiled_steps > 0
