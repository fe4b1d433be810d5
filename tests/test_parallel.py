"""Deployments across nodes: the split's rules, per-GPU weights, the all-to-all's closed form,
and the bad splits a user can write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from sim.catalogue import get_gpu, get_model
from sim.cost_model import StepCostModel, StepShape
from sim.efficiency import load_efficiency
from sim.engine.memory import plan_memory
from sim.errors import ScenarioError
from sim.parallel import COMBINE_BYTES_PER_ELEMENT, DISPATCH_BYTES_PER_ELEMENT, Layout
from sim.parallel_cost import ParallelStepCost
from sim.run import build_simulation
from sim.scenario import validate_document
from specsim.cli import app

DEEPSEEK = get_model("deepseek-v3").with_precision("fp8", "bf16")
H200 = get_gpu("h200")


def _scenario(hardware: dict[str, Any], model: str = "deepseek-v3", **extra: Any) -> Any:
    document = {
        "model": model,
        "precision": {"weights": "fp8"},
        "hardware": {"gpu": "h200", **hardware},
        "workload": {"num_requests": 8},
        **extra,
    }
    return validate_document(document, "test")


def test_layout_counts_groups_and_expert_shards() -> None:
    layout = Layout(gpus_per_node=8, num_nodes=2, tp=8, ep=16)
    assert (layout.world, layout.dp, layout.moe_tp) == (16, 2, 1)
    assert Layout(8).is_single_group and not layout.is_single_group


def test_weights_per_gpu_split_dense_by_tp_and_experts_by_the_world() -> None:
    layout = Layout(gpus_per_node=8, num_nodes=2, tp=8, ep=16)
    routed = 58 * 256 * DEEPSEEK.expert_params_per_layer * 1.0  # fp8: one byte a weight
    expected = (DEEPSEEK.weight_bytes - routed) / 8 + routed / 16
    assert layout.weight_bytes_per_gpu(DEEPSEEK) == pytest.approx(expected)
    # DeepSeek-V3 in FP8 does not fit one node of H100s but fits 16 H200s with room for KV.
    assert 40e9 < layout.weight_bytes_per_gpu(DEEPSEEK) < 0.6 * H200.memory_bytes


def test_deepseek_v3_runs_on_16_h200_with_ep_and_keeps_a_kv_pool_per_group() -> None:
    hardware = {"num_gpus": 8, "num_nodes": 2, "tensor_parallel": 8, "expert_parallel": 16}
    sim = build_simulation(_scenario(hardware), Path.cwd())
    layout = Layout(gpus_per_node=8, num_nodes=2, tp=8, ep=16)
    engine = sim.engine
    one_group = plan_memory(
        DEEPSEEK,
        H200,
        8,
        engine.gpu_memory_utilization,
        engine.block_size,
        engine.max_num_batched_tokens,
        engine.max_num_seqs,
        engine.reserved_memory_bytes,
        weight_bytes_per_gpu=layout.weight_bytes_per_gpu(DEEPSEEK),
        kv_sizing=engine.kv_sizing,
    )
    # Each of the two attention groups holds its own pool of the same size.
    assert sim.memory.num_blocks == 2 * one_group.num_blocks
    # The latent is not split by TP: every GPU of a group keeps the whole 70 KB per token.
    assert sim.memory.kv_bytes_per_token == DEEPSEEK.kv_bytes_per_token


def _alltoall_only(layout: Layout, n: float) -> float:
    eff = load_efficiency("h200")
    cost = StepCostModel(DEEPSEEK, H200, layout.attention_tp, eff, 0.0, layout=layout)
    assert cost._parallel is not None
    return float(cost._parallel._a2a.time_s(np.array([n]))[0])


def test_dispatch_and_combine_follow_bytes_over_the_link() -> None:
    n, h, k, layers = 4096.0, 7168, 8, 58
    # Within one node of 8 (EP 8): (N/8)·k·7/8 rows of H·(1.03 + 2) bytes over NVLink busbw.
    intra = Layout(gpus_per_node=8, tp=1, ep=8)
    rows = n / 8 * k * 7 / 8
    bytes_ = rows * h * (DISPATCH_BYTES_PER_ELEMENT + COMBINE_BYTES_PER_ELEMENT)
    latency = 2 * H200.allreduce_latency_at(8)
    expected = layers * (latency + bytes_ / H200.interconnect_bus_bandwidth_bytes_per_s)
    assert _alltoall_only(intra, n) == pytest.approx(expected)
    # Across two nodes (EP 16) 8 of 15 peers are remote: the NIC's share dominates.
    inter = Layout(gpus_per_node=8, num_nodes=2, tp=8, ep=16)
    rows = n / 16 * k * 15 / 16
    bytes_ = rows * h * (DISPATCH_BYTES_PER_ELEMENT + COMBINE_BYTES_PER_ELEMENT)
    latency = 2 * (H200.allreduce_latency_at(8) + H200.internode_latency_s)
    expected = layers * (latency + bytes_ * 8 / 15 / H200.internode_bandwidth_bytes_per_s)
    assert _alltoall_only(inter, n) == pytest.approx(expected)


def test_data_parallel_attention_without_ep_gathers_and_scatters_every_moe_layer() -> None:
    # Qwen3-235B on 2 GPUs of attention DP 2, experts split 2 ways (vLLM DP without EP): every
    # MoE layer all-gathers and reduce-scatters N·H bf16 over 2 GPUs, (2−1)/2 of it per GPU.
    model = get_model("qwen3-235b-a22b").with_precision("fp8", "bf16")
    eff = load_efficiency("h200")
    layout = Layout(gpus_per_node=2, tp=1, ep=1)
    cost = ParallelStepCost(model, H200, layout, eff)
    n = np.array([0.0, 1024.0])
    per_token = 2 * 0.5 * model.spec.hidden_size * 2 / H200.interconnect_bus_bandwidth_bytes_per_s
    latency = 2 * H200.allreduce_latency_at(2)
    expected = model.num_moe_layers * (latency + per_token * n)
    assert cost.comm_s(n) == pytest.approx(expected)  # TP 1: no attention all-reduce
    # With EP the dispatch/combine replaces it; one TP group needs neither.
    with_ep = ParallelStepCost(model, H200, Layout(gpus_per_node=2, tp=1, ep=2), eff)
    assert with_ep._gather.time_s(n) == pytest.approx([0.0, 0.0])


def test_more_gpus_make_a_large_decode_step_faster_but_add_communication() -> None:
    eff = load_efficiency("h200")
    shape = StepShape(256.0, 256.0, 256.0, 256.0 * 2000, 256.0 * 2000)
    one = Layout(gpus_per_node=8, tp=8, ep=8)
    two = Layout(gpus_per_node=8, num_nodes=2, tp=8, ep=16)
    t_one = StepCostModel(DEEPSEEK, H200, 8, eff, 0.0, layout=one).breakdown(shape)
    t_two = StepCostModel(DEEPSEEK, H200, 8, eff, 0.0, layout=two).breakdown(shape)
    assert t_two["linear_s"] < t_one["linear_s"]
    assert t_two["attention_s"] < t_one["attention_s"]  # two groups share the batch


@pytest.mark.parametrize(
    ("model", "hardware", "key", "words"),
    [
        (
            "mixtral-8x7b",
            {"num_gpus": 8, "num_nodes": 2, "tensor_parallel": 8, "expert_parallel": 16},
            "hardware.expert_parallel",
            "larger than mixtral-8x7b's 8 experts",
        ),
        ("deepseek-v3", {"num_gpus": 6}, "hardware.num_gpus", "128 MLA attention heads"),
        (
            "deepseek-v3",
            {"num_gpus": 8, "num_nodes": 2, "tensor_parallel": 3},
            "hardware.tensor_parallel",
            "within a node",
        ),
        (
            "llama-3.1-70b",
            {"num_gpus": 8, "num_nodes": 2, "tensor_parallel": 8},
            "hardware",
            "fleet",
        ),
        (
            "llama-3.1-70b",
            {"num_gpus": 8, "expert_parallel": 2},
            "hardware.expert_parallel",
            "dense model",
        ),
    ],
)
def test_bad_splits_are_refused_naming_the_key(
    model: str, hardware: dict[str, Any], key: str, words: str
) -> None:
    with pytest.raises(ScenarioError, match=key.replace(".", r"\.")) as info:
        build_simulation(_scenario(hardware, model=model), Path.cwd())
    assert words in str(info.value)


def test_cli_refuses_ep_above_the_expert_count_with_exit_code_2(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    hardware = {"gpu": "h100-sxm", "num_gpus": 8, "num_nodes": 2, "expert_parallel": 16}
    path.write_text(yaml.safe_dump({"model": "mixtral-8x7b", "hardware": hardware}))
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "hardware.expert_parallel" in result.output and "Traceback" not in result.output
