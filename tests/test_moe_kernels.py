"""The grouped-GEMM cost of MoE layers: which fused-MoE fit prices a model's experts, and how a
fit measured on one GPU carries to another as fractions of its peaks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.build import Simulation
from sim.catalogue import get_gpu, get_model
from sim.cost_model import StepShape
from sim.errors import CatalogueError, ScenarioError
from sim.moe import (
    default_moe_kernel,
    grouped_gemm_layer,
    matmul_ogs_efficiency,
    matmul_ogs_refusal,
    moe_kernel_dtype,
)
from sim.moe_kernel import moe_efficiency, moe_layer
from sim.run import build_simulation
from sim.scenario import validate_document


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
    hbm2e = grouped_gemm_layer(model, get_gpu("h100-sxm-94gb"), tp=2)
    assert h100 is not None and hbm2e is not None
    assert hbm2e.efficiency == moe_efficiency("h100-sxm", "fp8_block")
    # Same tensor peak and 2.4/3.35 the bandwidth: the bytes term grows by that ratio, the FLOP
    # term and the fixed time per layer do not.
    assert hbm2e.weight_s_per_expert / h100.weight_s_per_expert == pytest.approx(3.35 / 2.4)
    assert hbm2e.flop_s_per_token == pytest.approx(h100.flop_s_per_token)
    n = np.array([4.0])
    assert hbm2e.time_s(n)[0] > h100.time_s(n)[0]


def test_the_h200_prices_experts_with_its_own_fit() -> None:
    # The H200 measured the fused-MoE kernels itself (sim/data/kernels/h200.yaml): nothing is
    # carried from the H100 to it.
    model = get_model("qwen3-235b-a22b").with_precision("fp8", "bf16")
    h200 = grouped_gemm_layer(model, get_gpu("h200"), tp=2)
    assert h200 is not None
    assert h200.efficiency == moe_efficiency("h200", "fp8_block")
    assert h200.efficiency != moe_efficiency("h100-sxm", "fp8_block")


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


@pytest.mark.parametrize("model", ["gpt-oss-120b", "mixtral-8x7b"])
def test_matmul_ogs_on_weights_other_than_mxfp4_is_refused(model: str) -> None:
    # Both are bf16 in the catalogue: the fit is of MXFP4 weights upcast inside the kernel.
    h100 = get_gpu("h100-sxm")
    assert "has bf16 weights" in matmul_ogs_refusal(get_model(model), h100)
    with pytest.raises(CatalogueError, match="matmul_ogs runs MXFP4 experts"):
        grouped_gemm_layer(get_model(model), h100, kernel="matmul_ogs")


def test_matmul_ogs_off_hopper_is_refused() -> None:
    # Blackwell multiplies FP4 natively (SGLang runs FlashInfer's MXFP4 kernel there).
    mx = get_model("gpt-oss-120b").with_precision("mxfp4", "bf16")
    assert "b200 is not one" in matmul_ogs_refusal(mx, get_gpu("b200"))
    assert matmul_ogs_refusal(mx, get_gpu("h200")) == ""


def _gpt_oss_on_h100(engine: dict[str, str]) -> Simulation:
    document = {
        "model": "gpt-oss-120b",
        "precision": {"weights": "mxfp4"},
        "hardware": {"gpu": "h100-sxm", "num_gpus": 1},
        "engine": engine,
        "workload": {"num_requests": 2},
    }
    return build_simulation(validate_document(document, "t"), Path.cwd())


def test_an_unset_kernel_is_the_presets_and_reaches_the_step_cost() -> None:
    # Eight decoding sequences with 1,000 tokens of context each.
    shape = StepShape(8, 8, 8, 8000, 8 * 1000.5)

    def linear_s(engine: dict[str, str]) -> float:
        return float(_gpt_oss_on_h100(engine).core.cost_model.breakdown(shape)["linear_s"])

    sglang = linear_s({"preset": "sglang-0.5"})
    assert sglang == linear_s({"preset": "sglang-0.5", "moe_kernel": "matmul_ogs"})
    assert linear_s({"preset": "vllm-v1"}) == linear_s(
        {"preset": "vllm-v1", "moe_kernel": "triton"}
    )
    # The measured kernel is slower than the bf16 fit with MXFP4 bytes: 36 layers at ~8 tokens.
    assert sglang > linear_s({"preset": "sglang-0.5", "moe_kernel": "triton"}) + 36 * 10e-6
    with pytest.raises(ScenarioError, match=r"engine\.moe_kernel: matmul_ogs runs MXFP4"):
        build_simulation(
            validate_document(
                {
                    "model": "mixtral-8x7b",
                    "hardware": {"num_gpus": 2},
                    "engine": {"moe_kernel": "matmul_ogs"},
                    "workload": {"num_requests": 2},
                },
                "t",
            ),
            Path.cwd(),
        )
