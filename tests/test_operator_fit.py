"""The linear-layer efficiency fit: the shipped table, its mechanics and its agreement claims."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from calibration import operator_fit as of
from sim.catalogue import get_gpu, get_model, gpu_names
from sim.cost_model import Efficiency, StepCostModel
from sim.errors import CalibrationError

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO / ".." / "shared"
needs_shared = pytest.mark.skipif(
    not (SHARED / "data" / "gpu-profiles").is_dir(), reason="shared profiles not beside checkout"
)
H100 = get_gpu("h100-sxm")


def shipped() -> dict[str, dict]:
    text = resources.files("sim").joinpath("data/hardware_efficiency.yaml").read_text("utf-8")
    return yaml.safe_load(text)


def synthetic(eff: Efficiency, model: str = "llama-3.1-8b", tp: int = 1) -> of.ForwardProfile:
    """A profile whose 'measurements' are the cost model itself at ``eff``."""
    n = np.arange(1.0, 2049.0)
    profile = of.ForwardProfile("synthetic", get_model(model), tp, n, np.ones_like(n), True)
    return of.ForwardProfile(
        "synthetic", profile.model, tp, n, of.predict_s(profile, eff, H100), True
    )


# --- the shipped table (no shared data needed) ---------------------------------------------------
def test_every_catalogue_gpu_has_an_efficiency_in_range() -> None:
    table = shipped()
    assert set(gpu_names()) <= set(table)
    for name in gpu_names():
        entry = table[name]
        Efficiency(entry["bandwidth"], entry["flops"])  # raises outside (0, 1]
        for key in ("bandwidth", "flops"):
            lo, hi = entry["ci95"][key]
            assert 0.0 < lo <= entry[key] <= hi <= 1.0, (name, key)
        assert entry["source"] and isinstance(entry["method"], str)


def test_writer_round_trips_and_covers_the_catalogue() -> None:
    fit = of.OperatorFit(
        Efficiency(0.7, 0.6), (0.65, 0.75), (0.55, 0.65), synthetic(Efficiency(1, 1))
    )
    table = yaml.safe_load(of.efficiency_yaml(fit))
    assert table == of.efficiency_entries(fit)
    assert set(table) == set(gpu_names())
    assert table["h100-sxm"]["bandwidth"] == 0.7 and table["h200"]["flops"] == 0.6
    # A100 flops carry the H100 shortfall below its MAMF: 0.6 · (271.2/312)/(794.5/989).
    assert table["a100-80gb"]["flops"] == pytest.approx(
        0.6 * (271.2 / 312) / (794.5 / 989), abs=5e-4
    )


# --- the fit's mechanics -----------------------------------------------------------------------
@settings(max_examples=8, deadline=None)
@given(st.floats(0.3, 1.0), st.floats(0.3, 1.0))
def test_fit_recovers_the_efficiencies_that_generated_the_data(bw: float, fl: float) -> None:
    fit = of.fit_efficiency(synthetic(Efficiency(bw, fl)), H100, np.random.default_rng(0), 3)
    assert fit.efficiency.bandwidth == pytest.approx(bw, rel=1e-4)
    assert fit.efficiency.flops == pytest.approx(fl, rel=1e-4)
    assert fit.bandwidth_ci95[0] <= fit.efficiency.bandwidth + 1e-6


@pytest.mark.parametrize("model", ["llama-3.1-8b", "llama-2-70b"])
def test_body_roofline_plus_lm_head_is_linear_s(model: str) -> None:
    # Equal arithmetic intensity: the max of sums equals the sum of per-group maxima, so a
    # body-only profile can be priced on its own (norm weights in linear_s: < 1e-4 relative).
    eff, n = Efficiency(0.7, 0.6), np.array([1.0, 64.0, 300.0, 2048.0])
    m = get_model(model)
    body = of.ForwardProfile("body", m, 2, n, np.ones_like(n), includes_lm_head=False)
    lm_head_params = m.spec.vocab_size * m.spec.hidden_size
    lm_head = np.maximum(
        2.0 * lm_head_params / (2 * 0.7 * H100.hbm_bandwidth_bytes_per_s),
        2.0 * lm_head_params * n / (2 * 0.6 * H100.bf16_dense_flops),
    )
    whole = StepCostModel(m, H100, 2, eff, 0.0).linear_s(n, n)
    np.testing.assert_allclose(of.predict_s(body, eff, H100) + lm_head, whole, rtol=1e-4)


def test_fused_sum_follows_the_stated_formula(tmp_path: Path) -> None:
    ops = {
        "q_proj": 10,
        "k_proj": 3,
        "v_proj": 3,
        "o_proj": 7,
        "gate_proj": 20,
        "up_proj": 21,
        "down_proj": 22,
        "lm_head": 100,
        "attn": 999,
    }
    folder = tmp_path / of.LLMSERVINGSIM_DIR / "Llama-3.1-8B" / "tp1"
    folder.mkdir(parents=True)
    lines = ["layer_name,input,kv_cache,tp_size,latency(ns)"]
    lines += [f"{op},{n},0,1,{ns * n}" for n in (1, 2) for op, ns in ops.items()]
    (folder / "layers.csv").write_text("\n".join(lines) + "\n")
    fused = of.load_llmservingsim(tmp_path, "Llama-3.1-8B", 1)
    unfused = of.load_llmservingsim(tmp_path, "Llama-3.1-8B", 1, fused=False)
    # 8B: 32 query heads, 8 KV heads -> fused QKV = 1.5 · q_proj.
    per_layer = 1.5 * 10 + 7 + 20 + 21 + 22
    np.testing.assert_allclose(
        fused.measured_s, [(32 * per_layer + 100) * k * 1e-9 for k in (1, 2)]
    )
    np.testing.assert_allclose(unfused.measured_s, [(32 * 86 + 100) * k * 1e-9 for k in (1, 2)])


def test_missing_profile_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(CalibrationError, match=r"layers\.csv"):
        of.load_llmservingsim(tmp_path, "Llama-3.1-8B", 1)


# --- against the measured profiles -------------------------------------------------------------
@needs_shared
def test_fit_reproduces_the_shipped_h100_values() -> None:
    fit = of.run_fit(SHARED)
    entry = shipped()["h100-sxm"]
    half_step = 0.5 * 10.0**-of.ROUND_DECIMALS + 1e-9
    assert abs(fit.efficiency.bandwidth - entry["bandwidth"]) <= half_step
    assert abs(fit.efficiency.flops - entry["flops"]) <= half_step
    for key, ci in (("bandwidth", fit.bandwidth_ci95), ("flops", fit.flops_ci95)):
        np.testing.assert_allclose(ci, entry["ci95"][key], atol=half_step)


ROW = re.compile(
    r"^\| (\S.*?) \| (\d+)-(\d+) \| (\d+) \| ([+-]?\d+\.\d) % \| (\d+\.\d) % \| "
    r"(\d+\.\d) % \|$"
)


@needs_shared
def test_agreement_tables_in_the_docs_are_current() -> None:
    claimed = {
        (m[1], int(m[2])): (int(m[4]), float(m[5]), float(m[6]), float(m[7]))
        for m in map(ROW.match, (REPO / "docs" / "cost-model.md").read_text().splitlines())
        if m
    }
    entry = shipped()["h100-sxm"]
    eff = Efficiency(entry["bandwidth"], entry["flops"])
    rows = [
        r
        for p in (of.fit_profile(SHARED), *of.check_profiles(SHARED))
        for r in of.range_errors(p, eff, H100)
    ]
    assert {(r.label, r.first_tokens) for r in rows} == set(claimed)
    for r in rows:
        points, mean, mean_abs, max_abs = claimed[(r.label, r.first_tokens)]
        assert r.num_points == points
        # The doc prints one decimal of a percentage.
        assert 100 * np.array([r.mean, r.mean_abs, r.max_abs]) == pytest.approx(
            [mean, mean_abs, max_abs], abs=0.051
        ), r.label
