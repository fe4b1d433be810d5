"""The compiled step-cost evaluator gives the Python cost model's durations, bit for bit.

:mod:`sim.engine.cost_kernel` lowers one scenario's cost model (and its drafter's time) to a
compiled loop that repeats the Python model's operations in the same order. Floating-point
addition is not associative, so any change of order, any missed term or any parameter read
wrongly shows as a difference in the last bit: these tests compare every part of the breakdown
and the total with ``array_equal`` over random step shapes, for every kind of node and method the
catalogue ships (dense and MoE models, MLA and sliding-window attention, tensor parallelism with
and without measured all-reduce tables, FP8 weights, a roofline-priced GPU, each engine preset's
host mechanisms, and the drafting strategies). A scenario the evaluator does not lower (several
attention groups or expert parallelism) must say so by returning None.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.engine import cost_eval, cost_kernel, cost_sharing
from sim.engine.drafter import DraftWork
from sim.errors import InvariantError, SpecsimError
from sim.run import REQUEST_COLUMNS, build_simulation, execute
from sim.scenario import validate_document

from .harness import EngineSetup, build_core, drive_node, record_of, tight_pool
from .strategies import engine_setups
from .test_fast_forward import SCENARIOS, _assert_identical

pytestmark = pytest.mark.skipif(
    cost_eval.compiled() is None, reason="numba is not installed: only the Python path runs"
)

_EAGLE3 = {"method": "eagle3", "num_speculative_tokens": 3}
_NGRAM = {"method": "ngram", "num_speculative_tokens": 4}

#: (name, hardware, model, engine, speculation): one of each kind of node and method.
NODES: list[tuple[str, dict[str, Any], str, dict[str, Any], dict[str, Any]]] = [
    ("a100-roofline-tp2", {"gpu": "a100-80gb", "num_gpus": 2}, "llama-2-70b", {}, {}),
    ("a100-roofline-eagle3", {"gpu": "a100-80gb", "num_gpus": 2}, "llama-2-70b", {}, _EAGLE3),
    ("h100-dense", {"gpu": "h100-sxm", "num_gpus": 1}, "llama-3.1-8b", {}, {}),
    ("h100-dense-eagle3", {"gpu": "h100-sxm", "num_gpus": 1}, "llama-3.1-8b", {}, _EAGLE3),
    ("h100-dense-ngram", {"gpu": "h100-sxm", "num_gpus": 1}, "llama-3.1-8b", {}, _NGRAM),
    (
        "h100-dense-suffix",
        {"gpu": "h100-sxm", "num_gpus": 1},
        "llama-3.1-8b",
        {},
        {"method": "suffix"},
    ),
    (
        "h100-dense-lookahead",
        {"gpu": "h100-sxm", "num_gpus": 1},
        "llama-3.1-8b",
        {"preset": "trtllm-1.0"},
        {"method": "lookahead", "num_speculative_tokens": 3},
    ),
    (
        "h100-dense-medusa",
        {"gpu": "h100-sxm", "num_gpus": 1},
        "vicuna-13b",
        {},
        {"method": "medusa"},
    ),
    (
        "h100-dense-eagle-tree",
        {"gpu": "h100-sxm", "num_gpus": 1},
        "llama-3.1-8b",
        {},
        {"method": "eagle", "tree": {"shape": [2, 2, 2]}},
    ),
    (
        "h100-tp4-draft-model",
        {"gpu": "h100-sxm", "num_gpus": 4},
        "llama-3.1-70b",
        {},
        {"method": "draft_model", "draft_model": "llama-3.2-1b", "num_speculative_tokens": 5},
    ),
    ("h100-tp8-eagle3", {"gpu": "h100-sxm", "num_gpus": 8}, "llama-3.1-70b", {}, _EAGLE3),
    ("h100-moe-tp2", {"gpu": "h100-sxm", "num_gpus": 2}, "mixtral-8x7b", {}, {}),
    ("h100-moe-qwen3", {"gpu": "h100-sxm", "num_gpus": 1}, "qwen3-30b-a3b", {}, _EAGLE3),
    ("h100-sliding-window-moe", {"gpu": "h100-sxm", "num_gpus": 1}, "gpt-oss-20b", {}, {}),
    ("b200-mla-moe-tp8", {"gpu": "b200", "num_gpus": 8}, "deepseek-v3", {}, {}),
    (
        "b200-mla-moe-mtp",
        {"gpu": "b200", "num_gpus": 8},
        "deepseek-v3",
        {},
        {"method": "mtp", "num_speculative_tokens": 1},
    ),
    ("b200-roofline", {"gpu": "b200", "num_gpus": 1}, "qwen3-8b", {}, {}),
    # vLLM's DeepGEMM experts over their padded layout (sim/moe_kernel.py), block-FP8 weights.
    (
        "h200-moe-deepgemm",
        {"gpu": "h200", "num_gpus": 4},
        "qwen3-235b-a22b",
        {"moe_kernel": "deepgemm"},
        {},
    ),
    (
        "vllm-v0-eagle",
        {"gpu": "h100-sxm", "num_gpus": 1},
        "llama-3.1-8b",
        {"preset": "vllm-v0"},
        {"method": "eagle"},
    ),
    ("vllm-v0", {"gpu": "h100-sxm", "num_gpus": 1}, "llama-3.1-8b", {"preset": "vllm-v0"}, {}),
    (
        "vllm-v1-async",
        {"gpu": "h100-sxm", "num_gpus": 1},
        "llama-3.1-8b",
        {"preset": "vllm-v1-async"},
        _EAGLE3,
    ),
    (
        "sglang-0.4",
        {"gpu": "h100-sxm", "num_gpus": 1},
        "llama-3.1-8b",
        {"preset": "sglang-0.4"},
        {},
    ),
    (
        "sglang-0.4-eagle2-tree",
        {"gpu": "h100-sxm", "num_gpus": 1},
        "llama-3.1-8b",
        {"preset": "sglang-0.4"},
        {"method": "eagle2", "tree": {"topk": 4, "depth": 5, "num_draft_tokens": 8}},
    ),
    (
        "sglang-0.5-eagle3",
        {"gpu": "h100-sxm", "num_gpus": 2},
        "llama-3.1-70b",
        {"preset": "sglang-0.5"},
        _EAGLE3,
    ),
    ("trtllm", {"gpu": "h100-sxm", "num_gpus": 2}, "llama-3.1-70b", {"preset": "trtllm-1.0"}, {}),
    # A policy chooses the chain's length per step: each step priced by its k's chain.
    (
        "h100-dense-eagle3-adaptive",
        {"gpu": "h100-sxm", "num_gpus": 1},
        "llama-3.1-8b",
        {"preset": "sglang"},
        {**_EAGLE3, "num_speculative_tokens": 4, "policy": {"name": "sglang-ema"}},
    ),
    ("llamacpp", {"gpu": "h100-sxm", "num_gpus": 1}, "llama-3.1-8b", {"preset": "llamacpp"}, {}),
    # A CPU node: no CUDA graphs or launches, the sharp roofline (sim/cpu_node.py).
    ("llamacpp-cpu", {"gpu": "epyc-9554", "num_gpus": 1}, "phi-4", {"preset": "llamacpp"}, {}),
]


@cache
def _lowered(name: str) -> tuple[cost_kernel.LoweredCost, cost_kernel.LoweredCost, int]:
    _, hardware, model, engine, speculation = next(n for n in NODES if n[0] == name)
    document: dict[str, Any] = {
        "seed": 1,
        "hardware": hardware,
        "model": model,
        "precision": {"weights": "fp8"} if engine.get("moe_kernel") == "deepgemm" else {},
        "engine": engine,
        # Acceptance only shapes the plans, not the cost: a flat rate suits every method.
        "speculation": {**speculation, "acceptance": {"alpha": 0.7}}
        if speculation
        else {"method": "none"},
        "workload": {
            "num_requests": 4,
            "arrival": {"process": "poisson", "rate_per_s": 1.0},
            "prompt_tokens": {"distribution": "uniform", "low": 20, "high": 60},
            "output_tokens": {"distribution": "uniform", "low": 2, "high": 20},
        },
    }
    try:
        simulation = build_simulation(validate_document(document, name), Path("."))
    except SpecsimError as exc:  # the catalogue's own checks: name the combination that broke
        raise AssertionError(f"{name}: {exc}") from exc
    core = simulation.core
    # Without grids every term comes from the table; with them, shapes within 3,000 tokens and
    # 700 logit rows (draft forwards within 3,000 new tokens and 300 sequences) read the grids
    # (those beyond, the table).
    grids = ((0, 0, 0), (3_000, 700, 300))
    args = (core.cost_model, core.drafter, core.speculative)
    assert all(cost_kernel.lower(*args, *grid) is not None for grid in grids), name
    # Evaluators of their own, not the ones lower() shares: tests below rebuild their tables.
    lowered = [cost_kernel.LoweredCost(*args, *grid) for grid in grids]
    return lowered[0], lowered[1], core.scheduler.config.max_num_seqs


@st.composite
def step_shapes(draw: st.DrawFn, max_seqs: int, max_per_seq: int = 9) -> tuple[Any, ...]:
    """Random blocks of steps: decode-only steps (every token yields logits: plain decodes and
    verify steps of up to ``max_per_seq`` tokens a sequence, CUDA-graph sizes and beyond) mixed
    with prefill steps."""
    m = draw(st.integers(1, 12))
    b = np.array(draw(st.lists(st.integers(1, max(2, 2 * max_seqs)), min_size=m, max_size=m)))
    per_seq = np.array(draw(st.lists(st.integers(1, max_per_seq), min_size=m, max_size=m)))
    prefill = np.array(draw(st.lists(st.integers(0, 20_000), min_size=m, max_size=m)))
    decode_only = np.array(draw(st.lists(st.booleans(), min_size=m, max_size=m)))
    logits = b * per_seq
    tokens = np.where(decode_only, logits, logits + prefill)
    context = np.array(draw(st.lists(st.integers(0, 4_000), min_size=m, max_size=m)))
    kv_read = b * context + tokens
    pairs_x2 = tokens * (2 * context + 1) + np.where(decode_only, 0, prefill * prefill)
    drafting = np.array(draw(st.lists(st.integers(0, 1), min_size=m, max_size=m))) * b
    work = DraftWork(
        num_seqs=drafting,
        num_new_tokens=drafting * per_seq,
        context_tokens=drafting * (context + per_seq),
        num_full_accept=drafting // 2,
        num_proposed=drafting * 3,
    )
    return (b, tokens, logits, kv_read, pairs_x2, work)


SHAPES = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("name", [n[0] for n in NODES])
@SHAPES
@given(data=st.data())
def test_lowered_cost_equals_the_python_cost_model(name: str, data: st.DataObject) -> None:
    *both, max_seqs = _lowered(name)
    shape = data.draw(step_shapes(max_seqs))
    expected_total, expected = both[0].reference(*shape)
    for lowered in both:
        total, parts = lowered.durations(*shape)
        for key in cost_kernel.ROWS[:-1]:
            assert np.array_equal(parts[key], expected[key]), (name, key)
        assert np.array_equal(total, expected_total), name
        # A second call reads every term from the table: still the same.
        again, _ = lowered.durations(*shape)
        assert np.array_equal(again, expected_total), name


@SHAPES
@given(data=st.data())
def test_a_wide_tree_takes_the_masked_kernel_in_both_paths(data: st.DataObject) -> None:
    # Trees of up to 64 tokens a sequence over up to 4,000 cached tokens: wide enough that the
    # masked kernel (FA2 rate) outlasts the KV reads, which 9 tokens never do.
    *both, max_seqs = _lowered("sglang-0.4-eagle2-tree")
    assert both[0].cost_model._kernels.prices_tree_mask
    shape = data.draw(step_shapes(max_seqs, max_per_seq=64))
    expected_total, expected = both[0].reference(*shape)
    for lowered in both:
        total, parts = lowered.durations(*shape)
        assert np.array_equal(parts["attention_s"], expected["attention_s"])
        assert np.array_equal(total, expected_total)


@SHAPES
@given(data=st.data())
def test_a_chain_length_chosen_per_step_is_lowered_and_priced_as_its_chain(
    data: st.DataObject,
) -> None:
    # AdaptiveDrafter prices each step with the strategy of k = ceil(proposed / sequences)
    # (steps of one block, and sequences of one step, may draft different k): the evaluator
    # cuts the longest chain's levels to k and must give the same seconds, bit for bit.
    *both, max_seqs = _lowered("h100-dense-eagle3-adaptive")
    assert all(lowered.draft_form == cost_eval.DRAFT_NETWORKS for lowered in both)
    b, tokens, logits, kv_read, pairs_x2, work = data.draw(step_shapes(max_seqs))
    per_seq = np.array(data.draw(st.lists(st.integers(0, 4), min_size=len(b), max_size=len(b))))
    # Up to k_max drafts per sequence, not always a multiple of the sequences (mixed k).
    extra = np.array(data.draw(st.lists(st.integers(0, 3), min_size=len(b), max_size=len(b))))
    seqs = np.asarray(work.num_seqs)
    proposed = np.minimum(seqs * per_seq + extra * (per_seq < 4), 4 * seqs) * (seqs > 0)
    work = DraftWork(
        work.num_seqs, work.num_new_tokens, work.context_tokens, work.num_full_accept, proposed
    )
    shape = (b, tokens, logits, kv_read, pairs_x2, work)
    expected_total, expected = both[0].reference(*shape)
    for lowered in both:
        total, parts = lowered.durations(*shape)
        assert np.array_equal(parts["draft_s"], expected["draft_s"])
        assert np.array_equal(total, expected_total)


@pytest.mark.parametrize("name", ["h100-dense-eagle3", "h100-tp8-eagle3", "h100-dense"])
def test_a_table_that_grows_while_a_block_is_priced_is_read_anew(name: str) -> None:
    # Regression: the table moved to a larger one while the evaluator still held the old arrays,
    # so the second pass of a block found its newly priced keys missing (an EAGLE-3 run of 40,000
    # requests on the default scenario stopped there).
    lowered, _, _ = _lowered(name)  # without grids: every term goes through the table
    lowered._new_table(4)  # two keys fit before it must grow; the block below brings dozens
    m = 48
    b = np.arange(1, m + 1, dtype=np.int64)
    tokens = 3 * b
    work = DraftWork(
        num_seqs=b,
        num_new_tokens=tokens,
        context_tokens=b * 500,
        num_full_accept=b // 2,
        num_proposed=3 * b,
    )
    shape = (b, tokens, tokens, b * 500 + tokens, tokens * 1001, work)
    expected_total, _ = lowered.reference(*shape)
    total, _ = lowered.durations(*shape)
    assert np.array_equal(total, expected_total)
    assert len(lowered._table_used) > 4


def test_a_grid_entry_priced_to_zero_is_read_from_the_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A grid starts as zero pages: 0.0 reads as "not priced". An entry that prices to 0.0 must
    # then come from the table, or every step that needs it would hand back for ever. A step of
    # 2,999 tokens (beyond the CUDA-graph sizes: its padded size is its own) with 5 logit rows.
    _, with_grids, _ = _lowered("h100-dense")
    lowered = cost_kernel.LoweredCost(
        with_grids.cost_model, with_grids.drafter, with_grids.speculative, 3_000, 700, 300
    )
    real = lowered._leaves

    def zero_at_2999(n: Any, n_logits: Any, graphed: Any) -> tuple[Any, Any]:
        linear, allreduce = real(n, n_logits, graphed)
        return np.where(n == 2_999, 0.0, linear), allreduce

    monkeypatch.setattr(lowered, "_leaves", zero_at_2999)
    one = np.array([1], dtype=np.int64)
    work = DraftWork(*(np.zeros(1, dtype=np.int64) for _ in range(5)))
    shape = (one, 2_999 * one, 5 * one, 3_000 * one, 2_999 * 3_000 * one, work)
    total, parts = lowered.durations(*shape)
    assert parts["linear_s"][0] == 0.0 and np.isfinite(total[0])
    assert lowered._table_used.sum() == 1  # the zero entry went to the table
    again, _ = lowered.durations(*shape)  # read from the table: nothing missing
    assert np.array_equal(again, total)
    neighbour, _ = lowered.durations(one, 2_998 * one, 5 * one, 3_000 * one, 2_998 * 3_000 * one,
                                     work)  # fmt: skip
    expected, _ = lowered.reference(
        one, 2_998 * one, 5 * one, 3_000 * one, 2_998 * 3_000 * one, work
    )
    assert np.array_equal(neighbour, expected)  # its block's other entries are the model's


def test_a_full_table_raises_instead_of_probing_for_ever() -> None:
    # The table is kept at most half full; should that ever break, a probe for a key that is
    # not there must stop after visiting every slot once and say so (it used to loop for ever,
    # and the growth regression test above would hang rather than fail).
    lowered, _, _ = _lowered("h100-dense-eagle3")  # without grids: every term in the table
    lowered._new_table(4)
    keys = np.array([[1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    lowered._store(*lowered._table(), keys, np.ones(4), np.ones(4))
    assert lowered._table_used.all()
    with pytest.raises(InvariantError, match="table full"):
        lowered._store(*lowered._table(), np.array([[9.0], [1.0], [0.0]]), np.ones(1), np.ones(1))
    work = DraftWork(*(np.array([1]) for _ in range(5)))
    one = np.array([1], dtype=np.int64)
    with pytest.raises(InvariantError, match="table full"):
        lowered.durations(one, 4 * one, 4 * one, 504 * one, 4008 * one, work)
    # A key in the full table is still found, at the slot it was stored in.
    table_keys, _, used = lowered._table()
    slot = cost_eval._probe(table_keys, used, 3.0, 1.0, 0.0)
    assert list(table_keys[slot]) == [3.0, 1.0, 0.0]


def test_a_parallel_layout_keeps_the_python_path() -> None:
    document: dict[str, Any] = {
        "seed": 1,
        "hardware": {
            "gpu": "b200",
            "num_gpus": 8,
            "num_nodes": 2,
            "tensor_parallel": 8,
            "expert_parallel": 16,
        },
        "model": "deepseek-v3",
        "workload": {
            "num_requests": 4,
            "arrival": {"process": "poisson", "rate_per_s": 1.0},
            "prompt_tokens": {"distribution": "uniform", "low": 20, "high": 60},
            "output_tokens": {"distribution": "uniform", "low": 2, "high": 20},
        },
    }
    simulation = build_simulation(validate_document(document, "dp"), Path("."))
    core = simulation.core
    assert core.cost_model._parallel is not None
    assert cost_kernel.lower(core.cost_model, core.drafter, core.speculative) is None


@pytest.mark.parametrize(
    "extra",
    [
        # A pipeline prices a step as its stages' round trip (sim/pipeline.py).
        {
            "model": "llama-3.1-70b",
            "hardware": {"gpu": "h100-sxm", "num_gpus": 8, "num_nodes": 2, "pipeline_parallel": 2},
        },
        # Gated DeltaNet layers read and write a state per sequence (sim/linear_attention.py).
        {
            "model": "qwen3-next-80b-a3b",
            "precision": {"weights": "fp8"},
            "hardware": {"gpu": "h200", "num_gpus": 2},
        },
    ],
    ids=["pipeline", "linear-attention"],
)
def test_terms_the_evaluator_does_not_carry_keep_the_python_path(extra: dict[str, Any]) -> None:
    document: dict[str, Any] = {"seed": 1, "workload": {"num_requests": 4}, **extra}
    core = build_simulation(validate_document(document, "kept"), Path(".")).core
    assert cost_kernel.lower(core.cost_model, core.drafter, core.speculative) is None


# --- whole runs: the evaluator in the engine --------------------------------------------------
def _run_scenario(document: dict[str, Any], name: str, compiled_cost: bool) -> Any:
    simulation = build_simulation(validate_document(document, name), Path("."))
    simulation.core.compiled_cost = compiled_cost
    simulation.core.lower_cost_after = 3  # the Python model first, then the evaluator: a switch
    return execute(simulation), simulation.core


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_identical_records_for_whole_scenarios(name: str) -> None:
    document = SCENARIOS[name]
    if name.endswith("kv-pressure"):
        document = tight_pool(document)
    (compiled, core), (reference, _) = (
        _run_scenario(document, name, compiled_cost=flag) for flag in (True, False)
    )
    assert core._lowered is not None  # the evaluator did cost this run's later blocks
    _assert_identical(compiled.steps, reference.steps)
    _assert_identical(
        {k: compiled.requests[k] for k in REQUEST_COLUMNS},
        {k: reference.requests[k] for k in REQUEST_COLUMNS},
    )
    assert replace(compiled.summary, wall_time_s=None) == replace(
        reference.summary, wall_time_s=None
    )


def test_runs_that_price_alike_share_one_evaluator_and_keep_their_records() -> None:
    # A sweep's points and a plan's probes differ in rate and seed, not in what a step costs:
    # lower() hands them the evaluator the first built, its grids and table already priced. A
    # run on a shared evaluator gives the records of a run on a fresh one; a node that prices
    # steps otherwise (another step overhead, another method) gets its own.
    base = SCENARIOS["eagle3-chain"]

    def run(document: dict[str, Any]) -> tuple[Any, Any]:
        result, core = _run_scenario(document, "shared", compiled_cost=True)
        return result, core._lowered

    cost_sharing.BUILT.clear()
    _, first = run(base)
    shared_result, shared = run({**base, "seed": base.get("seed", 0) + 1})
    assert shared is first
    cost_sharing.BUILT.clear()
    fresh_result, fresh = run({**base, "seed": base.get("seed", 0) + 1})
    assert fresh is not first
    _assert_identical(shared_result.steps, fresh_result.steps)
    _assert_identical(
        {k: shared_result.requests[k] for k in REQUEST_COLUMNS},
        {k: fresh_result.requests[k] for k in REQUEST_COLUMNS},
    )
    engine = {**base.get("engine", {}), "step_overhead_s": 0.004}
    _, other = run({**base, "engine": engine})
    assert other is not fresh
    _, again = run({**base, "seed": base.get("seed", 0) + 2})
    assert again is fresh  # the other node's evaluator did not push this one out
    for extra in range(cost_sharing.KEEP_BUILT + 1):
        run({**base, "engine": {**engine, "step_overhead_s": 0.005 + extra / 1000}})
    assert len(cost_sharing.BUILT) == cost_sharing.KEEP_BUILT


def test_runs_in_other_threads_get_evaluators_of_their_own() -> None:
    # Runs in threads of one process (a Dask worker's) would price into one table at once:
    # an evaluator is shared within its thread only.
    import threading

    _, with_grids, _ = _lowered("h100-dense")
    args = (with_grids.cost_model, with_grids.drafter, with_grids.speculative, 100, 50, 20)
    cost_sharing.BUILT.clear()
    here = cost_kernel.lower(*args)
    assert cost_kernel.lower(*args) is here
    there: list[Any] = []
    thread = threading.Thread(target=lambda: there.append(cost_kernel.lower(*args)))
    thread.start()
    thread.join()
    assert there[0] is not None and there[0] is not here


@pytest.mark.parametrize("policy", ["goodput", "oracle", "sglang-ema"])
def test_identical_records_when_a_policy_chooses_k(policy: str) -> None:
    # The goodput and EMA policies change k between steps, the oracle between the sequences of
    # one step: the evaluator prices each step's drafting by its chain, as the drafter does.
    speculation = {
        "method": "eagle3",
        "num_speculative_tokens": 4,
        "acceptance": {"alpha": 0.7},
        "policy": {"name": policy},
        "allow_unsupported": True,
    }
    document = {**SCENARIOS["eagle3-chain"], "speculation": speculation}
    (compiled, core), (reference, _) = (
        _run_scenario(document, policy, compiled_cost=flag) for flag in (True, False)
    )
    assert core._lowered is not None and core._lowered.draft_form == cost_eval.DRAFT_NETWORKS
    drafted = compiled.steps["spec_k"][compiled.steps["spec_k"] > 0]
    assert len(np.unique(drafted)) > 1  # k did change between steps
    _assert_identical(compiled.steps, reference.steps)
    _assert_identical(
        {k: compiled.requests[k] for k in REQUEST_COLUMNS},
        {k: reference.requests[k] for k in REQUEST_COLUMNS},
    )


def _drive(setup: EngineSetup, compiled_cost: bool, fast_forward: bool) -> dict[str, Any]:
    core = build_core(setup, fast_forward=fast_forward)
    core.compiled_cost = compiled_cost
    core.lower_cost_after = 1
    return record_of(drive_node(setup, core=core)[0])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=engine_setups(speculative=True), fast_forward=st.booleans())
def test_identical_records_with_random_acceptance_plans(
    setup: EngineSetup, fast_forward: bool
) -> None:
    # Stepping one by one and fast-forwarding both price through the evaluator.
    compiled = _drive(setup, compiled_cost=True, fast_forward=fast_forward)
    _assert_identical(compiled, _drive(setup, compiled_cost=False, fast_forward=fast_forward))


def test_without_numba_the_python_path_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # What an installation without numba sees: no compiled evaluator, the same records.
    document = SCENARIOS["eagle3-chain"]
    reference, _ = _run_scenario(document, "eagle3-chain", compiled_cost=True)
    monkeypatch.setattr(cost_eval, "compiled", lambda: None)
    plain, core = _run_scenario(document, "eagle3-chain", compiled_cost=True)
    assert core._lowered is None and not core.compiled_cost
    _assert_identical(plain.steps, reference.steps)
