"""Shared prefixes and multi-turn sessions: the prompts they build, the columns a router reads,
the turns' arrivals, and the schema's checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sim.random_streams import RandomStreams
from sim.run import run_scenario
from sim.scenario import validate_document
from sim.workload import Workload, WorkloadConfig, build_workload

ROOT = Path(__file__).resolve().parents[1]


def _build(data: dict[str, Any], seed: int = 0) -> Workload:
    return build_workload(WorkloadConfig.model_validate(data), RandomStreams(seed), Path("."))


def _sessions(num_requests: int, turns: int, **extra: Any) -> dict[str, Any]:
    return {
        "num_requests": num_requests,
        "arrival": {"process": "poisson", "rate_per_s": 2.0},
        "prompt_tokens": {"distribution": "uniform", "low": 5, "high": 60},
        "output_tokens": {"distribution": "uniform", "low": 1, "high": 40},
        "prefix": {"num_shared_prefixes": 3, "shared_prefix_tokens": 100},
        "sessions": {"num_turns": turns, "think_time_s": 1.5},
        **extra,
    }


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 60), st.integers(1, 5), st.integers(0, 2**16))
def test_each_turn_resends_the_history(num_requests: int, turns: int, seed: int) -> None:
    w = _build(_sessions(num_requests, turns), seed)
    own = _build({**_sessions(num_requests, turns), "prefix": None, "sessions": None}, seed)
    for i in range(num_requests):
        session = i // turns
        assert w.session_id[i] == session
        first = session * turns
        assert w.prefix_id[i] == w.prefix_id[first] and 0 <= w.prefix_id[i] < 3
        history = int((own.prompt_tokens[first:i] + own.output_tokens[first:i]).sum())
        assert w.prompt_tokens[i] == 100 + history + own.prompt_tokens[i]
        is_last = i % turns == turns - 1 or i == num_requests - 1
        assert w.next_turn[i] == (-1 if is_last else i + 1)
        # Only a conversation's first turn has an arrival time of its own.
        assert np.isnan(w.arrival_at_s[i]) == (i != first)
    assert np.array_equal(w.output_tokens, own.output_tokens)


def test_fraction_with_prefix_and_the_analytic_mean() -> None:
    data = {
        "num_requests": 40_000,
        "prompt_tokens": {"distribution": "fixed", "value": 50},
        "output_tokens": {"distribution": "fixed", "value": 30},
        "prefix": {
            "num_shared_prefixes": 5,
            "shared_prefix_tokens": 200,
            "fraction_with_prefix": 0.25,
        },
        "sessions": {"num_turns": 4, "think_time_s": 0.0},
    }
    w = _build(data)
    share = float((w.prefix_id >= 0).mean())
    # Binomial over 10,000 conversations: 4 standard errors of sqrt(p(1-p)/n) = 0.017.
    assert abs(share - 0.25) < 4 * np.sqrt(0.25 * 0.75 / 10_000)
    assert set(np.unique(w.prefix_id[w.prefix_id >= 0])) == set(range(5))
    # 50 own + 0.25·200 prefix + on average 1.5 earlier exchanges of 80 tokens = 220.
    expected = w.analytic_means()["mean_prompt_tokens"]
    assert expected == pytest.approx(50 + 0.25 * 200 + 1.5 * 80)
    assert abs(float(w.prompt_tokens.mean()) - expected) < 4 * 200 * np.sqrt(0.25 * 0.75 / 10_000)


def test_without_sharing_nothing_is_shared() -> None:
    w = _build({"num_requests": 10})
    assert (w.prefix_id == -1).all() and (w.session_id == -1).all() and (w.next_turn == -1).all()
    assert not w.has_sessions


def test_the_schema_rejects_sessions_on_a_trace_and_unknown_keys() -> None:
    with pytest.raises(ValidationError, match="sessions"):
        WorkloadConfig.model_validate(
            {
                "arrival": {"process": "trace", "path": "x.csv"},
                "sessions": {"num_turns": 2, "think_time_s": 1},
            }
        )
    with pytest.raises(ValidationError, match="extra"):
        WorkloadConfig.model_validate(
            {"prefix": {"num_shared_prefixes": 1, "shared_prefix_tokens": 8, "x": 1}}
        )
    with pytest.raises(ValidationError):
        WorkloadConfig.model_validate({"sessions": {"num_turns": 2}})  # think time is required
    with pytest.raises(ValidationError):
        WorkloadConfig.model_validate(
            {"prefix": {"num_shared_prefixes": 0, "shared_prefix_tokens": 8}}
        )


def _chat(num_requests: int, caching: bool, arrival: dict[str, Any] | None = None) -> Any:
    document = {
        "name": "sharing-test",
        "model": "llama-3.1-8b",
        "engine": {"enable_prefix_caching": caching},
        "workload": {
            **_sessions(num_requests, 3),
            "arrival": arrival or {"process": "poisson", "rate_per_s": 2.0},
            "prompt_tokens": {"distribution": "lognormal", "mean": 128, "sigma": 0.8},
            "output_tokens": {"distribution": "lognormal", "mean": 128, "sigma": 0.6},
            "max_prompt_tokens": 1024,
            "max_output_tokens": 512,
            "prefix": {"num_shared_prefixes": 4, "shared_prefix_tokens": 1024},
        },
    }
    return run_scenario(validate_document(document, "test"), ROOT)


def test_a_turn_arrives_think_time_after_the_previous_answer() -> None:
    result = _chat(30, caching=True)
    r = result.requests
    follows = np.arange(30) % 3 != 0
    previous = np.flatnonzero(follows) - 1
    assert np.allclose(r["arrival_at_s"][follows], r["finished_at_s"][previous] + 1.5)
    assert list(r["session_id"][:6]) == [0, 0, 0, 1, 1, 1]
    assert (r["prefix_id"] >= 0).all()


def test_a_closed_loop_client_holds_one_conversation_at_a_time() -> None:
    result = _chat(24, caching=True, arrival={"process": "closed_loop", "concurrency": 2})
    r = result.requests
    arrivals, finishes = r["arrival_at_s"], r["finished_at_s"]
    for t in np.unique(arrivals).tolist():
        in_flight = ((arrivals <= t) & (finishes > t)).sum()
        assert in_flight <= 2


def test_caching_shortens_prefills_ttft_and_kv_use() -> None:
    """The same requests, caching on and off: on, every prompt token served from the cache is one
    not prefilled, so total prefill tokens strictly fall; first tokens come sooner; the shared
    blocks count once in the pool."""
    on, off = _chat(120, caching=True), _chat(120, caching=False)
    assert on.summary.num_preemptions == 0 == off.summary.num_preemptions
    prefill_on = int(on.steps["num_prefill_tokens"].sum())
    prefill_off = int(off.steps["num_prefill_tokens"].sum())
    cached = int(on.requests["num_cached_tokens"].sum())
    assert prefill_off == int(off.requests["prompt_tokens"].sum())
    assert prefill_on == prefill_off - cached and cached > 0
    assert 0 < on.summary.prefix_cache_hit_rate < 1 and off.summary.prefix_cache_hit_rate is None
    assert on.summary.ttft_ms.mean < off.summary.ttft_ms.mean
    assert on.summary.kv_cache_peak_usage < off.summary.kv_cache_peak_usage


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 200), st.integers(1, 12), st.integers(0, 2**16))
def test_cycled_prefixes_come_in_turn(num_requests: int, pool: int, seed: int) -> None:
    """``order: cycle`` sends prefix ``k mod N`` with conversation ``k`` (a harness sending a fixed
    pool of prompts one after another), whatever the seed."""
    data = {
        "num_requests": num_requests,
        "prompt_tokens": {"distribution": "fixed", "value": 3},
        "prefix": {"num_shared_prefixes": pool, "shared_prefix_tokens": 40, "order": "cycle"},
    }
    w = _build(data, seed)
    assert np.array_equal(w.prefix_id, np.arange(num_requests) % pool)
    assert (w.prompt_tokens == 43).all()


def test_a_cycled_pool_hits_every_full_block_from_its_second_pass() -> None:
    """A pool of 5 prompts of 200 tokens (199 shared + 1 own) sent in turn at a low rate: the first
    pass misses; every later request finds its prompt's 12 full blocks of 16 tokens (192 of 199
    shareable tokens) cached, and prefills only the other 8 (vLLM computes at least the last
    token: max_cache_hit_length = num_tokens - 1)."""
    document = {
        "name": "pool-test",
        "model": "llama-3.1-8b",
        "engine": {"enable_prefix_caching": True},
        "workload": {
            "num_requests": 15,
            "arrival": {"process": "poisson", "rate_per_s": 0.5},
            "prompt_tokens": {"distribution": "fixed", "value": 1},
            "output_tokens": {"distribution": "fixed", "value": 4},
            "prefix": {"num_shared_prefixes": 5, "shared_prefix_tokens": 199, "order": "cycle"},
        },
    }
    r = run_scenario(validate_document(document, "test"), ROOT).requests
    cached = np.asarray(r["num_cached_tokens"])
    assert (cached[:5] == 0).all()
    assert (cached[5:] == 192).all()
