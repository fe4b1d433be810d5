"""The compiled stretch pass and the numpy reference path plan the same stretches.

``EngineCore.compiled`` picks :mod:`sim.engine.stretch_kernel`'s compiled loop (numba) or the
numpy arithmetic of :func:`sim.engine.stretch_drafts._drafts` for a stretch with drafts (after
``compile_after`` stretches in numpy); both are integer arithmetic, so every record must be
identical, bit for bit, whatever the workload and wherever the switch falls.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from sim.engine import stretch_kernel
from sim.run import REQUEST_COLUMNS, build_simulation, execute
from sim.scenario import validate_document

from .harness import EngineSetup, build_core, drive_node, record_of, tight_pool
from .strategies import engine_setups
from .test_fast_forward import SCENARIOS, _assert_identical

pytestmark = pytest.mark.skipif(
    stretch_kernel.compiled() is None, reason="numba is not installed: only the numpy path runs"
)


def _drive(setup: EngineSetup, compiled: bool) -> dict[str, Any]:
    core = build_core(setup)
    core.compiled = compiled
    core.compile_after = 2  # numpy for the first two stretches, then compiled: a switch mid-run
    return record_of(drive_node(setup, core=core)[0])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=engine_setups(speculative=True))
def test_identical_records_with_random_acceptance_plans(setup: EngineSetup) -> None:
    _assert_identical(_drive(setup, compiled=True), _drive(setup, compiled=False))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_identical_records_for_whole_scenarios(name: str) -> None:
    document = SCENARIOS[name]
    if name.endswith("kv-pressure"):
        document = tight_pool(document)
    scenario = validate_document(document, name)
    results = []
    for compiled in (True, False):
        simulation = build_simulation(scenario, Path("."))
        simulation.core.compiled = compiled
        simulation.core.compile_after = 0
        results.append(execute(simulation))
    fast, reference = results
    _assert_identical(fast.steps, reference.steps)
    _assert_identical(
        {k: fast.requests[k] for k in REQUEST_COLUMNS},
        {k: reference.requests[k] for k in REQUEST_COLUMNS},
    )
    assert replace(fast.summary, wall_time_s=None) == replace(reference.summary, wall_time_s=None)
