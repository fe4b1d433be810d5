"""Suffix decoding and parallel drafting (P-EAGLE): what each costs per step, and where they run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sim.engine.drafter import DraftWork
from sim.errors import ScenarioError
from sim.run import build_simulation
from sim.scenario import validate_document


def _strategy(method: str, k: int = 4, **speculation: Any) -> Any:
    document = {
        "speculation": {
            "method": method,
            "num_speculative_tokens": k,
            "acceptance": {"alpha": 0.7},
            **speculation,
        },
        "workload": {"num_requests": 4},
    }
    return build_simulation(validate_document(document, "t"), Path.cwd()).strategy


def _work(num_seqs: float, context: float) -> DraftWork:
    return DraftWork(
        num_seqs=np.array([num_seqs]),
        num_new_tokens=np.array([num_seqs]),
        context_tokens=np.array([context]),
        num_full_accept=np.array([0.0]),
        num_proposed=np.array([num_seqs]),
    )


def test_parallel_drafting_runs_one_forward_however_many_tokens_it_drafts() -> None:
    for k in (1, 4, 8):
        assert _strategy("p_eagle", k).num_forwards() == 1
    assert _strategy("eagle3", 4).num_forwards() == 4


@pytest.mark.parametrize("num_seqs", [1.0, 16.0, 128.0])
def test_parallel_drafting_costs_less_than_sequential_eagle3_for_k_above_1(num_seqs: float) -> None:
    work = _work(num_seqs, num_seqs * 1000)
    parallel = _strategy("p_eagle", 5).draft_time_s(work)[0]
    sequential = _strategy("eagle3", 5).draft_time_s(work)[0]
    assert parallel < sequential
    # With one token there is nothing to parallelise: the single forward is EAGLE-3's first.
    one_parallel = _strategy("p_eagle", 1).draft_time_s(work)[0]
    one_sequential = _strategy("eagle3", 1).draft_time_s(work)[0]
    assert one_parallel == pytest.approx(one_sequential, rel=1e-9)


def test_suffix_lookup_time_grows_with_sequences_not_with_context() -> None:
    strategy = _strategy("suffix", 16)
    short = strategy.draft_time_s(_work(8.0, 8 * 100))[0]
    long = strategy.draft_time_s(_work(8.0, 8 * 100_000))[0]
    assert short == long > 0
    assert strategy.draft_time_s(_work(16.0, 1600))[0] == pytest.approx(2 * short)


@pytest.mark.parametrize("method", ["suffix", "p_eagle"])
def test_only_vllm_runs_the_new_methods(method: str) -> None:
    document = {
        "engine": {"preset": "sglang"},
        "speculation": {"method": method, "acceptance": {"alpha": 0.7}},
        "workload": {"num_requests": 4},
    }
    with pytest.raises(ScenarioError, match=r"speculation\.method: .*runs on vllm-v1"):
        build_simulation(validate_document(document, "t"), Path.cwd())


def test_trees_are_refused_for_both() -> None:
    for method in ("suffix", "p_eagle"):
        with pytest.raises(ScenarioError, match=r"speculation\.tree"):
            _strategy(method, 4, tree={"shape": [2, 2]})
