"""``specsim sweep``: a grid of scenarios run in parallel, resumably, into one tidy table."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from specsim.bench_options import BenchOptions, with_bench_options
from specsim.cli_options import ForceOpt, ScenarioArg, SetOpt, YesOpt
from specsim.multirun_commands import _inputs, load_document


def _preflight_sweep(
    points: list[Any], source: str, base_dir: Path, workers: int, yes: bool
) -> None:
    """The pre-run estimate of a sweep: its largest point, once per worker running at a time.

    Raise ScenarioError if that would not fit in memory and ``yes`` is false.
    """
    from sim.scale import preflight
    from sim.scenario import validate_document
    from specsim.console import err_console

    scenarios = [validate_document(point.document, source) for point in points]
    largest = max(scenarios, key=lambda s: s.workload.num_requests)
    preflight(largest, yes=yes, warn=err_console.print, base_dir=base_dir,
              copies=min(workers, len(points)), parallel=True)  # fmt: skip


def register(app: typer.Typer) -> None:
    """Add ``sweep`` to ``app``."""
    from specsim.console import err_console, user_errors

    @app.command()
    @user_errors
    @with_bench_options
    def sweep(
        out: Annotated[Path, typer.Option("--out", help="Output folder (rerun to resume).")],
        scenario: ScenarioArg = None,
        grid: Annotated[
            list[str] | None,
            typer.Option("--grid", help="KEY.PATH=V1,V2,... (repeat for a cartesian grid)."),
        ] = None,
        workers: Annotated[
            int | None, typer.Option("--workers", min=1, help="Local processes (default: cores).")
        ] = None,
        scheduler: Annotated[
            str | None, typer.Option("--scheduler", help="Dask scheduler address to run on.")
        ] = None,
        set_: SetOpt = None,
        force: ForceOpt = False,
        yes: YesOpt = False,
        *,
        bench: BenchOptions,
    ) -> None:
        """Run a grid of scenarios in parallel, resumably, into one tidy table."""
        from reports.progress import interrupted_line, item_progress
        from reports.sweep import check_sweep_folder, finished_summary, run_sweep, write_manifest
        from reports.sweep_grid import expand_grid, parse_grid

        document, base_dir, source = load_document(scenario, set_ or [], bench)
        axes = parse_grid(grid or [])
        points = expand_grid(document, axes, source)
        check_sweep_folder(out, points, force=force, inputs=_inputs(scenario))
        _preflight_sweep(points, source, base_dir, workers or os.cpu_count() or 1, yes)
        out.mkdir(parents=True, exist_ok=True)
        write_manifest(out, source, axes, set_ or [], points)
        reused = sum(finished_summary(out, p.point_id) is not None for p in points)
        by_id = {p.point_id: p for p in points}

        def describe(point_id: str) -> str:
            values = ", ".join(f"{k}={v}" for k, v in by_id[point_id].values.items())
            return f"point {point_id} ({values})" if values else f"point {point_id}"

        with item_progress(len(points) - reused, "sweep", err_console) as progress:
            progress.start(f"{len(points) - reused} points on {workers or os.cpu_count()} workers")
            outcome = run_sweep(
                points,
                out,
                base_dir,
                workers=workers or os.cpu_count() or 1,
                scheduler=scheduler,
                on_point=lambda done: progress.done(
                    describe(done.point_id) + (" failed" if done.result is None else "")
                ),
            )
        err_console.print(
            f"{len(points)} points: {outcome.num_run} run, {outcome.num_reused} already finished, "
            f"{len(outcome.failed)} failed; table in {out / 'sweep.csv'}",
            highlight=False,
        )
        if outcome.interrupted:
            finished = outcome.num_run + outcome.num_reused - len(outcome.failed)
            err_console.print(
                interrupted_line(
                    f"{finished} finished points and the table kept in {out}",
                    "rerun the same command to run the rest",
                ),
                highlight=False,
            )
            raise typer.Exit(code=130)
        for point_id, error in outcome.failed.items():
            last = error.strip().splitlines()[-1]
            err_console.print(f"point {point_id} failed: {last}", highlight=False)
        if outcome.failed:
            raise typer.Exit(code=1)
