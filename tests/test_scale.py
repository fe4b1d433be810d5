"""Scale: the pre-run estimate bounds the steps a run takes, large runs are refused or warned
about before they start, step records stream to disk in chunks, and progress shows off a
terminal."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import sim.results as results
import sim.scale as scale
from sim.errors import ScenarioError
from sim.run import run_scenario
from sim.scale import estimate_run, preflight
from sim.scenario import load_scenario
from specsim.cli import app
from specsim.progress_lines import MIN_INTERVAL_S, progress_lines


@pytest.mark.parametrize(
    "overrides",
    [
        [],  # Poisson at 4 req/s: the time bound is the smaller
        ["workload.arrival.rate_per_s=40"],
        ["workload.arrival={process: closed_loop, concurrency: 16}"],  # work bound only
        ["speculation.method=eagle3", "workload.arrival.rate_per_s=20"],
        ["workload.output_tokens={distribution: uniform, low: 1, high: 64}"],
    ],
)
def test_the_estimate_bounds_the_steps_a_run_takes(overrides: list[str]) -> None:
    scenario, base_dir = load_scenario(None, ["workload.num_requests=300", *overrides])
    estimate = estimate_run(scenario, base_dir)
    steps = len(run_scenario(scenario, base_dir).steps["start_at_s"])
    assert estimate.num_steps is not None
    # An upper bound by construction (see sim/scale.py); loose by less than 20x on these.
    assert steps <= estimate.num_steps < 20 * steps


def test_a_run_that_would_not_fit_is_refused_without_yes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scale, "_available_bytes", lambda: 1e8)  # 100 MB free
    scenario, base_dir = load_scenario(None, ["workload.num_requests=200000"])
    with pytest.raises(ScenarioError, match=r"GB of records .*--yes"):
        preflight(scenario, yes=False, warn=print, base_dir=base_dir)
    warnings: list[str] = []
    preflight(scenario, yes=True, warn=warnings.append, base_dir=base_dir)
    assert warnings == [] or "warning" in warnings[0]


def test_ten_million_requests_are_refused_before_the_run() -> None:
    started = time.perf_counter()
    result = CliRunner().invoke(app, ["run", "--set", "workload.num_requests=10000000"])
    assert result.exit_code == 2, result.output
    assert "--yes" in result.output and "GB of records" in result.output
    assert time.perf_counter() - started < 20


def test_a_large_run_is_announced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scale, "_available_bytes", lambda: 1e12)
    scenario, base_dir = load_scenario(None, ["workload.num_requests=1000000"])
    warnings: list[str] = []
    estimate = preflight(scenario, yes=False, warn=warnings.append, base_dir=base_dir)
    assert estimate.record_bytes > scale.WARN_BYTES
    assert len(warnings) == 1 and "1,000,000 requests" in warnings[0]


@pytest.mark.parametrize("name", ["steps.parquet", "steps.csv"])
def test_streamed_steps_equal_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setattr(results, "steps_file_name", lambda: name)
    rng = np.random.default_rng(0)
    columns = {
        "start_at_s": np.cumsum(rng.random(1001)),
        "num_seqs": np.arange(1001, dtype=np.int32),
    }
    path = results.stream_steps(tmp_path, columns, rows=100)  # 11 chunks, the last of one row
    frame = pd.read_parquet(path) if name.endswith(".parquet") else pd.read_csv(path)
    assert list(frame.columns) == ["step", "start_at_s", "num_seqs"]
    assert frame["step"].tolist() == list(range(1001))
    assert np.allclose(frame["start_at_s"], columns["start_at_s"], rtol=0, atol=1e-12)
    assert frame["num_seqs"].tolist() == columns["num_seqs"].tolist()
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no temporary file left


def test_an_interrupted_stream_leaves_no_file(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), results.StepStreamWriter(tmp_path / "steps.csv") as writer:
        writer.write({"a": np.arange(3)})
        raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []


def test_progress_lines_at_each_tenth_and_when_slow() -> None:
    now = [0.0]
    lines: list[str] = []
    advance = progress_lines(100, "simulating", lines.append, clock=lambda: now[0])
    for _ in range(100):
        now[0] += 0.1
        advance(1)
    assert len(lines) == 10
    assert lines[0].startswith("simulating: 10/100 (10%)") and "left" in lines[0]
    assert lines[-1] == "simulating: 100/100 (100%), 0:10 elapsed"
    slow: list[str] = []
    advance = progress_lines(1000, "simulating", slow.append, clock=lambda: now[0])
    for _ in range(3):
        now[0] += MIN_INTERVAL_S + 1
        advance(1)
    assert len(slow) == 3  # one a half-minute although no tenth was reached


def test_a_comparison_counts_every_methods_records(monkeypatch: pytest.MonkeyPatch) -> None:
    # 150,000 requests is ~0.9 GB of records per method: one fits in 2 GB free, three do not.
    monkeypatch.setattr(scale, "_available_bytes", lambda: 2e9)
    scenario, base_dir = load_scenario(None, ["workload.num_requests=150000"])
    preflight(scenario, yes=False, warn=lambda _: None, base_dir=base_dir)
    result = CliRunner().invoke(
        app, ["compare", "--set", "workload.num_requests=150000", "--methods", "none,eagle3,ngram"]
    )
    assert result.exit_code == 2, result.output
    assert "3 runs held at once" in result.output and "--yes" in result.output


def test_a_sweep_counts_a_point_per_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scale, "_available_bytes", lambda: 2e9)
    command = ["sweep", "--set", "workload.num_requests=150000", "--grid", "seed=1,2,3",
               "--workers", "3", "--out", str(tmp_path / "sw")]  # fmt: skip
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 2, result.output
    assert "3 runs held at once" in result.output
    assert not (tmp_path / "sw").exists()  # refused before the folder is made
