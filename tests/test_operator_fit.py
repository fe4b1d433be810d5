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

from calibration import hardware_efficiency as he
from calibration import operator_fit as of
from sim.catalogue import get_gpu, get_model, gpu_names
from sim.cost_model import Efficiency, StepCostModel, gemms_per_forward, smooth_max
from sim.efficiency import EFFICIENCY_FIELDS, load_efficiency
from sim.errors import CalibrationError, CatalogueError

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
    m = get_model(model)
    measured_s = StepCostModel(m, H100, tp, eff, 0.0).linear_s(n, n)
    return of.ForwardProfile("synthetic", m, tp, n, measured_s, True)


# --- the shipped table and its loader (no shared data needed) -----------------------------------
@pytest.mark.parametrize("name", [n for n in gpu_names() if not get_gpu(n).is_cpu])
def test_every_catalogue_gpu_loads_an_efficiency_in_range(name: str) -> None:
    # (CPU nodes have the sharp roofline and no GEMM floor: tests/test_cpu_node.py.)
    eff, entry = load_efficiency(name), shipped()[name]
    assert [getattr(eff, f) for f in EFFICIENCY_FIELDS] == [entry[f] for f in EFFICIENCY_FIELDS]
    assert 0.0 < eff.bandwidth <= 1.0 and 0.0 < eff.flops <= 1.0
    # A rounded corner, not the sharp max nor the plain sum (p = 1); a floor of microseconds.
    assert 1.0 < eff.roofline_p < 10.0 and 0.0 <= eff.gemm_floor_s < 20e-6
    for key in EFFICIENCY_FIELDS:
        lo, hi = entry["ci95"][key]
        assert lo <= entry[key] <= hi, (name, key)
    assert entry["source"] and isinstance(entry["method"], str)


def test_unknown_gpu_is_a_catalogue_error_naming_the_known_ones() -> None:
    with pytest.raises(CatalogueError, match=r"'tpu-v9'.*h100-sxm"):
        load_efficiency("tpu-v9")


FIT = of.OperatorFit(
    Efficiency(0.7, 0.6, 2.5, 3e-6),
    {
        "bandwidth": (0.65, 0.75),
        "flops": (0.55, 0.65),
        "roofline_p": (2, 3),
        "gemm_floor_s": (0, 6e-6),
    },
    of.ForwardProfile("none", get_model("llama-3.1-8b"), 1, np.ones(1), np.ones(1), True),
)


def test_writer_round_trips_and_covers_the_catalogue() -> None:
    table = yaml.safe_load(he.efficiency_yaml(FIT.efficiency, FIT.ci95, "test"))
    assert table == he.efficiency_entries(FIT.efficiency, FIT.ci95, "test")
    assert set(table) == set(gpu_names()) - set(he.SEPARATELY_FITTED)
    assert table["h100-sxm"]["bandwidth"] == 0.7 and table["h200"]["flops"] == 0.6
    # A100 flops carry the H100 shortfall below its MAMF: 0.6 · (271.2/312)/(794.5/989).
    assert table["a100-80gb"]["flops"] == pytest.approx(
        0.6 * (271.2 / 312) / (794.5 / 989), abs=5e-4
    )
    # The roofline's p and the per-GEMM floor carry over from the H100 fit to every GPU.
    for entry in table.values():
        assert (entry["roofline_p"], entry["gemm_floor_s"]) == (2.5, 3e-6)
        assert entry["ci95"]["gemm_floor_s"] == [0.0, 6e-6]


# --- the fit's mechanics -----------------------------------------------------------------------
@settings(max_examples=6, deadline=None)
@given(st.floats(0.3, 1.0), st.floats(0.3, 1.0), st.floats(1.5, 4.0), st.floats(0.0, 8.0))
def test_fit_recovers_the_four_fields_that_generated_the_data(
    bw: float, fl: float, p: float, floor_us: float
) -> None:
    truth = Efficiency(bw, fl, p, floor_us * 1e-6)
    fit = of.fit_efficiency(synthetic(truth), H100, np.random.default_rng(0), 2)
    assert fit.efficiency.bandwidth == pytest.approx(bw, rel=1e-3)
    assert fit.efficiency.flops == pytest.approx(fl, rel=1e-3)
    assert fit.efficiency.roofline_p == pytest.approx(p, rel=1e-3)
    assert fit.efficiency.gemm_floor_s == pytest.approx(floor_us * 1e-6, abs=1e-9)
    for key, (lo, hi) in fit.ci95.items():
        assert lo <= hi, key


def test_sharp_fit_keeps_the_sharp_maximum_and_no_floor() -> None:
    profile = synthetic(Efficiency(0.7, 0.6))
    fit = of.fit_efficiency(profile, H100, np.random.default_rng(0), 0, sharp=True)
    assert fit.efficiency.roofline_p == float("inf") and fit.efficiency.gemm_floor_s == 0.0
    assert fit.efficiency.bandwidth == pytest.approx(0.7, rel=1e-4)
    assert fit.efficiency.flops == pytest.approx(0.6, rel=1e-4)


@pytest.mark.parametrize("model", ["llama-3.1-8b", "llama-2-70b"])
@pytest.mark.parametrize("eff", [Efficiency(0.7, 0.6), Efficiency(0.7, 0.6, 2.0, 3e-6)])
def test_body_plus_lm_head_is_linear_s(model: str, eff: Efficiency) -> None:
    # Both bounds are proportional to the parameters, so the p-norm is homogeneous of degree one:
    # body and lm_head priced apart sum to linear_s (norm weights in linear_s: < 1e-4 relative).
    n = np.array([1.0, 64.0, 300.0, 2048.0])
    m = get_model(model)
    body = of.ForwardProfile("body", m, 2, n, np.ones_like(n), includes_lm_head=False)
    lm_head_params = m.spec.vocab_size * m.spec.hidden_size
    lm_head = smooth_max(
        2.0 * lm_head_params / (2 * 0.7 * H100.hbm_bandwidth_bytes_per_s) + 0 * n,
        2.0 * lm_head_params * n / (2 * 0.6 * H100.bf16_dense_flops),
        eff.roofline_p,
    )
    whole = StepCostModel(m, H100, 2, eff, 0.0).linear_s(n, n)
    assert gemms_per_forward(m) == 4 * m.spec.num_layers + 1
    np.testing.assert_allclose(
        of.predict_s(body, eff, H100) + lm_head + eff.gemm_floor_s, whole, rtol=1e-4
    )


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
    for key in EFFICIENCY_FIELDS:
        half_step = 0.5 * 10.0 ** -he.ROUND_DECIMALS[key] * (1 + 1e-6)
        assert abs(getattr(fit.efficiency, key) - entry[key]) <= half_step, key
        np.testing.assert_allclose(fit.ci95[key], entry["ci95"][key], atol=half_step)


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
    eff = load_efficiency("h100-sxm")
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


RANGE_MEANS_ROW = re.compile(r"^\| (\S.*?) \|" + r" (\d+\.\d) % \|" * len(of.TOKEN_RANGES) + "$")


@needs_shared
def test_sharp_maximum_comparison_in_the_docs_is_current() -> None:
    claimed = {
        m[1]: [float(v) for v in m.groups()[1:]]
        for m in map(
            RANGE_MEANS_ROW.match, (REPO / "docs" / "cost-model.md").read_text().splitlines()
        )
        if m
    }
    profiles = [of.fit_profile(SHARED), *of.check_profiles(SHARED)]
    sharp = of.fit_efficiency(profiles[0], H100, np.random.default_rng(0), 0, sharp=True)
    assert set(claimed) == {p.label for p in profiles}
    for p in profiles:
        errors = [100 * r.mean_abs for r in of.range_errors(p, sharp.efficiency, H100)]
        assert errors == pytest.approx(claimed[p.label], abs=0.051), p.label


def test_shipped_table_in_the_docs_matches_the_yaml() -> None:
    lines = (REPO / "docs" / "cost-model.md").read_text().splitlines()
    for name, entry in shipped().items():
        (row,) = [line for line in lines if line.startswith(f"| {name} | ")]
        cells = [c.strip() for c in row.split("|")[2:6]]
        assert cells[0].startswith(f"{entry['bandwidth']:.3f}"), name
        assert cells[1].startswith(f"{entry['flops']:.3f}"), name
        assert cells[2].startswith(f"{entry['roofline_p']:.2f}"), name
        assert cells[3].startswith(f"{entry['gemm_floor_s'] * 1e6:.2f} µs"), name
