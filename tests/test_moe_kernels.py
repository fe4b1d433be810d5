"""The grouped-GEMM cost of MoE layers: which fused-MoE fit prices a model's experts, and how a
fit measured on one GPU carries to another as fractions of its peaks."""

from __future__ import annotations

import numpy as np
import pytest

from sim.catalogue import get_gpu, get_model
from sim.errors import CatalogueError
from sim.moe import (
    default_moe_kernel,
    grouped_gemm_layer,
    matmul_ogs_efficiency,
    matmul_ogs_refusal,
    moe_kernel_dtype,
)
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


def test_sglang_runs_matmul_ogs_for_mxfp4_experts_on_hopper_only() -> None:
    # SGLang's server picks triton_kernels (matmul_ogs) for gpt-oss with ep_size 1 on Hopper and
    # FlashInfer on Blackwell; the vLLM presets keep the fused_moe pricing (moe_kernels.yaml).
    h100, h200, b200 = get_gpu("h100-sxm"), get_gpu("h200"), get_gpu("b200")
    mx = get_model("gpt-oss-120b").with_precision("mxfp4", "bf16")
    assert default_moe_kernel("sglang-0.5", mx, h100) == "matmul_ogs"
    assert default_moe_kernel("sglang-0.5", mx, h200) == "matmul_ogs"
    assert default_moe_kernel("sglang-0.5", mx, b200) == "triton"
    assert default_moe_kernel("vllm-v1", mx, h100) == "triton"
    assert default_moe_kernel("sglang-0.5", get_model("gpt-oss-120b"), h100) == "triton"


def test_matmul_ogs_streams_mxfp4_bytes_at_its_own_measured_efficiency() -> None:
    mx = get_model("gpt-oss-120b").with_precision("mxfp4", "bf16")
    h100 = get_gpu("h100-sxm")
    ogs = grouped_gemm_layer(mx, h100, kernel="matmul_ogs")
    bf16 = grouped_gemm_layer(get_model("gpt-oss-120b"), h100)
    assert ogs is not None and bf16 is not None
    assert ogs.efficiency == matmul_ogs_efficiency()
    # Same bytes per weight (4.25 bits), read at the kernel's own fraction of the bandwidth.
    ratio = (4.25 / 16) * bf16.efficiency.bandwidth / ogs.efficiency.bandwidth
    assert ogs.weight_s_per_expert / bf16.weight_s_per_expert == pytest.approx(ratio)


@pytest.mark.parametrize(
    ("model", "gpu", "words"),
    [
        ("gpt-oss-120b", "h100-sxm", "has bf16 weights"),
        ("mixtral-8x7b", "h100-sxm", "has bf16 weights"),
    ],
)
def test_matmul_ogs_on_weights_it_does_not_run_is_refused(model: str, gpu: str, words: str) -> None:
    assert words in matmul_ogs_refusal(get_model(model), get_gpu(gpu))
    mx = get_model("gpt-oss-120b").with_precision("mxfp4", "bf16")
    assert "b200 is not one" in matmul_ogs_refusal(mx, get_gpu("b200"))
    with pytest.raises(CatalogueError, match="matmul_ogs runs MXFP4 experts"):
        grouped_gemm_layer(get_model(model), get_gpu(gpu), kernel="matmul_ogs")
