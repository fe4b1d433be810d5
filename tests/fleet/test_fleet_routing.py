"""Routing invariants, checked on the fleet's own records.

Every request is served by exactly one replica, once; round robin deals requests in turn; least
outstanding never picks a replica that had strictly more outstanding requests than another at the
arrival (recomputed from the records, independently of the router's own bookkeeping); a
one-replica fleet is the plain node, record for record; and runs are reproducible.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.run import run_scenario
from sim.scenario import validate_document
from tests.fleet.helpers import document, run

ROUTERS = ["round_robin", "least_outstanding", "least_kv"]


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))


@pytest.mark.parametrize("router", ROUTERS)
@pytest.mark.parametrize("method", ["none", "eagle3"])
def test_one_replica_fleet_is_the_plain_node(router: str, method: str) -> None:
    speculation = {"method": method}
    if method != "none":
        speculation["acceptance"] = {"alpha": 0.7}  # type: ignore[assignment]
    # A fleet has no per-replica front end (its router stands in front of the replicas), so the
    # plain node it must equal is one without a front end.
    plain = document(None, speculation=speculation, num_requests=200)
    plain["engine"] = {"frontend": {"enabled": False}}
    node = run_scenario(validate_document(plain, "fleet-test"), Path("."))
    fleet = run({"replicas": 1, "router": router}, speculation=speculation, num_requests=200)
    for name, column in node.requests.items():
        assert _same(column, fleet.requests[name]), name
    for name, column in node.steps.items():
        assert _same(column, fleet.steps[name]), name
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_latency_ms", "num_steps", "sim_duration_s"):
        assert getattr(node.summary, key) == getattr(fleet.summary, key), key


@pytest.mark.parametrize("router", [*ROUTERS, "session_affinity"])
def test_every_request_is_served_once_by_one_replica(router: str) -> None:
    fleet = {"replicas": [{"count": 2}, {"count": 1, "hardware": {"gpu": "h200"}}]}
    fleet["router"] = {"policy": router, "num_sessions": 20}  # type: ignore[assignment]
    result = run(fleet)
    r = result.requests
    replica = r["replica"]
    assert ((replica >= 0) & (replica < 3)).all()
    assert not np.isnan(r["finished_at_s"]).any()
    per_replica = result.summary.fleet.replicas
    assert sum(p.num_routed for p in per_replica) == len(replica)
    assert [p.num_routed for p in per_replica] == np.bincount(replica, minlength=3).tolist()
    assert sum(p.measures.num_completed for p in per_replica) == len(replica)
    # Each replica's steps emitted exactly the output tokens of the requests it served.
    steps = result.steps
    for index in range(3):
        emitted = steps["num_emitted_tokens"][steps["replica"] == index].sum()
        assert emitted == r["output_tokens"][replica == index].sum()


def test_round_robin_deals_in_turn() -> None:
    result = run({"replicas": 4, "router": "round_robin"}, num_requests=203)
    r = result.requests
    order = np.argsort(r["arrival_at_s"], kind="stable")
    assert np.array_equal(r["replica"][order], np.arange(203) % 4)
    counts = np.bincount(r["replica"])
    assert counts.max() - counts.min() <= 1


def _outstanding_at_arrivals(r: dict[str, np.ndarray], num_replicas: int) -> np.ndarray:
    """Outstanding requests of each replica as each request arrived, from the records alone:
    requests routed there earlier (in routing order) minus those finished at or before then."""
    order = np.argsort(r["arrival_at_s"], kind="stable")
    arrival = r["arrival_at_s"][order]
    replica = r["replica"][order]
    finish = r["finished_at_s"][order]
    out = np.zeros((len(order), num_replicas), dtype=np.int64)
    for k in range(num_replicas):
        mine = replica == k
        routed_before = np.cumsum(mine) - mine
        finished = np.sort(finish[mine])
        out[:, k] = routed_before - np.searchsorted(finished, arrival, side="right")
    return out, replica


@pytest.mark.parametrize("rate", [20.0, 80.0])
def test_least_outstanding_never_picks_a_busier_replica(rate: float) -> None:
    result = run(
        {"replicas": 3, "router": "least_outstanding"},
        arrival={"process": "poisson", "rate_per_s": rate},
    )
    outstanding, chosen = _outstanding_at_arrivals(result.requests, 3)
    picked = outstanding[np.arange(len(chosen)), chosen]
    assert (picked <= outstanding.min(axis=1)).all()
    assert outstanding.max() > 1  # the check bites: the replicas were busy, not all empty


def test_session_affinity_keeps_sessions_together_until_overloaded() -> None:
    result = run({"replicas": 3, "router": {"policy": "session_affinity", "num_sessions": 12}})
    from sim.fleet.routers import session_hash
    from sim.random_streams import RandomStreams

    sessions = RandomStreams(3).stream("fleet.sessions").integers(12, size=240)
    home = (session_hash(sessions) % np.uint64(3)).astype(np.int64)
    # Defaults (64 / 1.5) are never exceeded by 240 requests at this load: all go home.
    assert np.array_equal(result.requests["replica"], home)
    tight = run(
        {
            "replicas": 3,
            "router": {
                "policy": "session_affinity",
                "num_sessions": 12,
                "balance_abs_threshold": 0,
                "balance_rel_threshold": 1.0,
            },
        }
    )
    assert not np.array_equal(tight.requests["replica"], home)


def test_runs_are_reproducible_and_the_seed_matters() -> None:
    fleet = {"replicas": 3, "router": "least_outstanding"}
    first, second = run(fleet), run(fleet)
    assert np.array_equal(first.requests["replica"], second.requests["replica"])
    assert first.summary.ttft_ms == second.summary.ttft_ms


@pytest.mark.parametrize(
    "fleet",
    [
        {"replicas": 3, "router": "least_outstanding"},
        {"replicas": 3, "router": "least_kv"},
        {"replicas": [{"count": 2}, {"count": 1, "hardware": {"gpu": "a100-80gb"}}]},
        {"disaggregation": {"prefill": 1, "decode": 2}, "router": "least_outstanding"},
    ],
)
def test_lookahead_changes_nothing_but_speed(fleet: dict) -> None:
    # Planning past unrouted arrivals and cutting on routing must give exactly the records of
    # stopping every replica at every arrival, which is correct by construction.
    from pathlib import Path

    from sim.run import run_scenario
    from tests.fleet.helpers import scenario

    loaded = scenario(fleet, arrival={"process": "poisson", "rate_per_s": 60})
    fast = run_scenario(loaded, Path("."))
    plain = run_scenario(loaded, Path("."), fleet_lookahead=False)
    for name, column in plain.requests.items():
        assert _same(column, fast.requests[name]), name
    for name, column in plain.steps.items():
        assert _same(column, fast.steps[name]), name


@pytest.mark.parametrize("router", ROUTERS)
def test_one_replica_fleet_is_the_plain_node_under_async_scheduling(router: str) -> None:
    # A replica admits by the engine's own rule: under async scheduling an arrival during step n
    # joins step n+2 in a fleet as on a lone node.
    plain = document(None, num_requests=200)
    plain["engine"] = {"preset": "vllm-v1-async", "frontend": {"enabled": False}}
    node = run_scenario(validate_document(plain, "fleet-test"), Path("."))
    routed = document({"replicas": 1, "router": router}, num_requests=200)
    routed["engine"] = {"preset": "vllm-v1-async"}
    fleet = run_scenario(validate_document(routed, "fleet-test"), Path("."))
    for name, column in node.requests.items():
        assert _same(column, fleet.requests[name]), name
    for name, column in node.steps.items():
        assert _same(column, fleet.steps[name]), name
