"""specsim sweep: grid parsing, point identity, resume, failures, interruption, Dask."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

import reports.sweep as sweep
from reports.sweep import run_sweep
from reports.sweep_grid import SweepPoint, expand_grid, parse_grid, split_values
from sim.errors import ScenarioError
from sim.scenario import apply_override, read_document
from sim.summary import Summary

GRID = ["--grid", "workload.arrival.rate_per_s=2,4", "--grid", "seed=0,1"]
SMALL = ["--set", "workload.num_requests=30"]


def test_split_values_keeps_lists_and_quoted_commas_whole() -> None:
    assert split_values("1, 2.5,abc") == ["1", "2.5", "abc"]
    assert split_values("[2, 2, 2],[4,4],{a: 1, b: 2},'x,y'") == [
        "[2, 2, 2]",
        "[4,4]",
        "{a: 1, b: 2}",
        "'x,y'",
    ]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["seed"], "expected KEY.PATH"),
        (["seed=1,,2"], "empty value"),
        (["seed=1", "seed=2"], "given twice"),
        ([], "at least one"),
    ],
)
def test_parse_grid_names_the_bad_flag(flags: list[str], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_grid(flags)


def _points(*flags: str) -> list[SweepPoint]:
    base, _, source = read_document(None)
    apply_override(base, "workload.num_requests=30")
    return expand_grid(base, parse_grid(list(flags)), source)


def test_the_grid_is_cartesian_and_identity_ignores_axis_order() -> None:
    points = _points("workload.arrival.rate_per_s=2,4,8", "seed=0,1")
    assert len(points) == 6
    assert len({p.point_id for p in points}) == 6
    assert points[0].values == {"workload.arrival.rate_per_s": 2, "seed": 0}
    swapped = _points("seed=0,1", "workload.arrival.rate_per_s=8,4,2")
    assert {p.point_id for p in swapped} == {p.point_id for p in points}


def test_every_point_is_validated_before_any_runs() -> None:
    with pytest.raises(ScenarioError, match=r"workload\.arrival\.rate_per_s"):
        _points("workload.arrival.rate_per_s=2,-1")
    with pytest.raises(ScenarioError, match=r"workload\.arival"):
        _points("workload.arival.rate_per_s=2")
    with pytest.raises(ScenarioError, match="same scenario"):
        _points("workload.arrival.rate_per_s=2,2.0")
    # A count is a whole number: 1.0 is refused rather than read as 1.
    with pytest.raises(ScenarioError, match=r"seed: .*whole number|seed: .*valid integer"):
        _points("seed=1,1.0")


def test_a_flat_summary_names_percentiles_as_the_slo_keys() -> None:
    golden = Path(__file__).resolve().parents[1] / "golden" / "spec-chat-eagle3.json"
    summary = json.loads(golden.read_text(encoding="utf-8"))
    row = Summary.from_dict(summary).flat()
    assert row["method"] == "eagle3" and row["num_steps"] == summary["num_steps"]
    assert row["ttft_mean_ms"] == summary["ttft_ms"]["mean"]
    assert row["ttft_p99_ms"] == summary["ttft_ms"]["p99"]
    assert (row["measurement_start_s"], row["measurement_end_s"]) == tuple(
        summary["measurement_window_s"]
    )
    assert "ttft_ms" not in row and "measurement_window_s" not in row


def test_sweep_writes_one_tidy_table_and_resumes_without_recomputing(
    cli: typer.Typer, runner: CliRunner, tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    args = ["sweep", *GRID, "--workers", "1", "--out", str(out), *SMALL]
    first = runner.invoke(cli, args)
    assert first.exit_code == 0, first.output
    table = pd.read_csv(out / "sweep.csv")
    assert len(table) == 4 and set(table["status"]) == {"ok"}
    for column in ("point", "workload.arrival.rate_per_s", "seed", "ttft_p99_ms", "tpot_p50_ms"):
        assert column in table.columns
    assert sorted(table["workload.arrival.rate_per_s"]) == [2, 2, 4, 4]
    if sweep.PARQUET_FILE and (out / sweep.PARQUET_FILE).exists():
        assert len(pd.read_parquet(out / sweep.PARQUET_FILE)) == 4
    for point_id in table["point"]:
        folder = out / "points" / point_id
        assert (folder / "summary.json").is_file() and (folder / "scenario.resolved.yaml").is_file()
    stamps = {p: (out / "points" / p / "summary.json").stat().st_mtime_ns for p in table["point"]}
    second = runner.invoke(cli, args)
    assert second.exit_code == 0, second.output
    assert "0 run, 4 already finished" in second.output
    assert stamps == {
        p: (out / "points" / p / "summary.json").stat().st_mtime_ns for p in table["point"]
    }
    pd.testing.assert_frame_equal(pd.read_csv(out / "sweep.csv"), table)


def test_a_bad_grid_key_fails_fast_with_exit_2(
    cli: typer.Typer, runner: CliRunner, tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    result = runner.invoke(cli, ["sweep", "--grid", "engine.max_num_seq=8,16", "--out", str(out)])
    assert result.exit_code == 2
    assert "engine.max_num_seq" in result.output
    assert not (out / "points").exists()


def test_a_failing_point_is_recorded_and_the_rest_kept(
    cli: typer.Typer, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = sweep.run_scenario

    def fail_at_rate_4(scenario: Any, base_dir: Path, *args: Any, **kwargs: Any) -> Any:
        if scenario.workload.arrival.rate_per_s == 4:
            raise ScenarioError("workload: rate 4 refused")
        return real(scenario, base_dir, *args, **kwargs)

    monkeypatch.setattr(sweep, "run_scenario", fail_at_rate_4)
    out = tmp_path / "sweep"
    args = ["sweep", *GRID, "--workers", "1", "--out", str(out), *SMALL]
    result = runner.invoke(cli, args)
    assert result.exit_code == 1
    table = pd.read_csv(out / "sweep.csv")
    failed = table[table["status"] == "failed"]
    assert len(failed) == 2 and set(failed["workload.arrival.rate_per_s"]) == {4}
    assert failed["error"].str.contains("rate 4 refused").all()
    for point_id in failed["point"]:
        assert "rate 4 refused" in (out / "points" / point_id / "error.txt").read_text()
        assert not (out / "points" / point_id / "summary.json").exists()
    assert "rate 4 refused" in result.output
    monkeypatch.setattr(sweep, "run_scenario", real)
    again = runner.invoke(cli, args)
    assert again.exit_code == 0, again.output
    assert "2 run, 2 already finished, 0 failed" in again.output
    for point_id in failed["point"]:
        assert not (out / "points" / point_id / "error.txt").exists()


def test_an_interrupted_sweep_keeps_every_finished_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    points = _points("workload.arrival.rate_per_s=2,4,8")
    real = sweep.run_scenario
    calls = {"n": 0}

    def interrupt_third(scenario: Any, base_dir: Path, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(scenario, base_dir, *args, **kwargs)

    monkeypatch.setattr(sweep, "run_scenario", interrupt_third)
    out = tmp_path / "sweep"
    stopped = run_sweep(points, out, tmp_path, workers=1)
    assert stopped.interrupted and stopped.num_run == 2
    table = pd.read_csv(out / "sweep.csv")
    assert list(table["status"]) == ["ok", "ok", "pending"]
    monkeypatch.setattr(sweep, "run_scenario", real)
    resumed = run_sweep(points, out, tmp_path, workers=1)
    assert (resumed.num_run, resumed.num_reused, resumed.interrupted) == (1, 2, False)


def test_local_processes_and_a_dask_cluster_give_the_same_points(tmp_path: Path) -> None:
    distributed = pytest.importorskip("dask.distributed")
    points = _points("workload.arrival.rate_per_s=2,4")
    local = run_sweep(points, tmp_path / "local", tmp_path, workers=2)
    assert not local.failed and local.num_run == 2
    with distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
        remote = run_sweep(
            points, tmp_path / "dask", tmp_path, workers=1, scheduler=cluster.scheduler_address
        )
    assert not remote.failed and remote.num_run == 2
    for point in points:
        a = json.loads((tmp_path / "local/points" / point.point_id / "summary.json").read_text())
        b = json.loads((tmp_path / "dask/points" / point.point_id / "summary.json").read_text())
        a.pop("wall_time_s"), b.pop("wall_time_s")
        assert a == b


def test_points_on_the_loaded_compiled_loop_give_the_python_path_s_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sweep loads the compiled loop once (each worker at start-up; here, before its points),
    # and its short points then run on it: the table is the one the Python path gives.
    from sim.engine import loop_kernel
    from sim.run import build_simulation, execute

    if loop_kernel.compiled() is None:
        pytest.skip("numba is not installed: only the Python path runs")
    compiled_steps: list[int] = []

    def on_path(loop: bool) -> Any:
        def run(scenario: Any, base_dir: Path, **build: Any) -> Any:
            simulation = build_simulation(scenario, base_dir, **build)
            simulation.core.compiled_loop = loop
            result = execute(simulation)
            compiled_steps.append(simulation.core.num_compiled_steps)
            return result

        return run

    points = _points("workload.arrival.rate_per_s=2,8")
    frames = {}
    for loop in (False, True):
        monkeypatch.setattr(sweep, "run_scenario", on_path(loop))
        frames[loop] = run_sweep(points, tmp_path / str(loop), tmp_path, workers=1).frame
    assert compiled_steps[:2] == [0, 0] and min(compiled_steps[2:]) > 0
    timing = [c for c in frames[False].columns if "wall_time" in c]
    pd.testing.assert_frame_equal(
        frames[True].drop(columns=timing), frames[False].drop(columns=timing)
    )


def test_the_warm_up_loads_what_forked_workers_inherit_and_never_raises(tmp_path: Path) -> None:
    # Before a local pool forks, the parent runs the first point cut short on the compiled loop:
    # the point's evaluator is then built in the parent, for the workers to inherit. A point
    # that cannot run is left to its worker, which records why.
    from dataclasses import replace

    from sim.engine import cost_sharing, loop_kernel

    if loop_kernel.compiled() is None:
        pytest.skip("numba is not installed: only the Python path runs")
    point = _points("workload.arrival.rate_per_s=2")[0]
    cost_sharing.BUILT.clear()
    sweep.warm_up(point, str(tmp_path))
    assert len(cost_sharing.BUILT) == 1
    broken = replace(point, document={**point.document, "model": "no-such-model"})
    sweep.warm_up(broken, str(tmp_path))  # no exception
    assert len(cost_sharing.BUILT) == 1
