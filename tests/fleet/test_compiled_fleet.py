"""The compiled fleet (sim/fleet/compiled_fleet.py) against the SimPy fleet it stands in for.

Over random fleets (size, load, router, speculation, batch and KV limits, seed) the records must
be the SimPy path's bit for bit: every request's row, every step's row, the summary (replica by
replica). Least-outstanding routing breaks ties with the router's stream, so any difference in
a replica's state at an arrival, or in the draws, moves requests between replicas and shows up.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.build import build_simulation
from sim.catalogue import get_gpu
from sim.engine import compiled_loop
from sim.fleet import compiled_fleet
from sim.run import ScenarioResult, run_scenario
from tests.fleet.helpers import scenario

pytestmark = pytest.mark.skipif(not compiled_loop.load(), reason="numba is not installed")


def _same(compiled: ScenarioResult, reference: ScenarioResult) -> None:
    assert compiled.requests.keys() == reference.requests.keys()
    for name, column in reference.requests.items():
        np.testing.assert_array_equal(compiled.requests[name], column, err_msg=name)
    assert compiled.steps.keys() == reference.steps.keys()
    for name, column in reference.steps.items():
        np.testing.assert_array_equal(compiled.steps[name], column, err_msg=name)
    a, b = compiled.summary.to_dict(), reference.summary.to_dict()
    a.pop("wall_time_s")
    b.pop("wall_time_s")
    assert a == b


#: KV blocks of the tight pool: the longest request (1,500 + 300 tokens, 113 blocks of 16 with
#: EAGLE-3's draft slots) fits, and a few dozen requests at once do not.
TIGHT_POOL_BLOCKS = 160


@functools.cache
def _tight_utilization(method: str) -> float:
    """The ``gpu_memory_utilization`` whose KV pool holds :data:`TIGHT_POOL_BLOCKS` blocks on the
    fleet's node (from its own memory plan, so it follows the plan's activation and reserve
    terms)."""
    built = build_simulation(scenario(None, {"method": method}), Path("."))
    m = built.memory
    need = m.weight_bytes + m.activation_bytes + m.reserved_bytes
    need += (TIGHT_POOL_BLOCKS + 0.5) * m.block_size * m.kv_bytes_per_token
    return need / get_gpu(built.scenario.hardware.gpu).memory_bytes


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record each outcome of the compiled driver (True: it ran the fleet to the end)."""
    outcomes: list[bool] = []
    original = compiled_fleet.run

    def run(*args: Any, **kwargs: Any) -> bool:
        outcomes.append(original(*args, **kwargs))
        return outcomes[-1]

    monkeypatch.setattr(compiled_fleet, "run", run)
    return outcomes


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    num_replicas=st.integers(min_value=1, max_value=5),
    rate=st.floats(min_value=5.0, max_value=200.0),
    router=st.sampled_from(["round_robin", "least_outstanding"]),
    method=st.sampled_from(["none", "eagle3"]),
    max_num_seqs=st.sampled_from([None, 3, 16]),
    tight=st.booleans(),
    seed=st.integers(min_value=0, max_value=10_000),
)
def test_compiled_fleet_gives_the_simpy_fleets_records(
    monkeypatch: pytest.MonkeyPatch,
    num_replicas: int,
    rate: float,
    router: str,
    method: str,
    max_num_seqs: int | None,
    tight: bool,
    seed: int,
) -> None:
    engine: dict[str, Any] = {}
    if max_num_seqs is not None:
        engine["max_num_seqs"] = max_num_seqs
    if tight:
        engine["gpu_memory_utilization"] = _tight_utilization(method)
    fleet = {"replicas": [{"count": num_replicas, "engine": engine}], "router": router}
    loaded = scenario(
        fleet,
        {"method": method},
        num_requests=150,
        arrival={"process": "poisson", "rate_per_s": rate},
    ).model_copy(update={"seed": seed})
    outcomes = _counting(monkeypatch)
    compiled = run_scenario(loaded, Path("."))
    assert len(outcomes) == 1, "the compiled fleet applies to this fleet"
    reference = run_scenario(loaded, Path("."), fleet_compiled=False)
    _same(compiled, reference)
    if not compiled.requests["num_preemptions"].any():
        _queue_law(compiled)


def _queue_law(result: ScenarioResult) -> None:
    """Without preemption, a step's ``num_waiting`` is the requests of its replica that arrived
    by its start and were not admitted before it (those it admits were waiting at its start)."""
    r, steps = result.requests, result.steps
    for start, replica, waiting in zip(
        steps["start_at_s"], steps["replica"], steps["num_waiting"], strict=True
    ):
        queued = (
            (r["replica"] == replica)
            & (r["engine_arrival_at_s"] <= start)
            & (r["scheduled_at_s"] >= start)
        )
        assert int(queued.sum()) == waiting


def test_least_outstanding_ties_draw_the_routers_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """At a low rate every replica is idle at most arrivals: each is a tie among all replicas,
    broken by one draw of ``fleet.router``; the compiled driver draws the same numbers."""
    loaded = scenario(
        {"replicas": 4, "router": "least_outstanding"},
        num_requests=200,
        arrival={"process": "poisson", "rate_per_s": 2.0},
    )
    outcomes = _counting(monkeypatch)
    compiled = run_scenario(loaded, Path("."))
    assert outcomes == [True]
    reference = run_scenario(loaded, Path("."), fleet_compiled=False)
    _same(compiled, reference)
    # Not all to one replica: the draws spread the tied arrivals.
    assert len(np.unique(compiled.requests["replica"])) == 4
