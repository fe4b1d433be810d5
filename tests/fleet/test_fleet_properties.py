"""Properties over random fleets (hypothesis): whatever the size, load, router and seed, every
request is served once, the engine's invariants hold after every step of every replica, and
least-outstanding routing never picks a busier replica."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.run import run_scenario
from tests.fleet.helpers import scenario
from tests.fleet.test_fleet_routing import _outstanding_at_arrivals


@settings(max_examples=8, deadline=None)
@given(
    num_replicas=st.integers(min_value=2, max_value=5),
    rate=st.floats(min_value=5.0, max_value=150.0),
    router=st.sampled_from(["round_robin", "least_outstanding", "least_kv"]),
    seed=st.integers(min_value=0, max_value=10_000),
)
def test_random_fleets_keep_their_invariants(
    num_replicas: int, rate: float, router: str, seed: int
) -> None:
    loaded = scenario(
        {"replicas": num_replicas, "router": router},
        num_requests=120,
        arrival={"process": "poisson", "rate_per_s": rate},
    ).model_copy(update={"seed": seed})
    result = run_scenario(loaded, Path("."), check_invariants=True)
    r = result.requests
    assert not np.isnan(r["finished_at_s"]).any()
    assert np.bincount(r["replica"], minlength=num_replicas).sum() == 120
    assert (r["first_token_at_s"] >= r["arrival_at_s"]).all()
    assert (r["finished_at_s"] >= r["first_token_at_s"]).all()
    if router == "least_outstanding":
        outstanding, chosen = _outstanding_at_arrivals(r, num_replicas)
        picked = outstanding[np.arange(len(chosen)), chosen]
        assert (picked <= outstanding.min(axis=1)).all()
