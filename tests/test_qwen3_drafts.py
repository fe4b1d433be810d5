"""Qwen3-1.7B, Qwen3-4B and Yi-34B: their sizes against published and logged figures, the
Qwen3 drafts' pairing with a Qwen3 target, their shipped acceptance against the source's other
runs, and the sweep rows that now run."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.acceptance.config import build_acceptance_model
from sim.acceptance.plan import Proposal
from sim.build import build_simulation
from sim.catalogue import get_model
from sim.errors import ScenarioError
from sim.run import run_scenario
from sim.scenario import Scenario
from sim.validation.points import load_points
from sim.validation.scenarios import inexpressible_reason, scenario_document

GIB = 2**30
LOGS = "tomasruizt/vllm-scripts @ d94d714, results/logs-2026-01-23"

#: vLLM's "Model loading took ... GiB" with each draft beside Qwen3-32B, less the 61.03 GiB it
#: took without one (the k = 3 InstructCoder logs): the draft's bf16 weights as loaded.
LOADED_DRAFT_GIB = {"qwen3-1.7b": 64.24 - 61.03, "qwen3-4b": 68.58 - 61.03}
#: Non-embedding parameters, billions (Qwen3 model cards: 1.4B and 3.6B).
NON_EMBEDDING_B = {"qwen3-1.7b": 1.4, "qwen3-4b": 3.6}


@pytest.mark.parametrize("name", sorted(LOADED_DRAFT_GIB))
def test_a_qwen3_draft_weighs_what_vllm_loaded_for_it(name: str) -> None:
    """Within 1% of the logged weights (printed to 0.01 GiB of 3.2 and 7.5: 0.3% and 0.1%);
    the model cards' totals (1.7B, 4.0B) are rounded to 0.1B, too coarse for a 1% check."""
    model = get_model(name)
    assert model.weight_bytes / GIB == pytest.approx(LOADED_DRAFT_GIB[name], rel=0.01)
    # The shapes the memory check rests on: one embedding table (tied) of 151,936 tokens.
    assert model.lm_head_params == 0 and model.spec.vocab_size == 151_936


@pytest.mark.parametrize("name", sorted(NON_EMBEDDING_B))
def test_a_qwen3_drafts_non_embedding_parameters_match_its_card(name: str) -> None:
    model = get_model(name)
    non_embedding = (model.total_params - model.embedding_params) / 1e9
    assert non_embedding == pytest.approx(NON_EMBEDDING_B[name], rel=0.01)


def test_yi_34b_holds_the_kv_pool_its_vllm_runs_reported() -> None:
    """inference-sim/inference-sim @ f90a1e3a testdata/roofline_goldendataset.json gives
    experiment 65 (Yi-34B, TP 2, H100, max_num_seqs 128, 2,048 batched tokens) 20,793 KV blocks.
    The pool is what 0.9 of the GPU leaves after 32.0 GiB of weights per GPU, so a wrong layer,
    head or width count moves it by far more than the 3% the budget's non-weight terms (the
    1 GiB reserve and the activation peak, each uncertain to about 1 GiB of the 38 GiB pool)
    allow; 34.39B parameters (the model card says 34B)."""
    point = next(p for p in load_points() if p.point_id.startswith("s2r-65-01-ai-yi-34b"))
    simulation = build_simulation(
        Scenario.model_validate(scenario_document(point)), Path.cwd(), step_records="summary"
    )
    assert simulation.memory.num_blocks == pytest.approx(20_793, rel=0.03)
    assert get_model("yi-34b").total_params / 1e9 == pytest.approx(34.39, abs=0.005)


def test_a_qwen3_draft_needs_a_target_of_its_vocabulary() -> None:
    """vLLM's draft model must share the target's tokenizer; the simulator checks the
    vocabulary size (sim/drafting/draft_model.py)."""
    good = {
        "model": "Qwen/Qwen3-32B",
        "hardware": {"gpu": "h100-sxm-94gb"},
        "workload": {"num_requests": 4, "dataset": "instructcoder"},
        "speculation": {"method": "draft_model", "draft_model": "Qwen/Qwen3-1.7B"},
    }
    run_scenario(Scenario.model_validate(good), Path.cwd())
    bad = {**good, "model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"}}
    with pytest.raises(ScenarioError, match="must share a tokenizer"):
        run_scenario(Scenario.model_validate(bad), Path.cwd())


#: The source's mean acceptance length over its nine concurrencies, per k (the "Acceptance
#: length" lines of the InstructCoder draft_model-<draft>-k<k> logs, to 0.01).
MEASURED_TAU = {
    "qwen3-1.7b": {
        1: (1.72, 1.73),
        2: (2.22, 2.24),
        3: (2.57, 2.60),
        4: (2.82, 2.87),
        5: (2.99, 3.07),
        6: (3.11, 3.20),
    },
    "qwen3-4b": {
        1: (1.77, 1.78),
        2: (2.33, 2.35),
        3: (2.78, 2.84),
        4: (3.12, 3.19),
        5: (3.34, 3.44),
        6: (3.53, 3.63),
    },
}
#: Where the reading misses: Qwen3-4B at k = 6 keeps the third position's conditional rate
#: (0.788) for positions 4-6, where the source's k = 6 run accepted less (3.70 predicted).
KNOWN_MISSES = {("qwen3-4b", 6)}


@pytest.mark.parametrize(
    ("draft", "k"),
    [
        pytest.param(
            draft,
            k,
            marks=[pytest.mark.xfail(strict=True, reason="later positions accept less")]
            if (draft, k) in KNOWN_MISSES
            else [],
        )
        for draft, by_k in MEASURED_TAU.items()
        for k in by_k
    ],
)
def test_the_shipped_pair_acceptance_reproduces_the_other_runs(draft: str, k: int) -> None:
    """The rates come from the k = 3 run at one client; the k = 1, 2, 4, 5, 6 runs are other
    servers, so their lengths check the conditional-rate reading out of sample, within the range
    the source measured widened by 0.04 (the server-to-server spread of the first position,
    as the EAGLE-3 rows of this source: tests/test_sweep_points.py)."""
    model = build_acceptance_model(
        None, "draft_model", "qwen3-32b", "instructcoder", 0.0, Path.cwd(), draft_model=draft
    )
    tau = model.expected_acceptance_length(Proposal.chain(k))
    low, high = MEASURED_TAU[draft][k]
    assert low - 0.04 <= tau <= high + 0.04


def test_a_draft_pair_without_shipped_acceptance_says_so() -> None:
    with pytest.raises(ScenarioError, match="draft 'qwen3-4b'"):
        build_acceptance_model(
            None,
            "draft_model",
            "qwen3-8b",
            "instructcoder",
            0.0,
            Path.cwd(),
            draft_model="qwen3-4b",
        )


#: The KV pools the draft runs logged ("GPU KV cache size"): target and draft KV per token.
LOGGED_POOL_TOKENS = {"qwen3-1.7b": 32_528, "qwen3-4b": 18_560}


@pytest.mark.parametrize("draft", sorted(LOGGED_POOL_TOKENS))
def test_the_draft_rows_run_and_bind_their_pool_where_the_logs_do(draft: str) -> None:
    """Every draft row is expressible, names its draft, and builds. The simulated pool (vLLM V1's
    profile-run plan with the draft's weights and KV beside the target's) is larger than the
    logged one by 0.63-0.68 GiB of KV (34,320 against 32,528 tokens, 20,336 against 18,560),
    as the EAGLE-3 rows' pool is (49,792 against 47,264): the plan under-counts what the
    profile run holds with a drafter by under 1 GiB. Both pools bind at the same
    concurrencies: a client's full request is 23 blocks of 16 tokens."""
    rows = [
        p for p in load_points() if p.point_id.startswith(f"tomasruizt-qwen3-32b-draft-{draft}")
    ]
    assert len(rows) == 9
    per_client = 23 * 16
    kv_per_token = get_model("qwen3-32b").kv_bytes_per_token + get_model(draft).kv_bytes_per_token
    for point in rows:
        assert inexpressible_reason(point) == ""
        document = scenario_document(point)
        assert document["speculation"]["draft_model"] == point.draft_model
        simulation = build_simulation(
            Scenario.model_validate(document), Path.cwd(), step_records="summary"
        )
        pool = simulation.memory.num_kv_tokens
        assert 0 < (pool - LOGGED_POOL_TOKENS[draft]) * kv_per_token < GIB
        demand = (point.concurrency or 0) * per_client
        assert (demand > pool) == (demand > LOGGED_POOL_TOKENS[draft])
