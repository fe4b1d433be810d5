"""Little's law on the simulator's own records, and the empty-system limit.

Over any interval ``[a, b]`` the area under N(t), the number of requests in the system, equals the
sum over requests of the time each spent inside ``[a, b]`` (both count request-seconds). Over the
summary's measurement window (first measured arrival to last measured finish) every measured
request is wholly inside, so the area is ``λ·W̄·T`` (throughput × mean e2e × window length) plus
the time warm-up requests spent in the window: that edge term is the whole tolerance, computed
exactly. The step records give a second, independent N(t): each step records the sequences it ran
and the requests waiting when it started.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sim.cost_model import StepShape
from sim.run import ScenarioResult, build_simulation, execute
from sim.scenario import validate_document


def _run(**workload: Any) -> tuple[ScenarioResult, Any]:
    document = {
        "seed": 4,
        "measurement": {"warmup_requests": workload.pop("warmup_requests", 0)},
        "workload": {
            "num_requests": 150,
            "arrival": {"process": "poisson", "rate_per_s": 8.0},
            "prompt_tokens": {"distribution": "uniform", "low": 20, "high": 1000},
            "output_tokens": {"distribution": "uniform", "low": 1, "high": 300},
            **workload,
        },
    }
    simulation = build_simulation(validate_document(document, "little"), Path("."))
    return execute(simulation), simulation


def _area(arrival: np.ndarray, finish: np.ndarray, start: float, end: float) -> float:
    """∫ N(t) dt over [start, end] by sweeping the arrival and departure events."""
    times = np.concatenate([arrival, finish, [start, end]])
    deltas = np.concatenate([np.ones(len(arrival)), -np.ones(len(finish)), [0.0, 0.0]])
    order = np.argsort(times, kind="stable")
    times, deltas = times[order], deltas[order]
    in_system = np.cumsum(deltas)[:-1]
    widths = np.diff(np.clip(times, start, end))
    return float((in_system * widths).sum())


@pytest.mark.parametrize("warmup_requests", [0, 30])
def test_littles_law_over_the_measurement_window(warmup_requests: int) -> None:
    result, _ = _run(warmup_requests=warmup_requests)
    r, s = result.requests, result.summary
    assert s.num_completed == 150 - warmup_requests
    window_start, window_end = s.measurement_window_s
    length = window_end - window_start
    area = _area(r["arrival_at_s"], r["finished_at_s"], window_start, window_end)
    throughput = s.request_throughput_req_s
    mean_e2e_s = s.e2e_latency_ms.mean / 1e3
    # Edge term: request-seconds that warm-up requests spent inside the window.
    warm = slice(0, warmup_requests)
    overlap = np.clip(
        np.minimum(r["finished_at_s"][warm], window_end)
        - np.maximum(r["arrival_at_s"][warm], window_start),
        0.0,
        None,
    )
    mean_in_system = area / length
    assert mean_in_system == pytest.approx(
        throughput * mean_e2e_s + overlap.sum() / length, rel=1e-9
    )
    if warmup_requests:
        assert overlap.sum() > 0  # the edge term is real, not vacuous
    else:
        assert mean_in_system == pytest.approx(throughput * mean_e2e_s, rel=1e-9)


def test_step_records_count_everyone_in_the_system() -> None:
    # With a generous token budget and pool every running request is in every step and none is
    # preempted. ``num_waiting`` counts the requests waiting at the step's start (glossary), so
    # those the step admits are counted there and among its sequences: the step's sequences minus
    # its admissions plus its waiting requests are exactly N(start). The engine's system is
    # counted on the engine's clock: from when a request leaves the front end
    # (``engine_arrival_at_s``) to when its last token is emitted (the client sees it an egress
    # later).
    result, simulation = _run()
    r, steps = result.requests, result.steps
    egress_s = simulation.engine.frontend.egress_s
    arrival = r["engine_arrival_at_s"]
    finished = r["finished_at_s"] - egress_s
    assert result.summary.num_preemptions == 0
    starts = steps["start_at_s"]
    arrived = (arrival[None, :] <= starts[:, None]).sum(axis=1)
    left = (finished[None, :] <= starts[:, None]).sum(axis=1)
    admitted = (r["scheduled_at_s"][None, :] == starts[:, None]).sum(axis=1)
    assert admitted.sum() == len(arrival)
    recorded = steps["num_seqs"].astype(np.int64) - admitted + steps["num_waiting"]
    assert np.array_equal(recorded, arrived - left)
    # The steps' N(t) misses only each arrival's wait for the next step to start (a request that
    # arrives mid-step is first counted by the next step), so its area falls short of Little's
    # by exactly that.
    ends = starts + steps["duration_s"]
    step_area = float((recorded * steps["duration_s"]).sum())
    total_area = float((finished - arrival).sum())
    # The step running when each request arrived (one that wakes an idle node starts the next step
    # itself and is counted from its arrival).
    during = np.maximum(np.searchsorted(starts, arrival, side="right") - 1, 0)
    inside = (arrival > starts[during]) & (arrival < ends[during])
    missed = float((ends[during[inside]] - arrival[inside]).sum())
    assert step_area == pytest.approx(total_area - missed, rel=1e-9)
    assert 0 < missed < total_area


def test_nobody_waits_when_the_system_is_nearly_empty() -> None:
    # As in an M/M/∞ queue: at 0.02 requests/s, a request almost never finds another in the
    # system; one that finds it empty is scheduled on arrival and its TTFT is exactly one lone
    # prefill step of its prompt.
    # On the engine's clock: from leaving the front end to emitting the first token.
    result, simulation = _run(num_requests=30, arrival={"process": "poisson", "rate_per_s": 0.02})
    r = result.requests
    egress_s = simulation.engine.frontend.egress_s
    arrival = r["engine_arrival_at_s"]
    finished = r["finished_at_s"] - egress_s
    previous_finish = np.maximum.accumulate(np.concatenate([[-np.inf], finished[:-1]]))
    alone = arrival >= previous_finish
    # 1 − exp(−0.02/s × a few seconds of service) of them meet someone: a handful at most.
    assert alone.sum() >= 25
    assert np.array_equal(r["scheduled_at_s"][alone], arrival[alone])
    prompt = r["prompt_tokens"][alone].astype(np.int64)
    shape = StepShape(
        num_seqs=np.ones(len(prompt), dtype=np.int64),
        num_tokens=prompt,
        num_logit_tokens=np.ones(len(prompt), dtype=np.int64),
        kv_read_tokens=prompt,
        attention_pairs=prompt * (prompt + 1) / 2.0,
    )
    prefill_s = simulation.core.cost_model.step_time(shape)
    ttft = r["first_token_at_s"][alone] - egress_s - arrival[alone]
    # Times are absolute seconds up to ~2,000 s, where a float's spacing is ~2e-13 s.
    assert np.allclose(ttft, prefill_s, rtol=0.0, atol=1e-9)
    assert result.summary.num_preemptions == 0
