"""A drained warm-up: closed-loop clients run the warm-up requests as a phase of their own and
open the measured phase together, as aiperf does (its profiling phase starts when every
warm-up credit has returned, and its semaphore of ``concurrency`` credits then sends that many
requests at once)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine import compiled_loop
from sim.engine.frontend import FrontEnd
from sim.engine.node import ArrivalSchedule
from sim.errors import ScenarioError
from sim.run import build_simulation, execute
from sim.scenario import validate_document
from sim.validation.points import load_points
from sim.validation.scenarios import scenario_document


def _drive(
    schedule: ArrivalSchedule, durations: list[float], concurrency: int
) -> tuple[np.ndarray, np.ndarray]:
    """Serve every request ``durations[i]`` after it reaches the engine (requests never wait
    for one another): return when each client sent its request and when each finished."""
    n = schedule.num_requests
    finished = np.full(n, np.nan)
    in_flight: list[tuple[float, int]] = []
    while True:
        while schedule.next_at_s() < np.inf:
            ids, at = schedule.release_until(schedule.next_at_s())
            for request, t in zip(ids.tolist(), at.tolist(), strict=True):
                in_flight.append((t + durations[request], request))
        assert len(in_flight) <= concurrency
        if not in_flight:
            break
        in_flight.sort()
        end, request = in_flight.pop(0)
        finished[request] = end
        schedule.on_finish(np.array([request], dtype=np.int64), end)
    return schedule.client_at_s, finished


def test_the_measured_requests_wait_for_the_last_warm_up_request_then_start_together() -> None:
    # Three clients, four warm-up requests: 0-2 at once, 3 when 0 ends; 1 and 2 end before 3,
    # and their clients wait for it; then every client sends at 3's end.
    durations = [1.0, 2.0, 3.0, 4.0] + [1.0] * 6
    sent, finished = _drive(ArrivalSchedule(10, concurrency=3, drain_after=4), durations, 3)
    np.testing.assert_array_equal(sent[:4], [0.0, 0.0, 0.0, 1.0])
    assert finished[3] == 5.0
    np.testing.assert_array_equal(sent[4:7], [5.0, 5.0, 5.0])
    # Then the loop goes on client by client.
    np.testing.assert_array_equal(sent[7:], [6.0, 6.0, 6.0])


def test_without_a_drain_the_clients_go_straight_on() -> None:
    durations = [1.0, 2.0, 3.0, 4.0] + [1.0] * 6
    sent, _ = _drive(ArrivalSchedule(10, concurrency=3), durations, 3)
    # 0 ends at 1 (3 leaves), 1 at 2 (4 leaves, ends at 3), 2 and 4 at 3 (5 and 6 leave).
    np.testing.assert_array_equal(sent[:7], [0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 3.0])


@settings(max_examples=60, deadline=None)
@given(
    concurrency=st.integers(1, 6),
    num_requests=st.integers(2, 30),
    drain=st.integers(1, 29),
    durations=st.lists(st.floats(0.01, 5.0), min_size=30, max_size=30),
    egress=st.sampled_from([0.0, 0.003]),
)
def test_no_measured_request_leaves_before_the_warm_up_is_seen_to_end(
    concurrency: int, num_requests: int, drain: int, durations: list[float], egress: float
) -> None:
    drain = min(drain, num_requests - 1)
    frontend = FrontEnd(enabled=egress > 0, egress_per_chunk_s=egress)
    schedule = ArrivalSchedule(
        num_requests,
        concurrency=concurrency,
        drain_after=drain,
        frontend=frontend,
        prompt_tokens=np.ones(num_requests, dtype=np.int64),
    )
    sent, finished = _drive(schedule, durations, concurrency)
    assert np.isfinite(sent).all() and np.isfinite(finished).all()  # every request served
    seen = finished[:drain].max() + egress
    assert (sent[drain:] >= seen).all()
    # The measured phase opens with every client at once (as many as there are requests).
    opening = sent[drain : drain + concurrency]
    np.testing.assert_array_equal(opening, np.full(len(opening), seen))
    # Requests leave in order.
    assert (np.diff(sent) >= 0).all()


def test_a_drain_needs_closed_loop_clients_and_a_warm_up() -> None:
    with pytest.raises(ValueError, match="closed-loop"):
        ArrivalSchedule(5, arrival_at_s=np.zeros(5), drain_after=2)
    base: dict[str, Any] = {
        "workload": {"num_requests": 10, "arrival": {"process": "closed_loop", "concurrency": 2}}
    }
    with pytest.raises(ScenarioError, match="warmup_requests > 0"):
        validate_document({**base, "measurement": {"warmup_drained": True}}, "t")
    open_loop = {"workload": {"num_requests": 10, "arrival": {"process": "poisson"}}}
    with pytest.raises(ScenarioError, match="closed_loop"):
        validate_document(
            {**open_loop, "measurement": {"warmup_requests": 2, "warmup_drained": True}}, "t"
        )


def _closed_loop(
    seed: int, warmup: int, drained: bool, num_requests: int, concurrency: int, **engine: Any
) -> Any:
    """Build a closed loop of mixed lengths with ``warmup`` warm-up requests."""
    document = {
        "seed": seed,
        "engine": engine,
        "measurement": {"warmup_requests": warmup, "warmup_drained": drained},
        "workload": {
            "num_requests": num_requests,
            "arrival": {"process": "closed_loop", "concurrency": concurrency},
            "prompt_tokens": {"distribution": "uniform", "low": 20, "high": 800},
            "output_tokens": {"distribution": "uniform", "low": 2, "high": 80},
        },
    }
    return build_simulation(validate_document(document, "closed loop"), Path("."))


def _run(drained: bool) -> tuple[Any, float]:
    sim = _closed_loop(1, 8, drained, 40, 4)
    return execute(sim), sim.arrivals.frontend.egress_s


def test_a_drained_run_opens_its_measured_phase_with_every_client_at_once() -> None:
    result, egress = _run(True)
    r = result.requests
    assert egress > 0  # the preset's front end: finishes count when the client sees them
    seen = float(np.max(r["finished_at_s"][:8]))
    np.testing.assert_allclose(r["arrival_at_s"][8:12], seen, rtol=0, atol=1e-12)
    assert (r["arrival_at_s"][8:] >= seen - 1e-12).all()
    # Without the drain the clients overlap the two phases.
    plain = _run(False)[0].requests
    assert float(np.min(plain["arrival_at_s"][8:12])) < float(np.max(plain["finished_at_s"][:8]))


def test_the_compiled_loop_leaves_a_drained_run_to_the_python_path() -> None:
    sim = build_simulation(
        validate_document(
            {
                "measurement": {"warmup_requests": 4, "warmup_drained": True},
                "workload": {
                    "num_requests": 20,
                    "arrival": {"process": "closed_loop", "concurrency": 2},
                },
            },
            "t",
        ),
        Path("."),
    )
    assert sim.arrivals.drain_after == 4
    assert compiled_loop.for_node(sim.core, sim.arrivals, lambda count: None) is None


def test_the_aiperf_points_run_with_a_drained_warm_up() -> None:
    points = [p for p in load_points() if p.arrival == "closed_loop" and p.warmup_requests]
    assert points
    for point in points[:20]:
        try:
            document = scenario_document(point)
        except ValueError:
            continue  # not expressible: no scenario
        assert document["measurement"] == {
            "warmup_requests": point.warmup_requests,
            "warmup_drained": True,
        }


def test_a_drained_run_fast_forwarded_is_the_run_stepped() -> None:
    # The stretch planner's clients release nothing while the warm-up drains, then a wave.
    def run(fast: bool) -> Any:
        return execute(_closed_loop(5, 6, True, 30, 3, fast_forward=fast))

    fast, stepped = run(True), run(False)
    for name in ("arrival_at_s", "first_token_at_s", "finished_at_s"):
        np.testing.assert_allclose(fast.requests[name], stepped.requests[name], rtol=1e-12)
