"""Fit by simulation from aggregate-only benchmark results: synthetic round trips with known
parameters, identifiability, bounds, intervals and the refusals of bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from typer.testing import CliRunner

from calibration.aggregate import aggregate_experiment
from calibration.calibrate import calibrate
from calibration.identifiability import parameter_intervals
from calibration.parameters import PARAMETERS, available_parameters
from calibration.profile_document import write_profile
from sim.artifacts import parse_runs
from sim.calibrated_profiles import load_engine_profile
from sim.errors import CalibrationError
from specsim.calibrate_command import register
from tests.calibration_fit.aggregate_files import (
    GPU,
    MODEL,
    bench_result,
    truth_document,
    write_result,
)

TRUTH = {"step_overhead_s": 0.003, "per_sequence_overhead_s": 6e-5}


def _sweep(tmp_path: Path, concurrencies: tuple[int, ...], num_requests: int = 24) -> list[Path]:
    paths = []
    for concurrency in concurrencies:
        document = truth_document(num_requests, concurrency, None, TRUTH)
        result = bench_result(document, concurrency)
        paths.append(write_result(tmp_path / f"c{concurrency}.json", result))
    return paths


def _engine(paths: list[Path], **options: object) -> dict:
    result = calibrate(paths, gpu=GPU, model=MODEL, tp=1, **options)  # type: ignore[arg-type]
    engine = result.document["engine"]
    assert engine is not None
    return engine


def test_a_concurrency_sweep_recovers_both_overheads_within_their_intervals(
    tmp_path: Path,
) -> None:
    paths = _sweep(tmp_path, (1, 16))
    engine = _engine(paths, parameters=["step_overhead_s", "per_sequence_overhead_s"])
    table = engine["parameters"]
    for name, truth in TRUTH.items():
        row = table[name]
        assert row["status"] == "fitted", row
        low, high = row["ci95"]
        assert low <= truth <= high, (name, row)
        assert low <= row["value"] <= high
    assert set(engine["fitted_on"]) == {str(p) for p in paths}


def test_one_concurrency_cannot_separate_per_sequence_from_per_step_cost(tmp_path: Path) -> None:
    # At concurrency 1 every step holds one sequence: s + b·1 is all the data can see.
    paths = _sweep(tmp_path, (1,), num_requests=6)
    result = calibrate(
        paths, gpu=GPU, model=MODEL, tp=1, parameters=["step_overhead_s", "per_sequence_overhead_s"]
    )
    table = result.document["engine"]["parameters"]
    assert table["step_overhead_s"]["status"] == "fitted"
    assert table["per_sequence_overhead_s"]["status"] == "fixed"
    assert "cannot separate" in table["per_sequence_overhead_s"]["reason"]
    assert any("per_sequence_overhead_s fixed" in w for w in result.document["warnings"])
    low, high = table["step_overhead_s"]["ci95"]
    assert low <= TRUTH["step_overhead_s"] + TRUTH["per_sequence_overhead_s"] <= high


@pytest.mark.parametrize("num_requests", [1, 3])
def test_every_interval_contains_its_estimate_even_for_one_request(
    tmp_path: Path, num_requests: int
) -> None:
    paths = _sweep(tmp_path, (1,), num_requests=num_requests)
    engine = _engine(paths)
    fitted = {k: v for k, v in engine["parameters"].items() if v["status"] == "fitted"}
    assert fitted
    for name, row in fitted.items():
        low, high = row["ci95"]
        assert low <= row["value"] <= high, (name, row)
        assert engine["ci95"][name] == row["ci95"]


def test_a_fit_that_ends_on_a_bound_says_so(tmp_path: Path) -> None:
    # A TPOT below what the GPU can do at zero overhead drives the step overhead to its floor.
    document = truth_document(4, 1, None, {"step_overhead_s": 0.0})
    result = bench_result(document, 1)
    for key in ("mean_tpot_ms", "median_tpot_ms", "mean_itl_ms", "median_itl_ms"):
        result[key] *= 0.6
    path = write_result(tmp_path / "fast.json", result)
    fitted = calibrate([path], gpu=GPU, model=MODEL, tp=1, parameters=["step_overhead_s"])
    warnings = fitted.document["warnings"]
    assert any("step_overhead_s ended on its lower bound" in w for w in warnings), warnings
    assert fitted.document["engine"]["parameters"]["step_overhead_s"]["value"] == pytest.approx(0.0)


def test_the_profile_records_the_efficiency_override_when_an_efficiency_is_fitted(
    tmp_path: Path,
) -> None:
    paths = _sweep(tmp_path, (1,), num_requests=4)
    engine = _engine(paths, parameters=["bandwidth"])
    row = engine["parameters"]["bandwidth"]
    assert row["status"] == "fitted"
    assert engine["efficiency"]["bandwidth"] == row["value"]
    assert set(engine["efficiency"]) == {"bandwidth", "flops", "roofline_p", "gemm_floor_s"}


def test_the_parameter_table_declares_every_row_and_offers_only_known_targets() -> None:
    names = [p.name for p in PARAMETERS]
    assert names[:2] == ["step_overhead_s", "per_sequence_overhead_s"]
    assert {"bandwidth", "flops", "per_token_overhead_s"} <= set(names)
    for parameter in PARAMETERS:
        assert parameter.lower < parameter.upper and parameter.scale > 0
    offered = {p.name for p in available_parameters()}
    assert {"step_overhead_s", "per_sequence_overhead_s", "bandwidth", "flops"} <= offered
    with pytest.raises(CalibrationError, match="unknown parameter"):
        available_parameters(["warp_speed"])


def test_an_aggregate_with_nothing_to_fit_against_is_refused_naming_the_file(
    tmp_path: Path,
) -> None:
    path = write_result(
        tmp_path / "empty.json",
        {"model_id": "m", "num_prompts": 5, "request_rate": 2.0, "completed": 5, "duration": 3.0},
    )
    with pytest.raises(CalibrationError, match="nothing to fit") as info:
        calibrate([path], gpu=GPU, model=MODEL, tp=1)
    assert str(path) in str(info.value)


def test_runs_of_different_models_are_never_pooled(tmp_path: Path) -> None:
    first, second = _sweep(tmp_path, (1, 2), num_requests=2)
    other = json.loads(second.read_text())
    other["model_id"] = "Qwen/Qwen3-8B"
    write_result(second, other)
    with pytest.raises(CalibrationError, match="model") as info:
        calibrate([first, second], gpu=GPU, model=MODEL, tp=1)
    assert str(second) in str(info.value) and str(first) in str(info.value)


def test_a_run_of_another_model_than_the_flag_is_refused(tmp_path: Path) -> None:
    (path,) = _sweep(tmp_path, (1,), num_requests=2)
    with pytest.raises(CalibrationError, match="--model"):
        calibrate([path], gpu=GPU, model="qwen3-8b", tp=1)


def test_a_report_without_rate_or_concurrency_is_rejected_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "stdout.txt"
    path.write_text(
        "============ Serving Benchmark Result ============\n"
        "Successful requests:                     16\n"
        "Benchmark duration (s):                  38.06\n"
        "Total input tokens:                      3200\n"
        "Total generated tokens:                  960\n"
        "Mean TTFT (ms):                          30.66\n"
        "Mean TPOT (ms):                          9.10\n"
        "==================================================\n",
        encoding="utf-8",
    )
    with pytest.raises(CalibrationError, match="neither the request rate nor the maximum") as info:
        calibrate([path], gpu=GPU, model=MODEL, tp=1)
    assert str(path) in str(info.value)


def test_a_model_that_does_not_fit_names_the_tp_flag(tmp_path: Path) -> None:
    (path,) = _sweep(tmp_path, (1,), num_requests=1)
    result = json.loads(path.read_text())
    result["model_id"] = "meta-llama/Llama-3.1-70B-Instruct"
    write_result(path, result)
    with pytest.raises(CalibrationError, match="raise --tp"):
        calibrate([path], gpu=GPU, model="llama-3.1-70b", tp=1)


def _cli() -> typer.Typer:
    app = typer.Typer()
    register(app)

    @app.callback()
    def main() -> None:
        """Group, so that calibrate is a subcommand."""

    return app


def test_the_command_records_its_full_command_line_and_prints_the_fit(tmp_path: Path) -> None:
    (path,) = _sweep(tmp_path, (2,), num_requests=3)
    out = tmp_path / "profile.yaml"
    args = ["calibrate", str(path), "--out", str(out), "--gpu", GPU, "--model", MODEL, "--tp", "1"]
    ok = CliRunner().invoke(_cli(), args)
    assert ok.exit_code == 0, ok.output
    assert "step_overhead_s" in ok.output and "mean_tpot_ms" in ok.output
    profile = yaml.safe_load(out.read_text())
    command = profile["provenance"]["command"]
    assert command == f"specsim calibrate {path} --out {out} --gpu={GPU} --model={MODEL} --tp=1"
    assert profile["warnings"]
    for warning in profile["warnings"]:
        assert f"warning: {warning}" in ok.output


def test_bad_aggregate_input_exits_2_with_one_message_naming_the_file(tmp_path: Path) -> None:
    path = write_result(tmp_path / "empty.json", {"model_id": "m", "completed": 0, "duration": 1})
    out = tmp_path / "profile.yaml"
    bad = CliRunner().invoke(_cli(), ["calibrate", str(path), "--out", str(out), "--gpu", GPU])
    assert bad.exit_code == 2, bad.output
    assert str(path) in " ".join(bad.output.split()) and "Traceback" not in bad.output
    assert not out.exists()


def test_a_fit_the_data_cannot_identify_is_refused_with_the_reason(tmp_path: Path) -> None:
    # Decode at batch 1 is memory-bound: TPOT alone says nothing about tensor throughput.
    result = bench_result(truth_document(3, 1, None, {}, prompt_tokens=8), 1)
    for key in [k for k in result if "ttft" in k]:
        del result[key]
    path = write_result(tmp_path / "decode-only.json", result)
    with pytest.raises(CalibrationError, match="identify none of flops") as info:
        calibrate([path], gpu=GPU, model=MODEL, tp=1, parameters=["flops"])
    assert str(path) in str(info.value)


def test_a_run_that_states_another_tp_than_the_flag_is_refused(tmp_path: Path) -> None:
    (path,) = _sweep(tmp_path, (1,), num_requests=2)
    result = json.loads(path.read_text())
    result["tp"] = "2"  # a --metadata tp=2 pair, saved verbatim as a string
    write_result(path, result)
    with pytest.raises(CalibrationError, match="--tp 1"):
        calibrate([path], gpu=GPU, model=MODEL, tp=1)


@pytest.mark.parametrize(
    ("rate", "concurrency", "simulated"),
    [(4.0, None, 1000), ("inf", 8, 400), ("inf", 200, 800), ("inf", None, 1000)],
)
def test_open_loops_are_simulated_whole_and_closed_loops_to_their_steady_state(
    tmp_path: Path, rate: object, concurrency: int | None, simulated: int
) -> None:
    result = {
        "model_id": "m", "num_prompts": 1000, "request_rate": rate, "burstiness": 1.0,
        "max_concurrency": concurrency, "duration": 100.0, "completed": 1000,
        "total_input_tokens": 100_000, "total_output_tokens": 50_000, "mean_tpot_ms": 9.0,
    }  # fmt: skip
    path = write_result(tmp_path / "big.json", result)
    (run,) = parse_runs(path)
    workload = aggregate_experiment(run, str(path), GPU, MODEL, 1).document["workload"]
    assert workload["num_requests"] == simulated
    if concurrency is not None:
        assert workload["arrival"]["concurrency"] == concurrency


@settings(max_examples=200, deadline=None)
@given(
    jac=arrays(np.float64, (4, 2), elements=st.floats(-1e6, 1e6) | st.just(0.0)),
    residuals=arrays(np.float64, 4, elements=st.floats(-1e3, 1e3)),
    fraction=st.tuples(st.floats(0, 1), st.floats(0, 1)),
)
def test_intervals_always_contain_the_estimate_and_stay_in_bounds(
    jac: np.ndarray, residuals: np.ndarray, fraction: tuple[float, float]
) -> None:
    free = [p for p in PARAMETERS if p.name in ("step_overhead_s", "bandwidth")]
    best = {p.name: p.lower + f * (p.upper - p.lower) for p, f in zip(free, fraction, strict=True)}
    ci95, warnings = parameter_intervals(
        free, best, residuals, jac, {p.name: p.scale for p in free}
    )
    for p in free:
        low, high = ci95[p.name]
        assert p.lower <= low <= best[p.name] <= high <= p.upper
    on_bound = [p for p, f in zip(free, fraction, strict=True) if f in (0.0, 1.0)]
    assert len(warnings) >= len(on_bound)


def test_a_profile_carries_every_fitted_overhead_for_the_engine(tmp_path: Path) -> None:
    paths = _sweep(tmp_path, (1,), num_requests=2)
    fitted = calibrate(paths, gpu=GPU, model=MODEL, tp=1, parameters=["step_overhead_s"])
    profile = tmp_path / "p.yaml"
    write_profile(fitted.document, profile)
    loaded = load_engine_profile(str(profile), tmp_path)
    assert loaded.overheads_s["step_overhead_s"] == loaded.step_overhead_s
    assert set(loaded.overheads_s) >= {"step_overhead_s", "per_sequence_overhead_s"}


def test_a_parameter_the_data_no_longer_see_gets_its_whole_range() -> None:
    free = [p for p in PARAMETERS if p.name == "flops"]
    ci95, _ = parameter_intervals(free, {"flops": 0.5}, np.zeros(3), np.zeros((3, 1)), {"flops": 1})
    assert ci95["flops"] == (free[0].lower, free[0].upper)
