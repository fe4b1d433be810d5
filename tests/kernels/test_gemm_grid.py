"""The measured GEMM grid prices dense linear layers: it reproduces its own measurements, follows
the physics at its edges, and is used exactly where the GPU has one."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.catalogue import get_gpu, get_model
from sim.cost_model import StepCostModel, StepShape
from sim.efficiency import load_efficiency
from sim.gemm_grid import (
    LinearCurve,
    decoder_shapes,
    dense_linear_curves,
    gemm_grid,
    grid_source,
)
from sim.host_costs import load_host_profile
from tests.kernels.shared_data import REPO_ROOT, SHARED, needs_shared

H100 = "h100-sxm"


def test_grid_points_come_back_exactly_and_every_dtype_is_sourced() -> None:
    meta = grid_source(H100)
    assert meta is not None and "gemm_perf" in meta["source"] and meta["commit"]
    for dtype in ("bf16", "fp8"):
        grid = gemm_grid(H100, dtype)
        assert grid is not None
        for b, c in ((3, 5), (10, 12), (len(grid.n) - 1, len(grid.k) - 1)):
            curve = grid.curve_s(grid.n[b], grid.k[c])
            np.testing.assert_allclose(np.log(curve), grid.log_t[:, b, c], rtol=0, atol=1e-12)


def test_a_gpu_without_gemm_measurements_has_no_grid() -> None:
    # No GEMM was collected on the A100 nor in int4: those linear layers stay on the roofline.
    assert gemm_grid("a100-80gb", "bf16") is None
    assert gemm_grid(H100, "int4") is None


def test_the_h200_grid_gains_on_the_h100_only_where_weights_stream() -> None:
    # Same GH100 die, 4.8 against 3.35 TB/s: a one-token GEMM over a large weight matrix is bound
    # by HBM and takes about 3.35/4.8 = 0.70 of the H100's time on the H200; a small one is bound
    # by its launch and tail, the same on both (the H200's measured rows, not a rule).
    h100, h200 = gemm_grid(H100, "fp8"), gemm_grid("h200", "fp8")
    assert h100 is not None and h200 is not None
    assert np.array_equal(h100.n, h200.n) and np.array_equal(h100.k, h200.k)
    ratio = np.exp(h200.log_t[0] - h100.log_t[0])  # m = 1, every (n, k)
    weights = np.outer(h100.n, h100.k)
    assert 0.65 < float(np.median(ratio[weights >= 64e6])) < 0.85
    assert 0.9 < float(np.median(ratio[weights <= 1e6])) < 1.1


def test_the_h200_is_never_slower_than_the_h100_on_the_70b_fp8_shards() -> None:
    # The shards Llama-3.1-70B FP8 decodes with at TP 4 and 8 (QKV, O, gate-up, down), up to 512
    # rows: the same GH100 die with 1.43x the bandwidth can take no more time than the H100, nor
    # less than about 3.35/4.8 = 0.70 of it. Tables that broke this (as the H200's attention
    # rows, set aside) would not be measurements of the GPU (docs/kernels.md, "The H200's tables
    # against the H100's").
    h100, h200 = gemm_grid(H100, "fp8"), gemm_grid("h200", "fp8")
    assert h100 is not None and h200 is not None
    model = get_model("llama-3.1-70b")
    rows = h100.m <= 512
    for tp in (4, 8):
        for n, k in decoder_shapes(model, tp):
            ratio = (h200.curve_s(n, k) / h100.curve_s(n, k))[rows]
            assert ratio.max() < 1.02, (tp, n, k, ratio.max())
            assert ratio.min() > 0.65, (tp, n, k, ratio.min())


@given(st.floats(1.0, 60000.0), st.floats(1.0, 60000.0))
def test_more_rows_never_take_less_time(m1: float, m2: float) -> None:
    grid = gemm_grid(H100, "bf16")
    assert grid is not None
    curve = LinearCurve(grid.m, grid.curve_s(8192, 8192))
    low, high = sorted((m1, m2))
    assert curve(np.array([low]))[0] <= curve(np.array([high]))[0] * (1 + 1e-12)


def test_compute_bound_edge_grows_linearly_and_no_rows_cost_nothing() -> None:
    """Past the measured rows a GEMM is compute-bound: twice the rows, twice the time (the
    log-log slope of the last measured segment, within 10 %)."""
    grid = gemm_grid(H100, "bf16")
    assert grid is not None
    curve = LinearCurve(grid.m, grid.curve_s(8192, 8192))
    top = grid.m[-1]
    ratio = curve(np.array([4 * top]))[0] / curve(np.array([2 * top]))[0]
    assert ratio == pytest.approx(2.0, rel=0.1)
    assert curve(np.array([0.0]))[0] == 0.0


def test_decoder_shards_follow_megatron_sharding() -> None:
    model = get_model("llama-3.1-70b")
    s = model.spec
    qkv, o, gate_up, down = decoder_shapes(model, 4)
    assert qkv == ((s.num_heads + 2 * s.num_kv_heads) * s.head_dim // 4, s.hidden_size)
    assert o == (s.hidden_size, s.num_heads * s.head_dim // 4)
    assert gate_up == (2 * s.intermediate_size // 4, s.hidden_size)
    assert down == (s.hidden_size, s.intermediate_size // 4)
    body, head = gemm_grid(H100, "bf16"), gemm_grid(H100, "bf16")
    assert body is not None and head is not None
    with pytest.raises(ValueError, match="mixture of experts"):
        dense_linear_curves(get_model("mixtral-8x7b"), 2, body, head)


def _cost_model(gpu: str, model: str, tp: int) -> StepCostModel:
    host = replace(load_host_profile("vllm-v1").costs, per_layer_overhead_s=0.0)
    return StepCostModel(
        get_model(model), get_gpu(gpu), tp, load_efficiency(gpu), 0.0, 0.0, host=host
    )


def test_the_step_cost_uses_the_grid_where_measured_and_the_roofline_elsewhere() -> None:
    on_h100 = _cost_model(H100, "llama-2-70b", 4)
    body, head = gemm_grid(H100, "bf16"), gemm_grid(H100, "bf16")
    assert body is not None and head is not None
    decoder, lm_head = dense_linear_curves(get_model("llama-2-70b"), 4, body, head)
    tokens = np.array([1.0, 64.0, 300.0, 2048.0])
    logits = np.array([1.0, 64.0, 1.0, 1.0])
    expected = decoder(tokens) + lm_head(logits)
    assert on_h100._kernels is not None
    np.testing.assert_allclose(on_h100._kernels.linear_s(tokens, logits), expected, rtol=1e-12)
    on_a100 = _cost_model("a100-80gb", "llama-2-70b", 4)
    assert on_a100._kernels is None or not on_a100._kernels.prices_linear
    on_h200 = _cost_model("h200", "llama-2-70b", 4)
    assert on_h200._kernels is not None and on_h200._kernels.prices_linear


@needs_shared
def test_the_grid_is_what_the_tool_writes_from_the_microbenchmarks() -> None:
    from tools.kernel_gemm_grid import build
    from tools.kernel_sources import read_table

    found = read_table(SHARED, H100, "gemm")
    assert found is not None
    arrays = build(found[0])
    shipped = np.load(REPO_ROOT / "sim" / "data" / "gemm_grid_h100-sxm.npz")
    for key in ("m", "n", "k", "bf16", "fp8"):
        np.testing.assert_allclose(shipped[key], arrays[key], rtol=1e-12)


def test_a_calibrated_efficiency_prices_the_linear_layers_instead_of_the_grid() -> None:
    """A profile's fitted efficiency describes the user's own hardware; the shipped grid gives
    way to it (``measured_linear=False``), and the roofline with that efficiency is used."""
    host = replace(load_host_profile("vllm-v1").costs, per_layer_overhead_s=0.0)
    model, gpu = get_model("llama-3.1-8b"), get_gpu(H100)
    own = replace(load_efficiency(H100), bandwidth=0.5)
    cost = StepCostModel(model, gpu, 1, own, 0.0, 0.0, host=host, measured_linear=False)
    assert cost._kernels is not None and not cost._kernels.prices_linear
    tokens = np.array([1.0])
    assert cost.breakdown(StepShape(tokens, tokens, tokens, tokens, tokens))[
        "linear_s"
    ] == pytest.approx(cost.linear_s(tokens, tokens) + cost.elementwise_s(tokens))


_latencies = st.lists(st.floats(1e-6, 1e-2), min_size=1, max_size=12)


@given(_latencies)
def test_the_monotone_fit_is_the_least_squares_order_in_log_time(readings: list[float]) -> None:
    """Pool-adjacent-violators on log latency (Barlow et al. 1972): the result never falls with m,
    lies between the running minimum from the top and the running maximum from the bottom (it
    moves a slow reading down and a fast one up, never past the readings it pools), keeps the
    geometric mean of the readings (a least-squares fit keeps the sum of what it fits), and
    leaves readings that already rise untouched."""
    from tools.kernel_gemm_grid import monotone_in_m

    cube = np.array(readings).reshape(-1, 1, 1)
    fitted = monotone_in_m(cube)[:, 0, 0]
    x = cube[:, 0, 0]
    assert np.all(np.diff(fitted) >= -1e-15 * fitted[1:])
    upper = np.maximum.accumulate(x)
    lower = np.minimum.accumulate(x[::-1])[::-1]
    assert np.all(fitted <= upper * (1 + 1e-9)) and np.all(fitted >= lower * (1 - 1e-9))
    assert np.sum(np.log(fitted)) == pytest.approx(np.sum(np.log(x)), rel=1e-9, abs=1e-9)
    rising = np.sort(x)
    np.testing.assert_allclose(monotone_in_m(rising.reshape(-1, 1, 1))[:, 0, 0], rising)


def test_a_slow_reading_between_faster_ones_meets_them_in_the_middle() -> None:
    # 10, 12, 9, 9 us: the running maximum would give 10, 12, 12, 12; the order-restricted fit
    # pools the last three to their geometric mean (12 * 9 * 9) ** (1/3) = 9.905 us, which lies
    # below the first reading, so all four pool: (10 * 12 * 9 * 9) ** (1/4) = 9.928 us.
    from tools.kernel_gemm_grid import monotone_in_m

    fitted = monotone_in_m(np.array([10.0, 12.0, 9.0, 9.0]).reshape(-1, 1, 1))[:, 0, 0]
    np.testing.assert_allclose(fitted, np.full(4, (10 * 12 * 9 * 9) ** 0.25), rtol=1e-12)
