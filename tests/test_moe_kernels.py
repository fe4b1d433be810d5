"""The grouped-GEMM cost of MoE layers: which fused-MoE fit prices a model's experts, and how a
fit measured on one GPU carries to another as fractions of its peaks."""

from __future__ import annotations

import numpy as np
import pytest

from sim.catalogue import get_gpu, get_model
from sim.moe import grouped_gemm_layer, moe_kernel_dtype
from sim.moe_kernel import moe_efficiency, moe_layer


def test_block_scaled_fp8_checkpoints_use_the_block_kernel() -> None:
    h100, b200 = get_gpu("h100-sxm"), get_gpu("b200")
    deepseek = get_model("deepseek-v3").with_precision("fp8", "bf16")
    assert moe_kernel_dtype(deepseek, h100) == "fp8_block"
    assert moe_kernel_dtype(get_model("llama-4-scout").with_precision("fp8", "bf16"), h100) == "fp8"
    gpt_oss = get_model("gpt-oss-120b").with_precision("mxfp4", "bf16")
    # Weight-only on Hopper (the bf16 kernel), native FP4 on Blackwell (no measured kernel).
    assert moe_kernel_dtype(gpt_oss, h100) == "bf16"
    assert moe_kernel_dtype(gpt_oss, b200) is None


def test_weight_only_experts_stream_their_own_bytes_through_the_bf16_kernel() -> None:
    bf16 = get_model("gpt-oss-120b")
    mx = bf16.with_precision("mxfp4", "bf16")
    wide = grouped_gemm_layer(bf16, get_gpu("h100-sxm"))
    narrow = grouped_gemm_layer(mx, get_gpu("h100-sxm"))
    assert wide is not None and narrow is not None
    assert narrow.weight_s_per_expert / wide.weight_s_per_expert == pytest.approx(4.25 / 16)
    assert narrow.flop_s_per_token == wide.flop_s_per_token


def test_a_gpu_with_its_own_fit_uses_it() -> None:
    model = get_model("mixtral-8x7b")
    layer = grouped_gemm_layer(model, get_gpu("h100-sxm"), tp=2)
    own = moe_layer(
        "h100-sxm", "bf16", hidden_size=4096, inter_size=14336, num_experts=8, topk=2, tp=2
    )
    assert layer == own


def test_a_fit_carries_to_another_gpu_as_fractions_of_its_peaks() -> None:
    model = get_model("qwen3-235b-a22b").with_precision("fp8", "bf16")
    h100 = grouped_gemm_layer(model, get_gpu("h100-sxm"), tp=2)
    h200 = grouped_gemm_layer(model, get_gpu("h200"), tp=2)
    assert h100 is not None and h200 is not None
    assert h200.efficiency == moe_efficiency("h100-sxm", "fp8_block")
    # Same tensor peak and 4.8/3.35 the bandwidth: the bytes term shrinks by that ratio, the
    # FLOP term and the fixed time per layer do not.
    assert h200.weight_s_per_expert / h100.weight_s_per_expert == pytest.approx(3.35 / 4.8)
    assert h200.flop_s_per_token == pytest.approx(h100.flop_s_per_token)
    n = np.array([4.0])
    assert h200.time_s(n)[0] < h100.time_s(n)[0]
