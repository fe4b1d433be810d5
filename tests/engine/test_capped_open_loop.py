"""Open-loop arrivals under a cap on requests in flight (``vllm bench serve --max-concurrency``
with a finite ``--request-rate``): the benchmark's semaphore, request by request."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.run import build_simulation, execute
from sim.scenario import load_scenario


def _run(rate: float, cap: int | None, num_requests: int = 120):
    overrides = [f"workload.num_requests={num_requests}", f"workload.arrival.rate_per_s={rate}"]
    if cap is not None:
        overrides.append(f"workload.arrival.max_concurrency={cap}")
    scenario, base = load_scenario(None, overrides)
    simulation = build_simulation(scenario, base)
    due = np.array(simulation.workload.arrival_at_s, copy=True)
    return execute(simulation), due


@settings(max_examples=8, deadline=None)
@given(cap=st.integers(1, 12), rate=st.sampled_from([2.0, 20.0, 200.0]))
def test_never_more_than_the_cap_in_flight_and_never_early(cap: int, rate: float) -> None:
    result, due = _run(rate, cap)
    sent = result.requests["arrival_at_s"]
    finished = result.requests["finished_at_s"]
    assert np.all(sent >= due - 1e-12)
    # In flight at each send: requests sent before it (inclusive) that have not finished.
    for i in range(len(sent)):
        in_flight = np.sum((sent <= sent[i]) & (finished > sent[i]))
        assert in_flight <= cap
    # Sends keep request order, as the semaphore's waiters do.
    assert np.all(np.diff(sent) >= 0)


def test_a_cap_above_the_request_count_changes_nothing() -> None:
    capped, _ = _run(20.0, 10_000)
    free, _ = _run(20.0, None)
    for column in ("arrival_at_s", "first_token_at_s", "finished_at_s"):
        np.testing.assert_array_equal(capped.requests[column], free.requests[column])


def test_a_binding_cap_lowers_the_batch_and_delays_sends() -> None:
    capped, due = _run(200.0, 2)
    assert capped.summary.mean_batch_size <= 2.0 + 1e-9
    assert np.mean(capped.requests["arrival_at_s"] - due) > 0
