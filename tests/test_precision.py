"""Weight and KV-cache precision: bytes moved, memory held, tensor throughput used."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.catalogue import BF16_BYTES, get_gpu, get_model
from sim.cost_model import StepCostModel
from sim.efficiency import load_efficiency
from sim.errors import CatalogueError, ScenarioError
from sim.run import build_simulation
from sim.scenario import Scenario

BASE = get_model("llama-3.1-70b")
FP8 = BASE.with_precision("fp8", "bf16")


def test_fp8_weights_halve_the_decoder_but_not_the_lm_head_or_embedding() -> None:
    s = BASE.spec
    head = s.vocab_size * s.hidden_size
    assert FP8.linear_weight_bytes_read == pytest.approx(
        (BASE.dense_linear_params - head) * 1.0 + head * BF16_BYTES
    )
    unquantised = (
        BASE.embedding_params + BASE.lm_head_params + s.num_layers * 2 * s.hidden_size
    ) + s.hidden_size
    assert FP8.weight_bytes == pytest.approx(
        (BASE.total_params - unquantised) + unquantised * BF16_BYTES
    )
    # Llama-3.1-70B in FP8 is about 70 GB (it fits one 80 GB H100), in bf16 about 141 GB.
    assert 68e9 < FP8.weight_bytes < 73e9 < 140e9 < BASE.weight_bytes


def test_fp8_kv_cache_halves_kv_bytes_per_token() -> None:
    assert BASE.with_precision("bf16", "fp8").kv_bytes_per_token == BASE.kv_bytes_per_token / 2


def test_fp8_weights_run_at_the_fp8_tensor_throughput() -> None:
    gpu, eff = get_gpu("h100-sxm"), load_efficiency("h100-sxm")
    bf16 = StepCostModel(BASE, gpu, 4, eff, 0.0)
    fp8 = StepCostModel(FP8, gpu, 4, eff, 0.0)
    # Compute-bound prefill of 8192 tokens: the body's FLOPs take half the time in FP8.
    n = np.array([8192.0])
    body_bf16 = bf16.linear_s(n, np.array([1.0])) - bf16.linear_s(np.array([0.0]), np.zeros(1))
    body_fp8 = fp8.linear_s(n, np.array([1.0])) - fp8.linear_s(np.array([0.0]), np.zeros(1))
    assert body_fp8[0] < 0.6 * body_bf16[0]
    # Memory-bound decode: close to half the weight read.
    one = np.array([1.0])
    assert fp8.linear_s(one, one)[0] < 0.6 * bf16.linear_s(one, one)[0]


def test_unknown_precision_is_refused() -> None:
    with pytest.raises(CatalogueError, match=r"precision\.weights"):
        BASE.with_precision("int3", "bf16")


def _scenario(**overrides: object) -> Scenario:
    document: dict[str, object] = {
        "model": "llama-3.1-70b",
        "hardware": {"gpu": "h100-sxm", "num_gpus": 1},
        "workload": {"num_requests": 4},
    }
    document.update(overrides)
    return Scenario.model_validate(document)


def test_a_70b_in_fp8_fits_one_h100_and_in_bf16_does_not() -> None:
    fits = build_simulation(_scenario(precision={"weights": "fp8"}), Path.cwd())
    assert fits.memory.num_blocks > 0
    with pytest.raises(Exception, match=r"llama-3\.1-70b"):
        build_simulation(_scenario(), Path.cwd())


def test_fp8_on_a_gpu_without_fp8_tensor_cores_names_the_key() -> None:
    scenario = _scenario(precision={"weights": "fp8"}, hardware={"gpu": "a100-80gb", "num_gpus": 1})
    with pytest.raises(ScenarioError, match=r"precision\.weights"):
        build_simulation(scenario, Path.cwd())
