"""The steady window and goodput on hand-built records, and their scenario keys.

Goodput follows ``vllm bench serve`` (vllm-project/vllm, ``vllm/benchmarks/serve.py``,
``calculate_metrics``, commit 009e6d4a): a request is good when each bounded metric is at most
its bound, a one-token output's TPOT counting as 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from sim.metrics import goodput, measurement_window, summarize
from sim.summary import Summary
from specsim.cli import app


def _requests() -> dict[str, np.ndarray]:
    """Ten requests arriving at 0, 1, …, 9 s, each taking 0.5 s, first token after 0.1 s,
    4 output tokens (TPOT (0.5 − 0.1) / 3 ≈ 133 ms); request 5 has 1 token; request 7 waits 2 s
    before its first token."""
    arrival = np.arange(10.0)
    first = arrival + 0.1
    first[7] += 2.0
    finish = first + 0.4
    out = np.full(10, 4)
    out[5] = 1
    return {
        "prompt_tokens": np.full(10, 8),
        "output_tokens": out,
        "arrival_at_s": arrival,
        "scheduled_at_s": arrival,
        "first_token_at_s": first,
        "finished_at_s": finish,
        "num_preemptions": np.zeros(10, dtype=int),
        "num_decode_steps": np.full(10, 3),
        "num_drafted": np.zeros(10, dtype=int),
        "num_accepted": np.zeros(10, dtype=int),
    }


def _steps() -> dict[str, np.ndarray]:
    """One 0.5 s step every second from 0.25 s: it emits 3 tokens and computes 8 prefill ones."""
    start = np.arange(10.0) + 0.25
    return {
        "start_at_s": start,
        "duration_s": np.full(10, 0.5),
        "num_seqs": np.ones(10, dtype=int),
        "num_tokens": np.full(10, 11),
        "num_prefill_tokens": np.full(10, 8),
        "num_emitted_tokens": np.full(10, 3),
        "num_regular_itl": np.ones(10, dtype=int),
        "kv_blocks_used": np.ones(10, dtype=int),
    }


def _summary(**options: Any) -> Summary:
    no_itl = np.zeros(0)
    return summarize(
        _requests(), _steps(), no_itl, no_itl, 0, 16, scenario="t", method="none", seed=0, **options
    )


def test_the_steady_window_drops_both_ends_by_arrival() -> None:
    requests = _requests()
    window = measurement_window(requests["arrival_at_s"], requests["finished_at_s"], 0, (0.2, 0.3))
    # 10 requests: the first 2 and the last 3 dropped; kept 2..6; window [2 s, 7 s).
    assert (window.start_at_s, window.end_at_s) == (2.0, 7.0)
    assert list(np.flatnonzero(window.measured)) == [2, 3, 4, 5, 6]
    more = measurement_window(requests["arrival_at_s"], requests["finished_at_s"], 4, (0.2, 0.3))
    assert list(np.flatnonzero(more.measured)) == [4, 5, 6]  # warmup_requests wins when larger
    with pytest.raises(ValueError, match="trim"):
        measurement_window(requests["arrival_at_s"], requests["finished_at_s"], 0, (0.5, 0.0))


def test_steady_throughput_counts_what_was_served_inside_the_window() -> None:
    s = _summary(trim_fractions=(0.2, 0.3))
    assert s.measurement_window == "steady" and s.measurement_window_s == (2.0, 7.0)
    assert s.num_requests == s.num_completed == 5
    # Finishes at 2.5, 3.5, 4.5, 5.5, 6.5 fall inside [2, 7): 5 in 5 s. Steps ending inside
    # [2, 7) are those starting at 2.25 … 6.25: 5 steps of 3 emitted and 8 prefill tokens.
    assert s.request_throughput_req_s == pytest.approx(1.0)
    assert s.output_throughput_tok_s == pytest.approx(3.0)
    assert s.total_token_throughput_tok_s == pytest.approx(11.0)
    assert s.num_arrivals_in_window == 5 and s.offered_rate_req_s == pytest.approx(1.0)


def test_the_full_window_is_the_default_and_adds_no_keys() -> None:
    assert _summary() == _summary(trim_fractions=(0.0, 0.0))
    written = _summary().to_dict()
    assert "measurement_window" not in written and "request_goodput_req_s" not in written


def test_goodput_is_vllms_definition() -> None:
    ttft = np.array([0.1, 0.5, 0.1])
    tpot = np.array([0.05, 0.01, 0.0])  # the last: a one-token output
    e2e = np.array([1.0, 1.0, 0.1])
    assert list(goodput(ttft, tpot, e2e, {"ttft": 100.0})) == [True, False, True]  # inclusive
    assert list(goodput(ttft, tpot, e2e, {"ttft": 500, "tpot": 10})) == [False, True, True]
    with pytest.raises(ValueError, match="itl"):
        goodput(ttft, tpot, e2e, {"itl": 5.0})


def test_goodput_in_the_summary() -> None:
    # TTFT 100 ms for all but request 7 (2100 ms): 9 of 10 good under ttft:500.
    s = _summary(goodput_ms={"ttft": 500.0, "tpot": 150.0})
    assert s.num_good_requests == 9 and s.good_request_fraction == pytest.approx(0.9)
    # Full window: 10 finishes over [0, 9.5 + 2 … ] = [0 s, 9.5 s): goodput = 9 / 9.5.
    assert s.measurement_window_s == (0.0, 9.5)
    assert s.request_goodput_req_s == pytest.approx(9 / 9.5)
    tight = _summary(goodput_ms={"tpot": 100.0})  # 133 ms TPOT fails; the 1-token request passes
    assert tight.num_good_requests == 1


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("measurement.warmup_fraction=0.2", "need window: steady"),
        ("measurement.goodput.itl=5", "unknown goodput metric"),
        ("measurement.goodput.ttft=-1", "must be > 0"),
        ("measurement.cooldown_fraction=0.6", "measurement.cooldown_fraction"),
    ],
)
def test_bad_measurement_keys_are_one_message_and_exit_2(assignment: str, message: str) -> None:
    result = CliRunner().invoke(app, ["run", "--set", assignment, "--out", "/dev/null/never"])
    assert result.exit_code == 2 and message in result.output, result.output
    assert "Traceback" not in result.output


def test_a_steady_window_without_length_is_refused_naming_the_key() -> None:
    """One kept request (or a wave arriving at one instant) leaves the steady window no length
    to measure a rate over: refused, not summarised as zero throughput."""
    from sim.errors import ScenarioError

    with pytest.raises(ScenarioError, match=r"^measurement.window: steady: the 1 request"):
        measurement_window(np.array([0.5]), np.array([2.5]), 0, (0.1, 0.1))
    wave = np.zeros(8)
    with pytest.raises(ScenarioError, match="all arrive at 0 s"):
        measurement_window(wave, np.arange(1.0, 9.0), 0, (0.1, 0.1))
    # Arrivals spread over time keep a window of positive length.
    window = measurement_window(np.arange(8.0), np.arange(1.0, 9.0), 0, (0.1, 0.1))
    assert window.end_at_s > window.start_at_s
