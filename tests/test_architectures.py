"""MoE, MLA and sliding-window models: derived sizes against the published totals, and the
closed forms the cost model uses for them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.catalogue import get_gpu, get_model
from sim.cost_model import StepCostModel
from sim.efficiency import load_efficiency

# Published (total, activated) parameters in billions, from each model's card or report. The
# sources count "activated" three ways: with the embedding table (DeepSeek, Kimi, Qwen, Llama),
# which ``active_linear_params`` (a matmul count) leaves out and is added back here; without it
# (gpt-oss); without embedding and output layer (GLM), where the lm_head is taken off.
PUBLISHED = {
    "deepseek-v3": (671.0, 37.0),  # arXiv:2412.19437 (MTP module excluded)
    "kimi-k2": (1040.0, 32.0),  # Kimi K2 model card: "1T total" / 1.04T in its table
    "qwen3-30b-a3b": (30.5, 3.3),  # Qwen3 model card
    "qwen3-235b-a22b": (235.0, 22.0),
    "gpt-oss-120b": (116.8, 5.1),  # gpt-oss model card (active excludes the embedding)
    "gpt-oss-20b": (20.9, 3.6),
    "llama-4-scout": (109.0, 17.0),  # Llama 4 model card
    "llama-4-maverick": (400.0, 17.0),
    "glm-4.5": (355.0, 32.0),  # arXiv:2508.06471
    "glm-4.5-air": (106.0, 12.0),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_total_and_active_parameters_match_the_published_figures(name: str) -> None:
    model = get_model(name)
    total, active = PUBLISHED[name]
    assert model.total_params / 1e9 == pytest.approx(total, rel=0.03)
    counted = model.active_linear_params + model.embedding_params
    if name.startswith("gpt-oss"):
        counted -= model.embedding_params
    if name.startswith("glm"):
        counted -= model.embedding_params + model.lm_head_params
    assert counted / 1e9 == pytest.approx(active, rel=0.08)


def test_deepseek_v3_caches_one_576_element_latent_per_layer() -> None:
    model = get_model("deepseek-v3")
    # 61 layers x (kv_lora 512 + rope 64) x 2 bytes = 70,272 bytes per token (arXiv:2405.04434).
    assert model.kv_bytes_per_token == 61 * 576 * 2
    # 7.0x smaller than the same heads in GQA with 128 K and V heads of 128+64 dims.
    assert model.spec.num_kv_heads == 1


def test_mla_decode_uses_the_absorbed_form_and_prefill_the_materialised_one() -> None:
    model = get_model("deepseek-v3")
    nh, layers = 128, 61
    assert model.attention_flops_per_pair == layers * nh * (2 * (512 + 64) + 2 * 512)
    assert model.prefill_attention_flops_per_pair == layers * nh * (2 * (128 + 64) + 2 * 128)


def test_moe_layers_follow_the_dense_prefix_and_the_interleave() -> None:
    assert get_model("deepseek-v3").num_moe_layers == 61 - 3
    assert get_model("kimi-k2").num_moe_layers == 61 - 1
    assert get_model("llama-4-maverick").num_moe_layers == 24
    assert get_model("mixtral-8x7b").num_moe_layers == 32
    assert get_model("llama-3.1-8b").num_moe_layers == 0


@given(st.integers(min_value=1, max_value=100_000))
def test_expected_distinct_experts_is_the_closed_form_and_bounded(num_tokens: int) -> None:
    model = get_model("deepseek-v3")
    e, k = 256, 8
    touched = float(model.expected_experts_touched(num_tokens))
    # E·(1 − (1 − k/E)^n): each expert is missed by one token with probability 1 − k/E.
    assert touched == pytest.approx(e * (1 - (1 - k / e) ** num_tokens))
    assert min(k, e) - 1e-9 <= touched <= min(e, num_tokens * k) + 1e-9


def test_expected_distinct_experts_matches_a_monte_carlo_of_top_k_routing() -> None:
    rng = np.random.default_rng(7)
    e, k, n = 128, 8, 20
    hits = [
        len({int(x) for _ in range(n) for x in rng.choice(e, size=k, replace=False)})
        for _ in range(2000)
    ]
    expected = float(get_model("qwen3-30b-a3b").expected_experts_touched(n))
    # Sampling error of the mean of 2000 draws is about 0.1 experts.
    assert np.mean(hits) == pytest.approx(expected, abs=0.5)


def test_sliding_window_layers_stop_reading_beyond_the_window() -> None:
    model = get_model("gpt-oss-120b")
    cost = StepCostModel(model, get_gpu("h100-sxm"), 1, load_efficiency("h100-sxm"), 0.0)
    shape = {"num_seqs": 1.0, "num_tokens": 1.0, "num_logit_tokens": 1.0}
    from sim.cost_model import StepShape

    def attention(context: float) -> float:
        parts = cost.breakdown(StepShape(kv_read_tokens=context, attention_pairs=context, **shape))
        return float(parts["attention_s"])

    # Beyond 128 tokens only the 18 full layers' reads grow: the slope halves.
    short = attention(128.0) - attention(64.0)
    long = attention(100_128.0) - attention(100_064.0)
    assert long == pytest.approx(short / 2, rel=1e-6)


def test_gemm_kernels_outside_the_experts_per_layer_kind() -> None:
    # A dense GQA layer runs 4 GEMMs (QKV, O, gate-up, down): the count the per-GEMM floor was
    # fitted with on Llama-3.1-8B. DeepSeek-V3: 61 MLA blocks of 5 (absorbed decode), 3 dense
    # MLPs of 2, 58 MoE layers of a router and a shared expert's 2. Qwen3-235B: 94 GQA blocks of
    # 2 and 94 routers (no shared expert).
    assert get_model("llama-3.1-8b").dense_gemm_kernels == 4 * 32
    assert get_model("deepseek-v3").dense_gemm_kernels == 61 * 5 + 3 * 2 + 58 * 3
    assert get_model("qwen3-235b-a22b").dense_gemm_kernels == 94 * 2 + 94 * 1
