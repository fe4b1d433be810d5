"""Metric definitions on hand-built records, and the weighted percentile against numpy.

The records here are small enough to work out by hand: each expected number below is derived in a
comment from vLLM's benchmark definitions (TTFT = first token − arrival, e2e = finish − arrival,
TPOT = (e2e − TTFT) / (output_tokens − 1) over requests with more than one output token).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.metrics import (
    distribution_ms,
    summarize,
    weighted_percentiles,
)
from sim.run import build_simulation, execute
from sim.scenario import validate_document
from sim.summary import DistributionMs, Summary
from tests.engine.harness import tight_pool

finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


@given(
    pairs=st.lists(st.tuples(finite, st.integers(0, 6)), min_size=1, max_size=30).filter(
        lambda pairs: any(w > 0 for _, w in pairs)
    ),
    qs=st.lists(st.integers(0, 100), min_size=1, max_size=5),
)
def test_weighted_percentiles_equal_numpy_on_the_expanded_sample(
    pairs: list[tuple[float, int]], qs: list[int]
) -> None:
    values = np.array([v for v, _ in pairs])
    weights = np.array([w for _, w in pairs])
    expanded = np.repeat(values, weights)
    got = weighted_percentiles(values, weights, tuple(qs))
    want = np.percentile(expanded, qs)
    assert np.allclose(got, want, rtol=1e-12, atol=1e-9 * (1 + np.abs(expanded).max()))


def test_weighted_percentiles_of_nothing_are_nan() -> None:
    got = weighted_percentiles(np.array([1.0, 2.0]), np.array([0, 0]), (50, 99))
    assert all(np.isnan(v) for v in got)


def test_distributions_of_empty_samples_are_null() -> None:
    empty = DistributionMs(mean=None, p50=None, p90=None, p99=None)
    assert distribution_ms(np.zeros(0)) == empty


def test_weighted_percentiles_of_a_small_multiset() -> None:
    # 10 ms ×3 and 30 ms ×1: p50 of [10, 10, 10, 30] = 10; p99 at position 2.97, between 10 and 30.
    p50, p99 = weighted_percentiles(np.array([10.0, 30.0]), np.array([3, 1]), (50, 99))
    assert p50 == pytest.approx(10.0)
    assert p99 == pytest.approx(10.0 + 20.0 * 0.97)


# --- summarize on hand-built records ----------------------------------------------------------
def _requests() -> dict[str, np.ndarray]:
    """Three finished requests and one that never finished.

    r0: arrives 0.0, first token 0.1, finishes 0.5, 5 tokens: TTFT 100 ms, e2e 500 ms,
        TPOT (500 − 100) / 4 = 100 ms.
    r1: arrives 0.2, first token 0.4, finishes 0.4, 1 token: TTFT 200 ms, e2e 200 ms, no TPOT.
    r2: arrives 0.3, first token 0.6, finishes 1.0, 3 tokens: TTFT 300 ms, e2e 700 ms,
        TPOT (700 − 300) / 2 = 200 ms.
    r3: arrives 0.9, never finishes.
    """
    return {
        "prompt_tokens": np.array([10, 20, 30, 40]),
        "output_tokens": np.array([5, 1, 3, 8]),
        "arrival_at_s": np.array([0.0, 0.2, 0.3, 0.9]),
        "scheduled_at_s": np.array([0.0, 0.2, 0.3, 0.9]),
        "first_token_at_s": np.array([0.1, 0.4, 0.6, np.nan]),
        "finished_at_s": np.array([0.5, 0.4, 1.0, np.nan]),
        "num_preemptions": np.array([0, 1, 0, 2]),
        "num_decode_steps": np.array([2, 0, 1, 0]),
        "num_drafted": np.array([6, 0, 3, 0]),
        "num_accepted": np.array([2, 0, 1, 0]),
    }


def _steps() -> dict[str, np.ndarray]:
    """Four steps; the last starts at 1.0, the end of the window, so it is outside it."""
    return {
        "start_at_s": np.array([0.0, 0.1, 0.5, 1.0]),
        "duration_s": np.array([0.1, 0.05, 0.02, 0.5]),
        "num_seqs": np.array([1, 2, 3, 9]),
        "num_tokens": np.array([10, 30, 5, 100]),
        "num_regular_itl": np.array([0, 1, 2, 7]),
        "kv_blocks_used": np.array([4, 8, 6, 2]),
    }


def _summary(warmup_requests: int, **kwargs: Any) -> Summary:
    return summarize(
        _requests(),
        _steps(),
        kwargs.get("irregular", np.array([0.3, 2.0])),
        kwargs.get("irregular_at", np.array([0.6, 1.5])),
        warmup_requests,
        num_kv_blocks=16,
        scenario="hand-built",
        method=kwargs.get("method", "eagle3"),
        seed=0,
    )


def test_latency_definitions() -> None:
    s = _summary(0)
    assert s.num_requests == 4 and s.num_completed == 3
    assert s.ttft_ms.mean == pytest.approx(200.0)
    assert s.ttft_ms.p50 == pytest.approx(200.0)
    assert s.e2e_latency_ms.mean == pytest.approx((500 + 200 + 700) / 3)
    assert s.e2e_latency_ms.p90 == pytest.approx(500 + 200 * 0.8)  # between 500 and 700
    assert s.tpot_ms.mean == pytest.approx(150.0)  # r1's single token has no TPOT
    assert s.tpot_ms.p50 == pytest.approx(150.0)


def test_throughput_over_the_measurement_window() -> None:
    s = _summary(0)
    # Window: first measured arrival 0.0 to last measured finish 1.0.
    assert s.measurement_window_s == (0.0, 1.0)
    assert s.request_throughput_req_s == pytest.approx(3.0)
    assert s.output_throughput_tok_s == pytest.approx(5 + 1 + 3)
    assert s.total_token_throughput_tok_s == pytest.approx(5 + 1 + 3 + 10 + 20 + 30)
    assert s.sim_duration_s == pytest.approx(1.5)
    assert s.num_steps == 4


def test_step_metrics_use_steps_starting_inside_the_window() -> None:
    s = _summary(0)
    # Steps at 0.0, 0.1, 0.5 are inside [0, 1.0); the one at 1.0 is not.
    assert s.mean_batch_size == pytest.approx((1 + 2 + 3) / 3)
    assert s.mean_tokens_per_step == pytest.approx((10 + 30 + 5) / 3)
    # ITL: 50 ms once, 20 ms twice, and the irregular 300 ms gap at 0.6 (the 2 s one at 1.5 is
    # outside): mean (50 + 40 + 300) / 4.
    assert s.itl_ms.mean == pytest.approx((50 + 40 + 300) / 4)
    assert s.itl_ms.p50 == pytest.approx(35.0)  # sorted 20, 20, 50, 300
    # Peak KV over all steps: 8 of 16 blocks.
    assert s.kv_cache_peak_usage == pytest.approx(0.5)
    assert s.num_preemptions == 3


def test_acceptance_metrics() -> None:
    s = _summary(0)
    # 3 verify steps accepted 3 drafts: 1 + 3 / 3 tokens per step; 3 of 9 drafts accepted.
    assert s.mean_acceptance_length == pytest.approx(2.0)
    assert s.draft_acceptance_rate == pytest.approx(3 / 9)
    plain = _summary(0, method="none")
    assert plain.mean_acceptance_length == 1.0
    assert plain.draft_acceptance_rate is None


def test_warmup_requests_move_the_window_and_leave_the_sample() -> None:
    s = _summary(1)
    # r0 is warm-up: window from r1's arrival 0.2 to the last finish 1.0, 0.8 s long.
    assert s.num_requests == 3 and s.num_completed == 2
    assert s.measurement_window_s == (0.2, 1.0)
    assert s.request_throughput_req_s == pytest.approx(2 / 0.8)
    assert s.output_throughput_tok_s == pytest.approx((1 + 3) / 0.8)
    assert s.ttft_ms.mean == pytest.approx(250.0)
    assert s.tpot_ms.mean == pytest.approx(200.0)
    # Only the steps at 0.5 starts inside [0.2, 1.0).
    assert s.mean_batch_size == pytest.approx(3.0)
    # Acceptance counts come from measured requests only: r2 accepted 1 of 3 in 1 step.
    assert s.mean_acceptance_length == pytest.approx(2.0)
    assert s.draft_acceptance_rate == pytest.approx(1 / 3)


def test_nothing_finished_gives_empty_distributions() -> None:
    requests = _requests()
    requests["finished_at_s"][:] = np.nan
    s = summarize(
        requests, _steps(), np.zeros(0), np.zeros(0), 0, 16, scenario="t", method="none", seed=0
    )
    assert s.num_completed == 0
    assert s.ttft_ms.mean is None
    assert s.request_throughput_req_s == 0.0


# --- the ITL records of a real run add up to every request's decode time ----------------------
@pytest.mark.parametrize("method", ["none", "eagle3"])
@pytest.mark.parametrize("kv_pressure", [False, True])
def test_itl_samples_partition_each_requests_decode_time(method: str, kv_pressure: bool) -> None:
    # Every gap between two emissions of a request is one ITL sample (a regular one-step gap or an
    # irregular one after a skipped step or a preemption), so over the whole run
    # Σ ITL = Σ (finish − first token), and the number of samples is Σ (emissions − 1): without
    # speculation Σ (output_tokens − 1).
    document: dict[str, Any] = {
        "seed": 2,
        "speculation": {"method": method},
        "workload": {
            "num_requests": 60,
            "arrival": {"process": "poisson", "rate_per_s": 40.0},
            "prompt_tokens": {"distribution": "uniform", "low": 10, "high": 2000},
            "output_tokens": {"distribution": "uniform", "low": 1, "high": 200},
        },
        "engine": {"max_num_batched_tokens": 512},
    }
    if kv_pressure:
        # A pool barely above the longest request: preempted requests resume after a gap.
        document["workload"]["arrival"] = {"process": "closed_loop", "concurrency": 30}
        document = tight_pool(document)
    scenario = validate_document(document, "itl")
    simulation = build_simulation(scenario, Path("."))
    result = execute(simulation)
    steps, requests = result.steps, result.requests
    irregular, _ = simulation.core.recorder.irregular_itl()
    total = float((steps["duration_s"] * steps["num_regular_itl"]).sum() + irregular.sum())
    count = int(steps["num_regular_itl"].sum()) + len(irregular)
    decode_time = float((requests["finished_at_s"] - requests["first_token_at_s"]).sum())
    assert total == pytest.approx(decode_time, rel=1e-9)
    assert (len(irregular) > 0) == kv_pressure
    assert (result.summary.num_preemptions > 0) == kv_pressure
    if method == "none":
        assert count == int((requests["output_tokens"] - 1).sum())
    else:
        assert count < int((requests["output_tokens"] - 1).sum())
    # The summary's ITL is that same sample (the window covers the whole run).
    assert result.summary.itl_ms.mean == pytest.approx(total / count * 1e3, rel=1e-9)
