"""Trace replay against the raw trace files, and the replay rules (wrap, n-gram misses, trees)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sim.acceptance.traces as traces_module
from sim.acceptance.plan import Proposal
from sim.acceptance.shipped_data import load_shipped_traces
from sim.acceptance.traces import (
    TraceReplayModel,
    TraceSet,
    chain_replay_totals,
    load_jsonl_traces,
)
from sim.errors import CalibrationError, ScenarioError

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
TRACES = SHARED / "acceptance-traces" / "llama-3.1-8b-h100-vllm"
needs_shared = pytest.mark.skipif(not TRACES.is_dir(), reason="shared data folder not present")


def _raw_token_weighted_tau(path: Path, field: str, k: int) -> float:
    # An independent, plain-Python walk over the raw file: the reference the model must reproduce.
    tokens = steps = 0
    for line in path.read_text().splitlines():
        acc = json.loads(line)[field]["acc_len"]
        position = 0
        while position < len(acc):
            emitted = min(acc[position], k + 1)
            position += emitted
            tokens += emitted
            steps += 1
    return tokens / steps


@needs_shared
@pytest.mark.parametrize("dataset", ["sharegpt", "cnn", "gsm8k", "instructcoder"])
@pytest.mark.parametrize("field", ["acc_eagle", "acc_ngram"])
def test_replay_reproduces_raw_token_weighted_tau(dataset: str, field: str) -> None:
    model = TraceReplayModel(load_shipped_traces(f"llama-3.1-8b/{dataset}", field), field=field)
    for k in range(1, 8):
        raw = _raw_token_weighted_tau(TRACES / f"combined_{dataset}.jsonl", field, k)
        plan = model.plan(
            model.traces.lengths, Proposal.chain(k), np.random.default_rng(0),
            trace_keys=np.arange(model.traces.num_traces),
        )  # fmt: skip
        replayed = float(np.sum(plan.accepted + 1.0) / plan.accepted.size)
        assert replayed == pytest.approx(raw, rel=0.02)
        assert model.expected_acceptance_length(Proposal.chain(k)) == pytest.approx(raw, rel=0.02)


@settings(max_examples=200, deadline=None)
@given(
    traces=st.lists(st.lists(st.integers(1, 12), min_size=1, max_size=60), min_size=1, max_size=8),
    depth=st.integers(1, 10),
)
def test_chain_replay_totals_are_the_plan_walks_and_a_plain_walks(
    traces: list[list[int]], depth: int
) -> None:
    # The pointer-doubling totals against the plan's own lockstep walk (every trace at its own
    # length) and a plain per-trace walk: the same integers, so the same tau to the last bit.
    trace_set = TraceSet.from_lists(traces, "synthetic")
    tokens, steps = chain_replay_totals(trace_set, depth)
    plan = TraceReplayModel(trace_set).plan(
        trace_set.lengths, Proposal.chain(depth), np.random.default_rng(0),
        trace_keys=np.arange(trace_set.num_traces),
    )  # fmt: skip
    assert (tokens, steps) == (int(np.sum(plan.accepted.astype(np.int64) + 1)), plan.accepted.size)
    plain_tokens = plain_steps = 0
    for acc in traces:
        position = 0
        while position < len(acc):
            emitted = min(acc[position], depth + 1)  # the accepted drafts and the bonus token
            position += emitted
            plain_tokens += emitted
            plain_steps += 1
    assert (tokens, steps) == (plain_tokens, plain_steps)
    # Traces read anew (another build) find the totals remembered, under their contents.
    copy = TraceSet(trace_set.acc_len.copy(), trace_set.offsets.copy(), "another read")
    remembered = len(traces_module._REPLAY_TOTALS)
    assert chain_replay_totals(copy, depth) == (tokens, steps)
    assert len(traces_module._REPLAY_TOTALS) == remembered
    model = TraceReplayModel(trace_set)
    assert model.token_weighted_tau(depth) == float(
        np.sum(plan.accepted.astype(np.int64) + 1) / plan.accepted.size
    )


def _same_plans(model: TraceReplayModel, needed: np.ndarray, depth: int, seed: int) -> None:
    # The chain plan read off each trace's walk against the lockstep walk of every request:
    # the same arrays, and the generator left in the same state (the misses drawn alike).
    fast_rng, walk_rng = np.random.default_rng(seed), np.random.default_rng(seed)
    fast = model.plan(needed, Proposal.chain(depth), fast_rng)
    keys = model._keys(needed.size, None, walk_rng)
    walked = model.walked_plan(needed, keys, Proposal.chain(depth), walk_rng)
    for name in ("offsets", "proposed", "accepted"):
        assert np.array_equal(getattr(fast, name), getattr(walked, name)), name
        assert getattr(fast, name).dtype == getattr(walked, name).dtype, name
    assert fast_rng.random() == walk_rng.random()


@settings(max_examples=150, deadline=None)
@given(
    traces=st.lists(st.lists(st.integers(1, 9), min_size=1, max_size=30), min_size=1, max_size=6),
    needed=st.lists(st.integers(0, 120), min_size=1, max_size=40),
    depth=st.integers(1, 8),
    ngram=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_a_chain_plan_read_off_each_trace_s_walk_is_the_lockstep_walk_s(
    traces: list[list[int]], needed: list[int], depth: int, ngram: bool, seed: int
) -> None:
    # Requests longer than their trace wrap; n-gram's misses draw from the generator.
    trace_set = TraceSet.from_lists(traces, "synthetic")
    model = TraceReplayModel(trace_set, field="acc_ngram" if ngram else "acc_eagle")
    if ngram:
        model.miss_probability = 0.5
    _same_plans(model, np.array(needed, dtype=np.int64), depth, seed)


@pytest.mark.parametrize("field", ["acc_eagle", "acc_ngram"])
def test_the_shipped_traces_chain_plans_are_the_lockstep_walk_s(field: str) -> None:
    model = TraceReplayModel(load_shipped_traces("llama-3.1-8b/sharegpt", field), field=field)
    needed = np.random.default_rng(3).integers(0, 1_500, size=2_000)
    for depth in (1, 3, 5):
        _same_plans(model, needed, depth, seed=depth)


@needs_shared
def test_published_examples_of_the_trace_readme() -> None:
    sharegpt = TraceReplayModel(load_shipped_traces("llama-3.1-8b/sharegpt", "acc_eagle"))
    gsm8k = TraceReplayModel(load_shipped_traces("llama-3.1-8b/gsm8k", "acc_eagle"))
    assert sharegpt.expected_acceptance_length(Proposal.chain(3)) == pytest.approx(2.25, abs=0.02)
    assert gsm8k.expected_acceptance_length(Proposal.chain(3)) == pytest.approx(2.38, abs=0.02)


def test_requests_longer_than_their_trace_wrap_around() -> None:
    model = TraceReplayModel(TraceSet.from_lists([[3, 1, 2]], "synthetic"))
    plan = model.plan(np.array([12]), Proposal.chain(5), np.random.default_rng(0))
    # Positions 0 -> 3 == 0 (wrap) -> ...: emitted 3, 3, 3, 3.
    assert plan.accepted.tolist() == [2, 2, 2, 2]
    plan = model.plan(np.array([6]), Proposal.chain(1), np.random.default_rng(0))
    # Positions 0 (2 tokens) -> 2 (2 tokens) -> 4 % 3 = 1 (1 token) -> 2 (2 tokens, covers 6).
    assert plan.accepted.tolist() == [1, 1, 0, 1]


def test_plan_invariants_keys_and_determinism() -> None:
    rng = np.random.default_rng(0)
    traces = TraceSet.from_lists([rng.integers(1, 8, size=n).tolist() for n in (5, 50, 300)], "s")
    model = TraceReplayModel(traces)
    tokens = rng.integers(0, 700, 200)
    for proposal in (Proposal.chain(3), Proposal.static_tree((3, 2, 1)), Proposal.chain(0)):
        first = model.plan(tokens, proposal, np.random.default_rng(9))
        second = model.plan(tokens, proposal, np.random.default_rng(9))
        first.check_invariants(tokens, proposal.depth)
        np.testing.assert_array_equal(first.accepted, second.accepted)
    with pytest.raises(ScenarioError, match="trace_keys"):
        model.plan(np.array([5]), Proposal.chain(3), rng, trace_keys=np.array([3]))


def test_tree_replay_never_shortens_the_trace_path() -> None:
    traces = TraceSet.from_lists([np.random.default_rng(1).integers(1, 6, 400).tolist()], "s")
    model = TraceReplayModel(traces)
    chain = model.expected_acceptance_length(Proposal.chain(4))
    tree = model.expected_acceptance_length(Proposal.static_tree((4, 3, 2, 2)))
    assert tree > chain


def test_ngram_misses_follow_the_match_rate() -> None:
    acc = [1] * 600 + [3] * 400
    model = TraceReplayModel(TraceSet.from_lists([acc], "s"), field="acc_ngram", match_rate=0.5)
    plan = model.plan(np.array([len(acc)]), Proposal.chain(2), np.random.default_rng(0),
                      trace_keys=np.array([0]))  # fmt: skip
    steps_with_one = plan.accepted == 0
    # k = 1 steps emitting one token: 600 of 800 steps; misses = (1 − m) / P1 of them.
    assert np.mean(plan.proposed[steps_with_one] == 0) == pytest.approx(0.5 / 0.75, abs=0.06)
    assert np.all(plan.proposed[~steps_with_one] == 2)
    with pytest.raises(ScenarioError, match="ngram_match_rate"):
        TraceReplayModel(TraceSet.from_lists([acc], "s"), field="acc_ngram", match_rate=0.1)


def test_jsonl_loader_names_the_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"acc_eagle": {"acc_len": [2, 1]}}) + "\n" + '{"acc_eagle": 3}\n')
    with pytest.raises(CalibrationError, match=":2:"):
        load_jsonl_traces(path, "acc_eagle")
    with pytest.raises(ScenarioError, match="no such file"):
        load_jsonl_traces(tmp_path / "missing.jsonl", "acc_eagle")
