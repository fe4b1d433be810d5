"""vLLM's DeepGEMM path for block-FP8 experts: the padded layout it computes, its throughput from
DeepGEMM's published table, the engine releases that run it for decode batches, and an
out-of-sample check against a published DeepGEMM-on/off measurement (sim/data/moe_kernels.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.catalogue import get_gpu, get_model
from sim.cost_model import StepShape
from sim.errors import CatalogueError, ScenarioError
from sim.moe import engine_moe_kernel, grouped_gemm_layer
from sim.moe_kernel import (
    deepgemm_flops_fraction,
    deepgemm_layer,
    deepgemm_padded_rows,
    moe_efficiency,
    moe_kernels_document,
    moe_layer,
)
from sim.run import build_simulation
from sim.scenario import validate_document


def qwen3_235b_fp8():
    return get_model("qwen3-235b-a22b").with_precision("fp8", "bf16")


def test_padded_rows_are_vllms_worst_case_layout() -> None:
    # compute_aligned_M: round_up(M*topk + E*(128-1), 128). Qwen3-235B at TP 2 (128 local
    # experts, top-8): 16 tokens fill 128 + 16,256 = 16,384 rows, 17 tokens one block more.
    assert deepgemm_padded_rows(16, 8, 128) == 16384
    assert deepgemm_padded_rows(17, 8, 128) == 16384 + 128
    # EP 2: 64 local experts, each rank still counting the whole batch's top-k ids:
    # 128 + 8,128 = 8,256 rows, rounded up to 65 blocks.
    assert deepgemm_padded_rows(16, 8, 64) == 65 * 128


@given(st.integers(0, 8192), st.integers(1, 16), st.integers(1, 512))
def test_padded_rows_hold_every_routed_row_in_whole_blocks(
    tokens: int, topk: int, experts: int
) -> None:
    rows = float(deepgemm_padded_rows(tokens, topk, experts))
    assert rows % 128 == 0
    # Enough for every expert's rows rounded up to a block: sum ceil(n_e/128)*128 <= T*k + E*127.
    assert rows >= tokens * topk + experts * 127
    assert rows < tokens * topk + experts * 127 + 128


def test_throughput_is_the_readme_table_weighted_by_flops() -> None:
    # Gate-up (2/3 of the FLOPs) at 1292.5 TFLOPS, down (1/3) at 1096: harmonic mean 1219.6,
    # over the H800's 1979 TFLOPS FP8 peak.
    assert deepgemm_flops_fraction() * 1979.0 == pytest.approx(1219.6, abs=0.1)


def test_a_decode_step_pays_for_the_whole_padded_layout() -> None:
    # Below 16 tokens every step computes the same 16,384 rows: the GEMM term does not shrink
    # with the batch, unlike the Triton kernel's, which only multiplies the routed rows.
    layer = grouped_gemm_layer(qwen3_235b_fp8(), get_gpu("h200"), tp=2, kernel="deepgemm")
    triton = grouped_gemm_layer(qwen3_235b_fp8(), get_gpu("h200"), tp=2)
    assert layer is not None and triton is not None
    one, sixteen = (float(layer.time_s(t)) for t in (1, 16))
    assert one > 0.5 * sixteen
    assert float(layer.time_s(4)) > 2.0 * float(triton.time_s(4))


def test_published_deepgemm_on_off_gap_out_of_sample() -> None:
    # vllm-project/recipes PR #112: MiniMax-M2 FP8 on H100, 10 clients, mean TPOT 32.21 ms with
    # DeepGEMM and 16.39 ms without. Nothing is fitted to it: the gap per MoE layer is DeepGEMM's
    # padded layout at its published throughput less the measured Triton fit, over 62 layers.
    check = moe_kernels_document()["deepgemm"]["check"]
    shape = {k: check[k] for k in ("hidden_size", "inter_size", "num_experts", "topk", "tp")}
    triton = moe_layer(check["gpu"], "fp8_block", **shape)
    deep = deepgemm_layer(
        check["gpu"], efficiency=moe_efficiency(check["gpu"], "fp8_block"), **shape
    )
    tokens = check["concurrency"]
    gap = check["num_moe_layers"] * float(deep.time_s(tokens) - triton.time_s(tokens))
    measured = check["measured_tpot_with_s"] - check["measured_tpot_without_s"]
    assert gap == pytest.approx(measured, rel=0.15)


def test_vllm_releases_that_route_decode_through_deepgemm() -> None:
    model, h200 = qwen3_235b_fp8(), get_gpu("h200")
    assert engine_moe_kernel("vllm 0.12.0", h200, model, 2) == "deepgemm"
    assert engine_moe_kernel("vllm 0.11.1", h200, model, 8) == "deepgemm"  # before PR #29346
    assert engine_moe_kernel("vllm 0.12.0", h200, model, 8) == "triton"  # PR #29346
    assert engine_moe_kernel("vllm 0.11.0", h200, model, 2) == "triton"  # E8M0 off on Hopper
    # 0.13-0.14 run DeepGEMM but skip the unused layout: not this kernel's cost.
    assert engine_moe_kernel("vllm 0.14.0", h200, model, 2) == "triton"
    assert engine_moe_kernel("vllm 0.15.1", h200, model, 2) == "triton"
    assert engine_moe_kernel("sglang 0.5.6.post2", h200, model, 2) == "triton"
    assert engine_moe_kernel("vllm 0.12.0", get_gpu("b200"), model, 2) == "triton"
    assert engine_moe_kernel("vllm", h200, model, 2) == "triton"
    gpt_oss = get_model("gpt-oss-120b").with_precision("mxfp4", "bf16")
    assert engine_moe_kernel("vllm 0.12.0", h200, gpt_oss, 2) == "triton"


def test_deepgemm_refuses_experts_that_are_not_block_fp8_on_hopper() -> None:
    with pytest.raises(CatalogueError, match="block-scaled FP8"):
        grouped_gemm_layer(get_model("mixtral-8x7b"), get_gpu("h100-sxm"), kernel="deepgemm")
    # Its throughput is the H800's: a Blackwell GPU is not priced with it.
    with pytest.raises(CatalogueError, match="priced on Hopper GPUs"):
        grouped_gemm_layer(qwen3_235b_fp8(), get_gpu("b200"), kernel="deepgemm")
    document = {
        "model": "mixtral-8x7b",
        "hardware": {"gpu": "h100-sxm", "num_gpus": 2},
        "engine": {"moe_kernel": "deepgemm"},
        "workload": {"num_requests": 2},
    }
    with pytest.raises(ScenarioError, match=r"engine\.moe_kernel: deepgemm runs block-scaled"):
        build_simulation(validate_document(document, "t"), Path.cwd())


def test_the_kernel_reaches_the_step_cost() -> None:
    document = {
        "model": "qwen3-235b-a22b",
        "precision": {"weights": "fp8"},
        "hardware": {"gpu": "h200", "num_gpus": 4},
        "workload": {"num_requests": 2},
    }
    plain = build_simulation(validate_document(document, "t"), Path.cwd())
    document["engine"] = {"moe_kernel": "deepgemm"}
    deep = build_simulation(validate_document(document, "t"), Path.cwd())
    # Eight decoding sequences with 1,000 tokens of context each.
    shape = StepShape(8, 8, 8, 8000, 8 * 1000.5)
    plain_s = plain.core.cost_model.breakdown(shape)["linear_s"]
    deep_s = deep.core.cost_model.breakdown(shape)["linear_s"]
    # 94 MoE layers, each computing 16,384 padded rows instead of 64 routed ones.
    assert float(deep_s - plain_s) > 0.005
