"""Little's law across a fleet, and each replica's step records against its requests.

Over the measurement window the area under the fleet's N(t) equals throughput × mean end-to-end
latency × window length (request-seconds counted two ways). Independently, at every step start a
replica's own records must count exactly the requests routed to it that have arrived and not
finished: its sequences, minus those the step admits, plus those waiting.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.fleet.helpers import run


def _area(arrival: np.ndarray, finish: np.ndarray, start: float, end: float) -> float:
    times = np.concatenate([arrival, finish, [start, end]])
    deltas = np.concatenate([np.ones(len(arrival)), -np.ones(len(finish)), [0.0, 0.0]])
    order = np.argsort(times, kind="stable")
    times, deltas = times[order], deltas[order]
    in_system = np.cumsum(deltas)[:-1]
    return float((in_system * np.diff(np.clip(times, start, end))).sum())


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding", "least_kv"])
def test_littles_law_fleet_wide(router: str) -> None:
    result = run(
        {"replicas": 3, "router": router}, arrival={"process": "poisson", "rate_per_s": 60}
    )
    r, s = result.requests, result.summary
    start, end = s.measurement_window_s
    area = _area(r["arrival_at_s"], r["finished_at_s"], start, end)
    little = s.request_throughput_req_s * s.e2e_latency_ms.mean / 1e3
    assert area / (end - start) == pytest.approx(little, rel=1e-9)
    # The fleet holds several requests at once on average: the law is not checked at N = 0.
    assert little > 3


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding"])
def test_each_replicas_steps_count_its_requests(router: str) -> None:
    result = run(
        {"replicas": 3, "router": router}, arrival={"process": "poisson", "rate_per_s": 60}
    )
    r, steps = result.requests, result.steps
    assert result.summary.num_preemptions == 0
    for index in range(3):
        mine = r["replica"] == index
        rows = steps["replica"] == index
        starts = steps["start_at_s"][rows]
        arrival, finish = r["arrival_at_s"][mine], r["finished_at_s"][mine]
        arrived = (arrival[None, :] <= starts[:, None]).sum(axis=1)
        left = (finish[None, :] <= starts[:, None]).sum(axis=1)
        admitted = (r["scheduled_at_s"][mine][None, :] == starts[:, None]).sum(axis=1)
        recorded = steps["num_seqs"][rows].astype(np.int64) - admitted + steps["num_waiting"][rows]
        assert np.array_equal(recorded, arrived - left)
