"""The evaluation functions: interpolation invariants and the physics each model must respect."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import kernels, moe_kernel
from sim.catalogue import get_model
from sim.efficiency import load_efficiency

TABLES = [
    (gpu, mode, tp)
    for gpu in ("h100-sxm", "h200")
    for mode in ("graph", "eager", "nccl")
    for tp in (2, 4, 8)
]


@pytest.mark.parametrize(("gpu", "mode", "tp"), TABLES)
def test_tables_are_exact_at_their_points_and_flat_below_the_first(
    gpu: str, mode: str, tp: int
) -> None:
    table = kernels.allreduce_table(gpu, tp, mode)
    np.testing.assert_array_equal(
        kernels.allreduce_s(gpu, tp, table.message_bytes, mode), table.latency_s
    )
    below = kernels.allreduce_s(gpu, tp, [0.0, 1.0, table.message_bytes[0] / 2], mode)
    np.testing.assert_array_equal(below, table.latency_s[0])


@pytest.mark.parametrize(("gpu", "mode", "tp"), TABLES)
@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.floats(0.0, 4e9, allow_nan=False), min_size=2, max_size=30))
def test_latency_never_falls_as_the_message_grows(
    gpu: str, mode: str, tp: int, sizes: list[float]
) -> None:
    b = np.sort(np.asarray(sizes))
    t = kernels.allreduce_s(gpu, tp, b, mode)
    assert np.all(np.diff(t) >= 0) and np.all(t > 0)


@pytest.mark.parametrize(("gpu", "mode", "tp"), TABLES)
def test_beyond_the_table_the_last_segments_bandwidth_carries_on(
    gpu: str, mode: str, tp: int
) -> None:
    table = kernels.allreduce_table(gpu, tp, mode)
    b1, b0 = table.message_bytes[-1], table.message_bytes[-2]
    t1, t0 = table.latency_s[-1], table.latency_s[-2]
    extra = 3.0 * b1
    assert kernels.allreduce_s(gpu, tp, b1 + extra, mode) == pytest.approx(
        t1 + extra * (t1 - t0) / (b1 - b0), rel=1e-12
    )


def test_between_points_the_interpolation_is_log_log() -> None:
    table = kernels.allreduce_table("h100-sxm", 8, "nccl")
    b0, b1 = table.message_bytes[10], table.message_bytes[11]
    t0, t1 = table.latency_s[10], table.latency_s[11]
    mid = np.sqrt(b0 * b1)
    assert kernels.allreduce_s("h100-sxm", 8, mid, "nccl") == pytest.approx(np.sqrt(t0 * t1))


def test_negative_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="message_bytes must be >= 0"):
        kernels.allreduce_s("h100-sxm", 2, [-1.0], "graph")


def test_graph_mode_beats_eager_for_small_messages_at_every_degree() -> None:
    # The custom all-reduce inside a CUDA graph skips the launch and IPC set-up of eager mode.
    for tp in (2, 4, 8):
        small = [1024.0, 16 * 1024.0]
        assert np.all(
            kernels.allreduce_s("h100-sxm", tp, small, "graph")
            < kernels.allreduce_s("h100-sxm", tp, small, "eager")
        )


def test_uniform_routing_is_the_catalogues_expected_experts() -> None:
    mixtral = get_model("mixtral-8x7b")
    tokens = np.array([1.0, 2.0, 4.0, 16.0, 256.0])
    np.testing.assert_allclose(
        moe_kernel.experts_touched(
            tokens, mixtral.spec.num_experts, mixtral.spec.experts_per_token
        ),
        mixtral.expected_experts_touched(tokens),
    )
    np.testing.assert_array_equal(
        moe_kernel.experts_touched(tokens, 8, 2, "spread"), [2, 4, 8, 8, 8]
    )
    with pytest.raises(ValueError, match="routing"):
        moe_kernel.experts_touched(tokens, 8, 2, "skewed")


QWEN3_235B = {"hidden_size": 4096, "inter_size": 1536, "num_experts": 128, "topk": 8}


@pytest.mark.parametrize("dtype", ["bf16", "fp8", "fp8_block"])
def test_moe_time_grows_with_tokens_and_shrinks_with_expert_parallelism(dtype: str) -> None:
    tokens = np.array([1, 2, 8, 32, 128, 512, 2048, 8192], dtype=float)
    one = moe_kernel.moe_layer_s("h100-sxm", dtype, tokens, **QWEN3_235B)
    assert np.all(np.diff(one) > 0)
    eight = moe_kernel.moe_layer_s("h100-sxm", dtype, tokens, **QWEN3_235B, ep=8)
    assert np.all(eight < one)
    eff = moe_kernel.moe_efficiency("h100-sxm", dtype)
    assert np.all(one > eff.floor_s)


def test_fp8_moe_reads_half_the_weight_bytes_of_bf16_at_one_token() -> None:
    # One token: bandwidth-bound on 8 experts' weights, so fp8 is well under bf16.
    bf16 = moe_kernel.moe_layer_s("h100-sxm", "bf16", 1.0, **QWEN3_235B)
    fp8 = moe_kernel.moe_layer_s("h100-sxm", "fp8", 1.0, **QWEN3_235B)
    assert fp8 < 0.8 * bf16


def test_gemm_efficiency_bf16_is_the_shipped_table_and_fp8_is_fitted() -> None:
    assert kernels.gemm_efficiency("h100-sxm", "bf16") == load_efficiency("h100-sxm")
    for dtype in ("fp8", "fp8_block"):
        eff = kernels.gemm_efficiency("h100-sxm", dtype)
        assert 0 < eff.bandwidth <= 1 and 0 < eff.flops <= 1 and eff.roofline_p >= 1


def test_decode_attention_is_linear_in_kv_and_sequences() -> None:
    for kv in ("bf16", "fp8"):
        d = kernels.decode_attention("h100-sxm", kv)
        base = d.layer_s(1, 0, 8, 128)
        assert base == pytest.approx(d.floor_s + 8 * d.per_seq_kv_head_s)
        kv_tokens = np.array([1e3, 2e3, 4e3])
        grow = d.layer_s(1, kv_tokens, 8, 128) - base
        np.testing.assert_allclose(grow[1:] / grow[:-1], 2.0)
    assert kernels.decode_attention("h100-sxm", "fp8").kv_bytes_per_element == 1


def test_prefill_attention_charges_causal_pairs_at_the_fitted_flops() -> None:
    p = kernels.prefill_attention("h100-sxm")
    isl = 4096.0
    pairs = isl * (isl + 1) / 2
    t = p.layer_s(isl, pairs, 32, 128)
    expected = (
        p.floor_s + isl * 32 * p.per_token_head_s + 4 * 32 * 128 * pairs / (p.flops * 989.0e12)
    )
    assert t == pytest.approx(expected)


def test_moe_layer_is_the_documented_roofline() -> None:
    # Qwen3-235B-A22B at TP 2, 64 tokens, bf16: the formula of docs/kernels.md written out.
    e = moe_kernel.moe_efficiency("h100-sxm", "bf16")
    h, inter, experts, k, tp, t = 4096, 1536 / 2, 128, 8, 2, 64.0
    touched = experts * (1 - (1 - k / experts) ** t)
    act = 2 * (t * k * (3 * inter + h) + t * k * (2 * h + 3 * inter))
    bw_s = (touched * 3 * h * inter * 2 + act) / (e.bandwidth * 3.35e12)
    fl_s = 2 * t * k * 3 * h * inter / (e.flops * 989e12)
    expected = e.floor_s + (bw_s**e.roofline_p + fl_s**e.roofline_p) ** (1 / e.roofline_p)
    layer = moe_kernel.moe_layer(
        "h100-sxm", "bf16", hidden_size=4096, inter_size=1536, num_experts=experts, topk=k, tp=tp
    )
    assert layer.time_s(t) == pytest.approx(expected, rel=1e-12)
    assert moe_kernel.moe_layer_s(
        "h100-sxm", "bf16", t, hidden_size=4096, inter_size=1536, num_experts=experts, topk=k, tp=tp
    ) == layer.time_s(t)


@pytest.mark.parametrize(
    ("kwargs", "message"), [({"tp": 0}, "tp and ep"), ({"routing": "x"}, "routing")]
)
def test_moe_layer_refuses_impossible_splits_and_routings(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        moe_kernel.moe_layer("h100-sxm", "bf16", **{**QWEN3_235B, **kwargs})


@pytest.mark.parametrize(("gpu", "mode", "tp"), TABLES)
@settings(max_examples=30, deadline=None)
@given(size=st.floats(0.0, 4e9, allow_nan=False))
def test_the_scalar_path_is_the_array_path(gpu: str, mode: str, tp: int, size: float) -> None:
    table = kernels.allreduce_table(gpu, tp, mode)
    assert table.at(size) == pytest.approx(float(table(np.array([size]))[0]), rel=1e-12)
    assert float(kernels.allreduce_s(gpu, tp, size, mode)) == table.at(size)
