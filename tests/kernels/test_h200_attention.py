"""The H200's attention: its collected rows are set aside with their reason, and the step prices
attention with the H100's fits (same GH100 die) at the H200's own bandwidth."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim import kernels
from sim.catalogue import get_gpu, get_model
from sim.efficiency import load_efficiency
from sim.errors import CatalogueError
from sim.kernel_costs import ATTENTION_FROM, KernelCosts


def _kernel_costs(gpu: str, tp: int = 8) -> KernelCosts:
    return KernelCosts(get_model("llama-3.1-70b"), get_gpu(gpu), tp, load_efficiency(gpu))


def test_the_set_aside_tables_are_read_as_not_collected(tmp_path: Path) -> None:
    # Nothing of them is fitted, whatever the data folder holds: the reader stops at the rule.
    # Every table of the GPU is written, readable and of the right device; only the set-aside
    # ones come back as not collected.
    from tools.kernel_sources import GPUS, LOCAL_ROOT, SET_ASIDE, TABLES, read_table

    assert {name for gpu, name in SET_ASIDE if gpu == "h200"} == {
        "decode_attention",
        "prefill_attention",
    }
    folder, _, device = GPUS["h200"]
    for rel in TABLES.values():
        path = tmp_path / LOCAL_ROOT / folder / f"{rel}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"device,latency\n{device},1.0\n", encoding="utf-8")
    for name in TABLES:
        read = read_table(tmp_path, "h200", name)
        assert (read is None) == (("h200", name) in SET_ASIDE), name


def test_the_h200_file_gives_the_reason_its_attention_is_not_fitted() -> None:
    with pytest.raises(CatalogueError, match="collected but set aside: at 8,191 cached tokens"):
        kernels.decode_attention("h200", "fp8")
    with pytest.raises(CatalogueError, match="collected but set aside: 5,801 of the 18,716"):
        kernels.prefill_attention("h200", "bf16")


def test_the_h200_prices_attention_with_the_h100_fits() -> None:
    assert ATTENTION_FROM == {"h200": "h100-sxm"}
    assert _kernel_costs("h200").prices_attention
    # A GPU with neither its own tables nor a same-die entry keeps the formula.
    assert not _kernel_costs("a100-80gb").prices_attention


@given(st.integers(1, 256), st.floats(1.0, 131072.0))
def test_short_contexts_cost_the_same_and_long_ones_follow_the_bandwidth(
    batch: int, context: float
) -> None:
    # floor + B·n_kv·c + KV bytes/(η·BW): the floor and per-sequence terms are the H100's (the
    # H200's own rows agree with the H100's to 0.995x up to 511 tokens), only the KV term scales
    # with 3.35/4.8. So the H200 is never slower, and never more than the bandwidth ratio faster.
    h100, h200 = _kernel_costs("h100-sxm"), _kernel_costs("h200")
    b, kv = np.array([float(batch)]), np.array([batch * context])
    args = (b, b, kv, kv, np.array([True]))
    t100, t200 = float(h100.attention_s(*args)[0]), float(h200.attention_s(*args)[0])
    ratio = (
        get_gpu("h100-sxm").hbm_bandwidth_bytes_per_s / get_gpu("h200").hbm_bandwidth_bytes_per_s
    )
    assert ratio * t100 <= t200 * (1 + 1e-12)
    assert t200 <= t100 * (1 + 1e-12)


def test_one_short_decode_layer_is_its_floor_on_both_gpus() -> None:
    # Batch 4 over 1,536 tokens at TP 8 (one KV head a rank): 10.3 µs a layer on the H100 fit,
    # of which 9.19 µs is its floor; the KV term is 1.03 µs on the H100, 0.72 on the H200. The
    # roofline alone (no floor) would give 0.7 µs: 80 layers x 9.3 µs is the millisecond a TP-8
    # decode step of Llama-3.1-70B lacked on the H200.
    h100 = kernels.decode_attention("h100-sxm", "bf16")
    h200 = replace(h100, hbm_bandwidth_bytes_per_s=get_gpu("h200").hbm_bandwidth_bytes_per_s)
    t100 = float(h100.layer_s(4.0, 4.0 * 1536, 1, 128))
    t200 = float(h200.layer_s(4.0, 4.0 * 1536, 1, 128))
    assert t200 / t100 == pytest.approx(0.97, abs=0.01)
