"""The decoder's elementwise operators as a term of the step cost (sim/elementwise.py).

Checked: the bytes formula against a hand count, its tensor-parallel sharding, the term's shape
(zero up to the per-layer floor, then linear with the bandwidth slope), the five Vidur profiles'
achieved fractions reproduced from their slopes, and the term on every step path (the Python cost
model's breakdown and the compiled evaluator price it alike).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.catalogue import get_gpu, get_model
from sim.cost_model import StepShape
from sim.elementwise import (
    BANDWIDTH_FRACTION,
    FRACTION_INTERVAL,
    VIDUR_SLOPES,
    ElementwiseCost,
    bytes_per_token,
    model_bytes_per_token,
    profile_fractions,
)
from sim.engine import cost_eval, cost_kernel
from sim.engine.drafter import DraftWork
from sim.run import build_simulation
from sim.scenario import validate_document


def test_qwen3_32b_bytes_per_token_by_hand() -> None:
    """Qwen3-32B (H = 5,120, I = 25,600, 64 query + 8 KV heads of 128, q/k RMSNorm): two
    RMSNorms read and write H (4H), the residual add reads 2H and writes H (3H): 35,840
    elements; rope reads and writes q and k, (64 + 8)·128·2 = 18,432, and the q/k RMSNorm the
    same again, 18,432; SiLU-and-mul reads 2I and writes I, 76,800. 149,504 elements of 2 bytes
    is 299,008 bytes a token a layer."""
    assert model_bytes_per_token(get_model("qwen3-32b"), 1) == 299_008
    assert bytes_per_token(5120, 25600, 72, 128, qk_norm=True) == 299_008
    # Llama-2-7B as Vidur profiled it (no q/k norm): 2·(7·4,096 + 2·64·128 + 3·11,008).
    assert bytes_per_token(4096, 11008, 64, 128) == 2 * (28_672 + 16_384 + 33_024)


@settings(max_examples=60, deadline=None)
@given(
    hidden=st.integers(64, 16_384),
    intermediate=st.integers(64, 65_536),
    heads=st.integers(2, 256),
    head_dim=st.sampled_from([64, 128, 256]),
    qk_norm=st.booleans(),
    tp=st.sampled_from([1, 2, 4, 8]),
)
def test_norms_do_not_shrink_with_tp_and_the_rest_shrinks_one_over_tp(
    hidden: int, intermediate: int, heads: int, head_dim: int, qk_norm: bool, tp: int
) -> None:
    """Every rank normalises and adds the whole hidden state (7H elements whatever the TP);
    the head- and MLP-wise part is split tp ways (Megatron-LM sharding)."""
    whole = bytes_per_token(hidden, intermediate, heads, head_dim, qk_norm, 1)
    split = bytes_per_token(hidden, intermediate, heads, head_dim, qk_norm, tp)
    norms = 2 * 7 * hidden
    assert bytes_per_token(hidden, 0, 0, head_dim, qk_norm, tp) == norms
    assert split - norms == pytest.approx((whole - norms) / tp, rel=1e-12)


def test_the_five_profiles_fractions_come_from_their_slopes() -> None:
    """Vidur's slopes over the bytes per token give 0.463-0.515 of the H100's 3.35 TB/s
    (docs/cost-model.md); the mean, 0.490, sits inside that interval."""
    fractions = profile_fractions()
    assert set(fractions) == set(VIDUR_SLOPES)
    # Llama-2-7B by hand: 156,160 bytes / 0.10060 µs / 3.35e12 B/s.
    assert fractions["Llama-2-7b-hf"] == pytest.approx(156_160 / 0.10060e-6 / 3.35e12)
    assert pytest.approx((0.4634, 0.5148), abs=5e-5) == FRACTION_INTERVAL
    assert pytest.approx(0.4904, abs=5e-5) == BANDWIDTH_FRACTION
    assert FRACTION_INTERVAL[0] <= BANDWIDTH_FRACTION <= FRACTION_INTERVAL[1]
    # One law for five shapes: the slopes differ 1.9x, the bandwidths within 6 % of the mean.
    slopes = [p.slope_us_per_token for p in VIDUR_SLOPES.values()]
    assert max(slopes) / min(slopes) > 1.8
    assert all(abs(f / BANDWIDTH_FRACTION - 1) < 0.06 for f in fractions.values())


@settings(max_examples=60, deadline=None)
@given(per_layer_us=st.floats(0.0, 60.0), tokens=st.integers(0, 20_000))
def test_zero_below_the_per_layer_floor_and_linear_above(per_layer_us: float, tokens: int) -> None:
    """``L·max(0, N·b/(f·BW) − t_layer)``: zero up to the floor, then each token adds
    ``L·b/(f·BW)``."""
    model, gpu = get_model("qwen3-32b"), get_gpu("h100-sxm")
    cost = ElementwiseCost(model, gpu, 1, per_layer_us * 1e-6)
    slope = 64 * 299_008 / (BANDWIDTH_FRACTION * gpu.hbm_bandwidth_bytes_per_s)
    value = float(cost.seconds(tokens))
    if tokens <= cost.floor_tokens:
        assert value == 0.0
    else:
        assert value == pytest.approx(slope * (tokens - cost.floor_tokens), rel=1e-9, abs=1e-15)
    assert float(cost.seconds(tokens + 1)) - value <= slope * (1 + 1e-9)


def test_moe_layers_leave_the_routed_activation_to_the_fused_kernel() -> None:
    """Mixtral's routed experts' SiLU-and-mul is inside fused_experts: only norms, residual
    and rope count (2·(7·4,096 + 2·(32 + 8)·128) bytes)."""
    assert model_bytes_per_token(get_model("mixtral-8x7b"), 1) == 2 * (7 * 4096 + 2 * 40 * 128)


def test_bad_arguments_are_refused() -> None:
    model, gpu = get_model("qwen3-32b"), get_gpu("h100-sxm")
    with pytest.raises(ValueError, match="tensor-parallel"):
        bytes_per_token(1, 1, 1, 1, tp=0)
    with pytest.raises(ValueError, match="per-layer"):
        ElementwiseCost(model, gpu, 1, -1.0)
    with pytest.raises(ValueError, match="fraction"):
        ElementwiseCost(model, gpu, 1, 0.0, fraction=1.5)


def _core(model: str, preset: str) -> Any:
    document: dict[str, Any] = {
        "seed": 1,
        "hardware": {"gpu": "h100-sxm", "num_gpus": 1},
        "model": model,
        "engine": {"preset": preset},
        "workload": {"num_requests": 4},
    }
    return build_simulation(validate_document(document, "elementwise"), Path(".")).core


def test_the_step_cost_carries_the_term_inside_linear() -> None:
    """A 2,048-token prefill step of Qwen3-32B on vLLM V1 pays the elementwise time on top of
    the GEMMs: the breakdown's linear term is the GEMM grid's plus ``elementwise_s``."""
    cost = _core("qwen3-32b", "vllm-v1").cost_model
    tokens = np.array([2048.0, 4.0])
    shape = StepShape(np.array([1.0, 4.0]), tokens, np.array([1.0, 4.0]), tokens, tokens)
    parts = cost.breakdown(shape)
    extra = cost.elementwise_s(tokens)
    assert extra[0] > 0.0  # above the floor
    gemms = cost._kernels.linear_s(tokens, np.array([1.0, 4.0]))
    assert parts["linear_s"][0] == pytest.approx(gemms[0] + extra[0], rel=1e-12)


@pytest.mark.skipif(cost_eval.compiled() is None, reason="numba is not installed")
def test_the_compiled_evaluator_prices_the_term_as_the_python_path() -> None:
    """The compiled evaluator tabulates the linear term from the Python model: a step far
    above the per-layer floor costs the same on both paths, bit for bit."""
    core = _core("qwen3-32b", "vllm-v1")
    lowered = cost_kernel.lower(core.cost_model, core.drafter, core.speculative)
    assert lowered is not None
    b = np.array([1, 64, 256], dtype=np.int64)
    tokens = np.array([4096, 64, 2048], dtype=np.int64)
    logits = np.array([1, 64, 256], dtype=np.int64)
    kv_read = tokens + 100 * b
    pairs_x2 = tokens * (2 * 100 + 1)
    zero = np.zeros(3, dtype=np.int64)
    work = DraftWork(zero, zero, zero, zero, zero)
    expected_total, expected = lowered.reference(b, tokens, logits, kv_read, pairs_x2, work)
    total, parts = lowered.durations(b, tokens, logits, kv_read, pairs_x2, work)
    assert np.array_equal(parts["linear_s"], expected["linear_s"])
    assert np.array_equal(total, expected_total)
    assert float(core.cost_model.elementwise_s(4096.0)) > 0.0


def test_the_time_per_token_scales_with_the_gpus_bandwidth() -> None:
    """Bandwidth-bound: above the floor, a token costs in inverse ratio to the GPU's peak."""
    model = get_model("qwen3-32b")
    slow, fast = get_gpu("h100-sxm-94gb"), get_gpu("h100-sxm")
    tokens = np.array([3000.0, 4000.0])
    per_token = [
        float(np.diff(ElementwiseCost(model, gpu, 1, 2.8e-5).seconds(tokens))[0]) / 1000.0
        for gpu in (slow, fast)
    ]
    ratio = fast.hbm_bandwidth_bytes_per_s / slow.hbm_bandwidth_bytes_per_s
    assert per_token[0] / per_token[1] == pytest.approx(ratio, rel=1e-12)
