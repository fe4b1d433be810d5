"""The shipped host costs are current: the points they were fitted on still come out as fitted.

``calibration/host_cost_fit.py`` fits each preset's per-layer and per-sequence terms on serving
runs under load with its batch-1 point held; rerunning the whole fit takes minutes, so these tests
replay a few of its rows through the simulator instead. A change to the cost model that moves them
means the fit must be rerun (the module docstring says how).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from calibration.host_cost_fit import FIT_SETS, Row, row_scenario, silicon_rows
from sim.engine.presets import get_preset
from sim.host_costs import host_costs_document, load_host_profile
from sim.run import run_scenario
from sim.validate import bs1_scenario
from sim.validation.scenarios import build_scenario

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


@pytest.mark.parametrize("preset", ["vllm-v1", "sglang-0.4"])
def test_the_batch_1_points_stay_within_three_percent(preset: str) -> None:
    """vLLM issue #20780 (7.07 ms) and the EAGLE-3 paper's SGLang 0.4.4 baseline (158.34 tok/s),
    through the whole simulator with every host term."""
    measured_s = float(get_preset(preset).calibration["measured_tpot_s"])
    summary = run_scenario(bs1_scenario("none", preset=preset), Path.cwd()).summary
    assert summary.tpot_ms.mean / 1e3 == pytest.approx(measured_s, rel=0.03)


def test_every_preset_has_host_costs_with_their_provenance() -> None:
    presets = host_costs_document()["presets"]
    assert set(FIT_SETS) <= set(presets)
    for name, spec in FIT_SETS.items():
        entry = presets[name]
        load_host_profile(name)  # valid
        assert "fit" in entry, f"{name}: rerun calibration/host_cost_fit.py --write"
        assert set(entry["fit"]["carried"]) == set(spec.carried)
        for parameter, fitted in entry["fit"]["free"].items():
            low, high = fitted["ci95_s"]
            assert low <= entry[parameter] <= high


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs the shared under-load data")
@pytest.mark.parametrize("preset", ["vllm-v1", "sglang-0.5"])
def test_fit_rows_reproduce_within_the_fits_own_error(preset: str) -> None:
    rows = silicon_rows(SHARED, preset)
    assert rows
    # The smallest and largest batch at the lowest and highest TP degree.
    picked: list[Row] = []
    for tp in (min(r.tp for r in rows), max(r.tp for r in rows)):
        at_tp = [r for r in rows if r.tp == tp]
        picked += [min(at_tp, key=lambda r: r.concurrency), max(at_tp, key=lambda r: r.concurrency)]
    entry = host_costs_document()["presets"][preset]
    values = {k: entry[k] for k in ("per_layer_overhead_s", "per_sequence_overhead_s")}
    for row in picked:
        summary = run_scenario(row_scenario(row, preset, values), Path.cwd()).summary
        error = summary.tpot_ms.mean / row.tpot_ms - 1
        assert abs(error) < 0.15, f"{row}: {error:+.1%}"


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs the shared under-load data")
@pytest.mark.parametrize("preset", ["vllm-v1", "sglang-0.5"])
def test_the_fit_runs_each_row_as_the_validation_does(preset: str) -> None:
    """A fitted row's in-sample error is the one ``specsim validate`` prints only if the fit
    simulates the same run: the harness's warm-up first and left out, then its measured
    requests, at the row's concurrency and lengths; only the host values differ."""
    rows = silicon_rows(SHARED, preset)
    assert {r.point.fitted_by for r in rows} == {"host_cost_fit"}
    for row in rows:
        fit = row_scenario(row, preset, {"per_layer_overhead_s": 2e-5})
        validate = build_scenario(row.point)
        assert fit.workload == validate.workload
        assert fit.measurement == validate.measurement
        assert fit.measurement.warmup_requests == 2 * row.concurrency
        assert fit.workload.num_requests == 22 * row.concurrency
        assert fit.engine.per_layer_overhead_s == 2e-5
