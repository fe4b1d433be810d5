"""Stability verdicts on queues whose answer is known: a stable M/M/1 holds, an overloaded one
fails; MSER-5 finds a warm-up and flags a ramp; the number in system is integrated exactly."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from reports.goodput import GoodputTarget
from reports.slo import parse_slo
from reports.stability import FAILS, HOLDS, MAX_OVERLOAD, judge_run
from reports.warmup import mser5, time_average_in_system

TRIM = (0.2, 0.1)


def mm1(arrival_rate: float, service_rate: float, n: int, seed: int = 0) -> dict[str, Any]:
    """Request records of a FCFS single-server queue with Poisson arrivals and exponential
    service; the first token comes 1 ms after service starts, 10 output tokens."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / arrival_rate, n))
    service = rng.exponential(1.0 / service_rate, n)
    scheduled, finished = np.empty(n), np.empty(n)
    free_at = 0.0
    for i in range(n):
        scheduled[i] = max(arrival[i], free_at)
        finished[i] = free_at = scheduled[i] + service[i]
    return {
        "arrival_at_s": arrival,
        "scheduled_at_s": scheduled,
        "first_token_at_s": scheduled + 1e-3,
        "finished_at_s": finished + 1e-3,
        "output_tokens": np.full(n, 10),
    }


NO_STEPS: dict[str, Any] = {
    "start_at_s": np.zeros(0),
    "duration_s": np.zeros(0),
    "num_regular_itl": np.zeros(0, dtype=np.int32),
}


def _check(judgement: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in judgement["checks"] if c["name"] == name)


def test_a_stable_queue_holds_and_shows_no_backlog() -> None:
    # rho = 0.5: mean wait rho/(mu - lam) = 0.1 s, P(wait > 1 s) = rho·e^{-(mu-lam)} ≈ 2e-3.
    judgement = judge_run(mm1(5.0, 10.0, 6000), NO_STEPS, parse_slo("ttft_p99_ms<=2000"), TRIM)
    assert judgement["verdict"] == HOLDS and judgement["stability"] == HOLDS
    share = _check(judgement, "served_fraction")
    assert share["low"] >= 1 - MAX_OVERLOAD and share["low"] <= 1.0 <= share["high"]


def test_an_overloaded_queue_fails_on_throughput_and_backlog() -> None:
    # lam / mu = 1.2: the server serves 1/1.2 = 83% of the offered rate; waits grow at 0.2 s/s.
    judgement = judge_run(mm1(12.0, 10.0, 6000), NO_STEPS, [], TRIM)
    assert judgement["verdict"] == FAILS
    share, slope = _check(judgement, "served_fraction"), _check(judgement, "waiting_time_slope")
    assert share["verdict"] == FAILS and share["low"] <= 1 / 1.2 <= share["high"] + 0.02
    assert slope["verdict"] == FAILS and slope["low"] <= 0.2 <= slope["high"] + 0.05


def test_a_stable_queue_that_misses_its_slo_fails_on_the_slo_alone() -> None:
    # rho = 0.8: P(wait > 0.2 s) = 0.8·e^{-0.5} ≈ 0.49, so the p90 TTFT is far above 200 ms.
    judgement = judge_run(mm1(4.0, 5.0, 6000), NO_STEPS, parse_slo("ttft_p90_ms<=200"), TRIM)
    assert judgement["stability"] != FAILS and judgement["verdict"] == FAILS
    assert _check(judgement, "ttft_p90_ms")["verdict"] == FAILS


def test_a_goodput_target_is_the_share_of_requests_within_every_bound() -> None:
    records = mm1(5.0, 10.0, 6000)
    lenient = GoodputTarget({"ttft": 5000.0}, 0.99)
    strict = GoodputTarget({"ttft": 1.5, "e2el": 5000.0}, 0.99)  # ~half the requests wait
    assert judge_run(records, NO_STEPS, [lenient], TRIM)["verdict"] == HOLDS
    failing = judge_run(records, NO_STEPS, [strict], TRIM)
    assert _check(failing, "good_request_fraction")["verdict"] == FAILS


def test_time_average_in_system_integrates_exactly() -> None:
    # Request 0 in [0, 2), request 1 in [1, 4), request 2 never finishes (from 3 on).
    arrival = np.array([0.0, 1.0, 3.0])
    finished = np.array([2.0, 4.0, np.nan])
    got = time_average_in_system(arrival, finished, np.array([0.0, 1.0, 2.0, 4.0, 6.0]))
    # [0,1): 1; [1,2): 2; [2,4): 1 + (one more from 3 to 4) = 1.5; [4,6): 1.
    assert got == pytest.approx([1.0, 2.0, 1.5, 1.0])
    with pytest.raises(ValueError, match="increasing"):
        time_average_in_system(arrival, finished, np.array([1.0, 1.0]))


def test_mser5_finds_a_stationary_run_and_flags_a_growing_one() -> None:
    stable = mm1(5.0, 10.0, 6000)
    found = mser5(stable["arrival_at_s"], stable["finished_at_s"], stable["arrival_at_s"][-1])
    assert found.steady and found.fraction < 0.5
    overloaded = mm1(12.0, 10.0, 6000)
    ramp = mser5(
        overloaded["arrival_at_s"], overloaded["finished_at_s"], overloaded["arrival_at_s"][-1]
    )
    assert not ramp.steady


def test_point_figures_give_a_verdict_where_the_intervals_give_none() -> None:
    # rho = 0.5 holds on its point figures; rho = 1.2 serves 83% and its waits grow at 0.2 s/s.
    assert judge_run(mm1(5.0, 10.0, 6000), NO_STEPS, [], TRIM)["point_verdict"] == HOLDS
    assert judge_run(mm1(12.0, 10.0, 6000), NO_STEPS, [], TRIM)["point_verdict"] == FAILS
    # Too short for any figure: no point verdict either.
    assert judge_run(mm1(5.0, 10.0, 100), NO_STEPS, [], TRIM)["point_verdict"] == "undecided"


def test_too_short_a_run_is_undecided() -> None:
    judgement = judge_run(mm1(5.0, 10.0, 100), NO_STEPS, [], TRIM)
    assert judgement["verdict"] == "undecided"
    assert [c["name"] for c in judgement["checks"]] == ["num_measured"]
