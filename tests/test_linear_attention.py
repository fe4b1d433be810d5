"""Qwen3-Next's Gated DeltaNet layers: parameter counts against the published model, the fixed
state a sequence keeps instead of KV, and what the state costs a step and the memory plan."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.catalogue import get_gpu, get_model
from sim.cost_model import StepCostModel, StepShape
from sim.efficiency import load_efficiency
from sim.linear_attention import (
    STATE_BYTES_PER_ELEMENT,
    gdn_layer_params,
    state_reserve_bytes,
)
from sim.run import build_simulation
from sim.scenario import validate_document

NEXT = get_model("qwen3-next-80b-a3b")
H200 = get_gpu("h200")


def test_one_linear_layer_has_the_published_parameter_count() -> None:
    # transformers' Qwen3NextDecoderLayer (Gated DeltaNet + sparse MoE) holds 1,648,531,648
    # parameters (torchinfo of Qwen3NextForCausalLM built from the Qwen3-Next-80B-A3B config);
    # our count leaves out its 2,048-parameter shared-expert gate (H -> 1).
    moe = NEXT.moe_always_on_params_per_layer + 512 * NEXT.expert_params_per_layer
    layer = gdn_layer_params(NEXT.spec) + moe + NEXT.norm_params_per_layer
    assert layer == 1_648_531_648 - 2048


def test_the_model_totals_80b_with_3b_activated() -> None:
    # Model card: 80B total, 3B activated (3.9B with the embedding table, as transformers counts).
    assert NEXT.total_params == pytest.approx(79.67e9, rel=1e-3)
    assert NEXT.active_linear_params + NEXT.embedding_params == pytest.approx(3.87e9, rel=1e-2)


def test_only_the_full_attention_layers_cache_kv_and_the_rest_keep_a_state() -> None:
    # 12 gated-attention layers of 2 KV heads of 256: K and V in bf16.
    assert NEXT.kv_bytes_per_token == 12 * 2 * 2 * 256 * 2
    # vLLM's gated_delta_net_state_shape: (n_v, d_v, d_k) + (2·n_k·d_k + n_v·d_v, kernel − 1).
    per_layer = 32 * 128 * 128 + (2 * 16 * 128 + 32 * 128) * 3
    assert NEXT.linear_state_bytes_per_seq == 36 * per_layer * STATE_BYTES_PER_ELEMENT


def test_a_step_reads_and_writes_every_running_sequences_state() -> None:
    eff = load_efficiency("h200")
    cost = StepCostModel(NEXT.with_precision("fp8", "bf16"), H200, 2, eff, 0.0)
    one = cost.breakdown(StepShape(8, 8, 8, 8 * 1000, 8 * 1001))["attention_s"]
    two = cost.breakdown(StepShape(16, 16, 16, 8 * 1000, 8 * 1001))["attention_s"]
    # Same context read, 8 more sequences: 8 more states read and written, split over TP 2.
    expected = 8 * 2 * NEXT.linear_state_bytes_per_seq / (2 * eff.bandwidth * 4.8e12)
    assert float(two - one) == pytest.approx(expected, rel=1e-6)


def test_the_memory_plan_sets_aside_one_state_per_sequence_slot() -> None:
    document = {
        "model": "qwen3-next-80b-a3b",
        "precision": {"weights": "fp8"},
        "hardware": {"gpu": "h200", "num_gpus": 2},
        "workload": {"num_requests": 4},
    }
    sim = build_simulation(validate_document(document, "test"), Path.cwd())
    seqs = sim.engine.max_num_seqs
    reserve = state_reserve_bytes(sim.model, 2, 1, seqs)
    assert reserve == pytest.approx(seqs * NEXT.linear_state_bytes_per_seq / 2)
    assert sim.memory.reserved_bytes >= reserve
    assert np.isfinite(sim.memory.num_blocks) and sim.memory.num_blocks > 0
