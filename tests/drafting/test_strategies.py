"""Each drafting strategy builds and runs end to end; draft cost and memory behave physically."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sim.catalogue import get_gpu, get_model
from sim.cost_model import StepCostModel
from sim.drafting import SUPPORT, Strategy, build_strategy, check_support
from sim.drafting.draft_model import DraftModelStrategy
from sim.efficiency import load_efficiency
from sim.engine.drafter import DraftWork
from sim.errors import ScenarioError
from sim.run import build_simulation, run_scenario
from sim.scenario import Scenario

#: An inline 8B-shaped model that ships one MTP module (no catalogue model does).
MTP_MODEL: dict[str, Any] = {
    "name": "llama-3.1-8b-mtp",
    "num_layers": 32,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_heads": 32,
    "num_kv_heads": 8,
    "head_dim": 128,
    "vocab_size": 128256,
    "num_mtp_modules": 1,
}


def scenario(method: str, preset: str = "vllm-v1", **speculation: Any) -> Scenario:
    """A tiny closed-loop scenario on Llama-3.1-8B (or the given model)."""
    model = speculation.pop("model", "llama-3.1-8b")
    spec: dict[str, Any] = {"method": method, **speculation}
    if method != "none" and "acceptance" not in spec:
        spec["acceptance"] = {"alpha": 0.7}
    return Scenario.model_validate(
        {
            "model": model,
            "engine": {"preset": preset},
            "speculation": spec,
            "workload": {
                "num_requests": 12,
                "arrival": {"process": "closed_loop", "concurrency": 4},
                "prompt_tokens": {"distribution": "fixed", "value": 64},
                "output_tokens": {"distribution": "fixed", "value": 48},
                "dataset": "mt-bench",
            },
        }
    )


def build(sc: Scenario, enforce: bool = True) -> Strategy:
    model = get_model(sc.model)
    gpu = get_gpu(sc.hardware.gpu)
    cost = StepCostModel(model, gpu, sc.hardware.num_gpus, load_efficiency(gpu.name),
                         1.7e-3)  # fmt: skip
    return build_strategy(sc, model, gpu, cost, sc.engine.preset, Path.cwd(),
                          enforce_support=enforce)  # fmt: skip


CASES = [
    ("vllm-v1", "draft_model", {"draft_model": "llama-3.2-1b"}),
    ("vllm-v1", "ngram", {"acceptance": {"alpha": 0.6, "ngram_match_rate": 0.5}}),
    ("vllm-v1", "medusa", {}),
    ("vllm-v1", "medusa", {"tree": {"shape": [2, 2]}}),
    ("vllm-v1", "eagle", {}),
    ("vllm-v1", "eagle", {"tree": {"shape": [2, 2, 2]}}),
    ("sglang", "eagle2", {"tree": {"topk": 4, "depth": 3, "num_draft_tokens": 8}}),
    ("vllm-v1", "eagle3", {}),
    ("sglang", "eagle3", {"tree": {"topk": 4, "depth": 5, "num_draft_tokens": 8}}),
    ("vllm-v1", "mtp", {"model": MTP_MODEL}),
]


@pytest.mark.parametrize(("preset", "method", "extra"), CASES)
def test_each_strategy_runs_end_to_end(preset: str, method: str, extra: dict[str, Any]) -> None:
    sc = scenario(method, preset, **dict(extra))
    result = run_scenario(sc, Path.cwd(), check_invariants=True)
    s = result.summary
    assert s.num_completed == 12
    assert s.mean_acceptance_length > 1.0
    assert float(np.sum(result.steps["draft_s"])) > 0.0


def test_lookahead_runs_when_support_is_not_enforced() -> None:
    # No engine runs lookahead decoding, so only the unchecked build reaches the engine.
    sc = scenario("lookahead", num_speculative_tokens=4, tree={"shape": [5, 1, 1, 1]})
    result = run_scenario(sc, Path.cwd(), check_invariants=True, enforce_support=False)
    strategy = build(sc, enforce=False)
    assert strategy.extra_tokens_per_decode == 5 * 4  # W·(N − 1)
    assert result.summary.num_completed == 12
    # Every decode step computes 1 + W·(N−1) + drafts tokens per sequence.
    assert result.summary.mean_tokens_per_step > 20


def work(num_seqs: int, k: int, context: int = 500) -> DraftWork:
    return DraftWork(
        num_seqs=np.array([num_seqs]),
        num_new_tokens=np.array([2 * num_seqs]),
        context_tokens=np.array([context * num_seqs]),
        num_full_accept=np.array([num_seqs // 4]),
        num_proposed=np.array([k * num_seqs]),
    )


MONOTONE = [
    ("draft_model", {"draft_model": "llama-3.2-1b"}),
    ("eagle", {}),
    ("eagle3", {}),
    ("mtp", {"model": MTP_MODEL}),
    ("medusa", {}),
]


@pytest.mark.parametrize(("method", "extra"), MONOTONE)
def test_draft_time_grows_with_k_and_batch(method: str, extra: dict[str, Any]) -> None:
    times_k = [
        float(build(scenario(method, num_speculative_tokens=k, **dict(extra))).draft_time_s(
            work(8, k))[0])
        for k in (1, 2, 4, 8)
    ]  # fmt: skip
    strategy = build(scenario(method, num_speculative_tokens=3, **dict(extra)))
    times_b = [float(strategy.draft_time_s(work(b, 3))[0]) for b in (1, 4, 32, 256, 1024)]
    assert all(a <= b for a, b in itertools.pairwise(times_k))
    assert all(a <= b for a, b in itertools.pairwise(times_b))
    assert times_b[-1] > times_b[0]
    if method != "medusa":  # Medusa drafts in one pass whatever k
        assert times_k[-1] > times_k[0]
    # No drafting sequence, no drafting time.
    assert float(strategy.draft_time_s(work(0, 3))[0]) == 0.0


def test_draft_model_memory_counts_its_weights_and_kv() -> None:
    sc = Scenario.model_validate(
        {
            "model": "llama-3.1-70b",
            "hardware": {"num_gpus": 4},
            "speculation": {
                "method": "draft_model",
                "draft_model": "llama-3.2-1b",
                "acceptance": {"alpha": 0.7},
            },
            "workload": {"num_requests": 4},
        }
    )
    with_draft = build_simulation(sc, Path.cwd())
    strategy = with_draft.strategy
    assert isinstance(strategy, DraftModelStrategy)
    draft = get_model("llama-3.2-1b")
    assert strategy.weight_bytes_per_gpu() == pytest.approx(draft.weight_bytes)
    plain = build_simulation(
        sc.model_copy(update={"speculation": sc.speculation.model_copy(
            update={"method": "none", "draft_model": None, "acceptance": None})}),
        Path.cwd(),
    )  # fmt: skip
    # The draft's weights leave less room for KV, and each token costs more KV bytes.
    assert with_draft.memory.weight_bytes - plain.memory.weight_bytes == pytest.approx(
        draft.weight_bytes
    )
    assert with_draft.memory.kv_bytes_per_token > plain.memory.kv_bytes_per_token
    assert with_draft.memory.num_blocks < plain.memory.num_blocks
    # Draft TP 1 holds the whole draft KV on one GPU: the fullest GPU pays all of it.
    target = get_model("llama-3.1-70b")
    assert with_draft.memory.kv_bytes_per_token == pytest.approx(
        target.kv_bytes_per_token / 4 + draft.kv_bytes_per_token
    )


def test_eagle_head_memory_is_its_own_layer_not_the_shared_lm_head() -> None:
    strategy = build(scenario("eagle"))
    target = get_model("llama-3.1-8b")
    h = target.spec.hidden_size
    assert strategy.weight_bytes_per_gpu() < target.lm_head_bytes
    assert strategy.weight_bytes_per_gpu() > 2 * 2 * h * h
    assert strategy.extra_kv_bytes_per_token() == pytest.approx(target.kv_bytes_per_token / 32)


@pytest.mark.parametrize(
    ("preset", "method", "extra", "key"),
    [
        ("vllm-v1", "lookahead", {}, "speculation.method"),
        ("sglang", "lookahead", {}, "speculation.method"),
        ("sglang", "medusa", {}, "speculation.method"),
        ("vllm-v1", "eagle2", {}, "speculation.method"),
        ("sglang", "eagle", {"tree": {"shape": [2, 2]}}, "speculation.tree"),
        ("vllm-v1", "eagle3", {"tree": {"topk": 4, "depth": 3, "num_draft_tokens": 8}},
         "speculation.tree"),
        ("vllm-v1", "draft_model", {"draft_model": "llama-3.2-1b", "draft_tp": 2},
         "speculation.draft_tp"),
        ("vllm-v1", "draft_model", {"draft_model": "tinyllama-1.1b"}, "speculation.draft_model"),
        ("vllm-v1", "draft_model", {}, "speculation.draft_model"),
        ("vllm-v1", "mtp", {}, "speculation.method"),
    ],
)  # fmt: skip
def test_unsupported_combinations_name_the_key(
    preset: str, method: str, extra: dict[str, Any], key: str
) -> None:
    with pytest.raises(ScenarioError, match=key.replace(".", r"\.")):
        build(scenario(method, preset, **dict(extra)))


def test_mtp_error_explains_which_models_ship_modules() -> None:
    with pytest.raises(ScenarioError, match="num_mtp_modules"):
        build(scenario("mtp"))


def test_support_table_covers_only_known_methods() -> None:
    from sim.scenario import METHODS

    for table in SUPPORT.values():
        assert set(table) <= set(METHODS)
    assert check_support(scenario("eagle", tree={"shape": [2, 2]})) == "experimental"
    assert check_support(scenario("eagle3")) == "supported"
