"""Pipeline parallelism: the step's closed form (one micro-batch's round trip through the stages,
or the busiest stage's micro-batches back to back), what a GPU holds, and the splits refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sim.catalogue import get_gpu, get_model
from sim.cost_model import StepCostModel, StepShape, total_of
from sim.efficiency import load_efficiency
from sim.errors import ScenarioError
from sim.pipeline import (
    ACTIVATION_TENSORS,
    PipelineStepCostModel,
    check_pipeline,
    stage_model,
)
from sim.run import build_simulation
from sim.scenario import validate_document
from specsim.cli import app

LLAMA = get_model("llama-3.1-70b")
H100 = get_gpu("h100-sxm")
EFF = load_efficiency("h100-sxm")
LINK = dict(link_bandwidth_bytes_per_s=5.0e10, link_latency_s=2.0e-6)


def _decode(batch: float, context: float = 1000.0) -> StepShape:
    b = np.array([batch])
    return StepShape(b, b, b, b * context, b * (context + 1))


def _pipeline(p: int) -> PipelineStepCostModel:
    return PipelineStepCostModel(LLAMA, p, H100, 8, EFF, 1e-3, 1e-5, **LINK)


def test_a_stage_holds_its_share_of_the_layers_and_the_last_one_the_head() -> None:
    last, mid = stage_model(LLAMA, 4), stage_model(LLAMA, 4, with_head=False)
    assert last.spec.num_layers == mid.spec.num_layers == 20
    head = LLAMA.spec.vocab_size * LLAMA.spec.hidden_size
    assert last.dense_linear_params - mid.dense_linear_params == head - LLAMA.spec.hidden_size
    # Four stages of 20 layers are the model's 80: same per-layer sizes, a quarter of the KV.
    assert last.kv_bytes_per_token == pytest.approx(LLAMA.kv_bytes_per_token / 4)
    # 61 layers in 2 stages are priced as the larger stage, 31.
    assert stage_model(get_model("deepseek-v3"), 2).spec.num_layers == 31


def test_one_sequence_pays_every_stage_and_every_send_in_turn() -> None:
    # B = 1: one micro-batch; T = (p−1)·(t_mid + t_send) + t_last, no overlap at all.
    p, shape = 2, _decode(1)
    mid = StepCostModel(stage_model(LLAMA, p, with_head=False), H100, 8, EFF, 1e-3, 1e-5)
    last = StepCostModel(stage_model(LLAMA, p), H100, 8, EFF, 1e-3, 1e-5)
    send = (
        LINK["link_latency_s"] + ACTIVATION_TENSORS * 8192 * 2 / LINK["link_bandwidth_bytes_per_s"]
    )
    expected = total_of(mid.breakdown(shape)) + send + total_of(last.breakdown(shape))
    assert _pipeline(p).step_time(shape) == pytest.approx(expected)


@settings(max_examples=30, deadline=None)
@given(batch=st.integers(1, 512), p=st.sampled_from([2, 4, 8]))
def test_the_step_is_the_longer_of_the_round_trip_and_the_busiest_stage(batch: int, p: int) -> None:
    cost = _pipeline(p)
    shape = _decode(batch)
    m = min(p, batch)
    micro = _decode(batch / m)
    last = total_of(StepCostModel.breakdown(cost, micro))
    mid = total_of(cost._mid.breakdown(micro))
    send = LINK["link_latency_s"] + ACTIVATION_TENSORS * 8192 * 2 * (batch / m) / 5.0e10
    round_trip = (p - 1) * (mid + send) + last
    total = cost.step_time(shape)
    assert total == pytest.approx(np.maximum(round_trip, m * last))
    # The breakdown's parts add up to the step, and none is negative.
    parts = cost.breakdown(shape)
    assert total_of(parts) == pytest.approx(total)
    assert all(float(v[0]) >= 0 for v in parts.values())


def test_pipelining_does_not_shorten_a_lone_tokens_latency() -> None:
    # Memory-bound decode of one sequence: the stages read the same weights in turn.
    single = StepCostModel(LLAMA, H100, 8, EFF, 1e-3, 1e-5).step_time(_decode(1))
    assert _pipeline(2).step_time(_decode(1)) >= single


def _scenario(hardware: dict[str, Any], **extra: Any) -> Any:
    document = {
        "model": "llama-3.1-70b",
        "hardware": {"gpu": "h100-sxm", "num_gpus": 8, **hardware},
        "workload": {"num_requests": 8},
        **extra,
    }
    return validate_document(document, "test")


def test_two_stages_hold_half_the_weights_and_twice_the_kv_tokens_per_gpu() -> None:
    one = build_simulation(_scenario({}), Path.cwd())
    two = build_simulation(_scenario({"num_nodes": 2, "pipeline_parallel": 2}), Path.cwd())
    assert two.memory.weight_bytes < 0.55 * one.memory.weight_bytes
    # Each GPU caches half the layers of every token, with more free memory: > 2x the tokens.
    assert two.memory.num_blocks > 2 * one.memory.num_blocks


def test_a_speculative_pipeline_runs_with_its_drafter_on_the_last_stage() -> None:
    document = {
        "model": "deepseek-v3",
        "precision": {"weights": "fp8"},
        "hardware": {"gpu": "h200", "num_gpus": 8, "num_nodes": 2, "pipeline_parallel": 2},
        "engine": {"preset": "sglang-0.5"},
        "speculation": {"method": "mtp", "num_speculative_tokens": 1},
        "workload": {"num_requests": 8},
    }
    sim = build_simulation(validate_document(document, "test"), Path.cwd())
    assert isinstance(sim.core.cost_model, PipelineStepCostModel)
    assert sim.core.cost_model.model.spec.num_layers == 31


@pytest.mark.parametrize(
    ("pp", "nodes", "message"),
    [
        (3, 2, "hardware.pipeline_parallel: 3 must divide hardware.num_nodes (2)"),
        (16, 16, "hardware.pipeline_parallel: 16 stages for tiny's 4 layers"),
    ],
)
def test_bad_pipelines_are_refused_naming_the_key(pp: int, nodes: int, message: str) -> None:
    tiny = get_model("llama-3.1-8b")
    tiny = type(tiny).from_spec(tiny.spec.model_copy(update={"num_layers": 4}), "tiny")
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_pipeline(pp, nodes, tiny)


def test_cli_refuses_a_pipeline_across_part_of_a_node_with_exit_code_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--set",
            "model=llama-3.1-70b",
            "--set",
            "hardware.num_gpus=8",
            "--set",
            "hardware.num_nodes=2",
            "--set",
            "hardware.pipeline_parallel=4",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 2
    assert "hardware.pipeline_parallel: 4 must divide hardware.num_nodes (2)" in result.output
    assert "Traceback" not in result.output
