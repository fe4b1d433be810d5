"""Parameter sweeps as data: a grid of overrides becomes a list of points, each run in its folder.

A point is identified by the hash of its resolved scenario (every default written out), so the
same point always lands in ``points/<hash>/`` whatever the order of the grid or of ``--set``.
A point is finished when its folder holds ``summary.json``; the file is written last and
atomically, which is what makes a sweep resumable and an interruption harmless.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reports.sweep_grid import HASH_CHARS, GridAxis, SweepPoint
from sim.engine.compiled_loop import load as load_compiled_loop
from sim.errors import OutputError, SpecsimError
from sim.output import atomic_write, check_output_folder, write_json, write_table, write_yaml
from sim.pool import pool_worker_init
from sim.results import save_result
from sim.run import ScenarioResult, build_simulation, execute, run_scenario
from sim.run_folder import SUMMARY_FILE, RunFolder
from sim.scenario import validate_document
from sim.summary import Summary
from sim.vllm_bench import vllm_bench_result

POINTS_DIR = "points"
ERROR_FILE = "error.txt"
MANIFEST_FILE = "sweep.json"
TABLE_FILE = "sweep.csv"
PARQUET_FILE = "sweep.parquet"


@dataclass
class PointOutcome:
    """What running a point gave: its summary and records, or the error that stopped it."""

    point_id: str
    result: ScenarioResult | None
    error: str | None
    #: The run in ``vllm bench serve``'s keys, computed before the step records are dropped.
    vllm_bench: dict[str, Any] | None = None


#: Requests of the warm-up run (:func:`warm_up`).
WARM_UP_REQUESTS = 20


def run_point(point_id: str, document: dict[str, Any], base_dir: str) -> PointOutcome:
    """Run one point in a worker; its error (a traceback if it is a bug) is returned, not raised.

    The per-step records are left out to keep what travels back from a worker small.
    """
    try:
        scenario = validate_document(document, f"point {point_id}")
        result = run_scenario(scenario, Path(base_dir), step_records="summary")
    except SpecsimError as exc:
        return PointOutcome(point_id, None, f"{type(exc).__name__}: {exc}")
    except Exception:
        # A bug, not bad input: keep the whole traceback beside the point, and go on with the
        # sweep; the command still exits non-zero and names the point.
        return PointOutcome(point_id, None, traceback.format_exc())
    bench = vllm_bench_result(result)
    result.steps = {}
    return PointOutcome(point_id, result, None, bench)


def point_dir(out_dir: Path, point_id: str) -> Path:
    """The folder of one point."""
    return out_dir / POINTS_DIR / point_id


def finished_summary(out_dir: Path, point_id: str) -> Summary | None:
    """The summary of a point finished by an earlier run, or None."""
    folder = RunFolder(point_dir(out_dir, point_id))
    return folder.load_summary() if folder.is_complete() else None


def save_outcome(out_dir: Path, point: SweepPoint, outcome: PointOutcome) -> None:
    """Write a finished point (summary last) or a failed one (``error.txt``), atomically."""
    folder = point_dir(out_dir, point.point_id)
    folder.mkdir(parents=True, exist_ok=True)
    if outcome.result is None:
        write_yaml(RunFolder(folder).scenario, point.resolved)
        error = f"{outcome.error}\n"
        atomic_write(folder / ERROR_FILE, lambda f: f.write(error))
        return
    (folder / ERROR_FILE).unlink(missing_ok=True)
    save_result(outcome.result, folder, write_steps=False, vllm_bench=outcome.vllm_bench)


def sweep_identity(points: list[SweepPoint]) -> str:
    """SHA-256 over the sorted point identities: the same grid of resolved scenarios, however
    written, has the same identity."""
    joined = ",".join(sorted(point.point_id for point in points))
    return hashlib.sha256(joined.encode("ascii")).hexdigest()[:HASH_CHARS]


def check_sweep_folder(
    out_dir: Path, points: list[SweepPoint], *, force: bool, inputs: tuple[Path, ...] = ()
) -> None:
    """Before a sweep: ``out_dir`` may be new, or hold this very sweep (a rerun resumes it).

    Raise OutputError if it is a file, or holds another sweep (a different identity in
    ``sweep.json``, or point folders this grid does not have) or other results, unless ``force``.
    """
    check_output_folder(out_dir, force=True, writes=(MANIFEST_FILE,), inputs=inputs)
    if force or not out_dir.is_dir():
        return
    mine = {point.point_id for point in points}
    manifest = out_dir / MANIFEST_FILE
    recorded = None
    if manifest.is_file():
        try:
            recorded = json.loads(manifest.read_text(encoding="utf-8")).get("sweep_id")
        except (ValueError, AttributeError, UnicodeDecodeError):
            recorded = "unreadable"
    points_dir = out_dir / POINTS_DIR
    foreign = (
        sorted(p.name for p in points_dir.iterdir() if p.name not in mine)
        if (points_dir.is_dir())
        else []
    )
    others = [
        name for name in (SUMMARY_FILE, "plan.json", "comparison.csv") if (out_dir / name).exists()
    ]
    if recorded not in (None, sweep_identity(points)) or foreign or others:
        what = (
            f"{len(foreign)} point folders of another grid ({', '.join(foreign[:3])}...)"
            if foreign
            else (f"other results ({', '.join(others)})" if others else f"sweep {recorded}")
        )
        raise OutputError(
            f"--out {out_dir}: holds {what}, not this sweep ({sweep_identity(points)}); give "
            "another folder, or --force to add to it"
        )


def write_manifest(
    out_dir: Path,
    scenario: str,
    axes: list[GridAxis],
    sets: list[str],
    points: list[SweepPoint] | None = None,
) -> None:
    """Write ``sweep.json``: the command's scenario, grid and overrides, for reports and reruns,
    with the sweep's identity (:func:`sweep_identity`) when its points are given."""
    document: dict[str, Any] = {
        "scenario": scenario,
        "grid": {axis.key: list(axis.values) for axis in axes},
        "set": sets,
    }
    if points is not None:
        document["sweep_id"] = sweep_identity(points)
    write_json(out_dir / MANIFEST_FILE, document)


def table_row(point: SweepPoint, summary: Summary | None, error: str | None) -> dict[str, Any]:
    """One row of the sweep table: identity, grid values, status and flattened metrics."""
    row: dict[str, Any] = {"point": point.point_id}
    for key, value in point.values.items():
        row[key] = (
            value
            if isinstance(value, str | int | float | bool) or value is None
            else (json.dumps(value))
        )
    if summary is not None:
        row["status"], row["error"] = "ok", None
        for key, value in summary.flat().items():
            row.setdefault(key, value)
    else:
        row["status"] = "failed" if error is not None else "pending"
        row["error"] = None if error is None else error.strip().splitlines()[-1]
    return row


def parquet_ready(frame: Any) -> Any:
    """A copy whose object columns hold one type each (strings), as Parquet requires."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object:
            out[column] = [
                None if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)
                for v in out[column]
            ]
    return out


@dataclass
class SweepOutcome:
    """How a sweep ended: its table, what ran, was reused or failed, and whether interrupted."""

    frame: pd.DataFrame
    num_run: int = 0
    num_reused: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    interrupted: bool = False


def run_sweep(
    points: list[SweepPoint],
    out_dir: Path,
    base_dir: Path,
    *,
    workers: int,
    scheduler: str | None = None,
    on_point: Callable[[PointOutcome], None] | None = None,
) -> SweepOutcome:
    """Run every point not finished before, saving each as it completes, then write the table.

    Points run in ``workers`` local processes (in this process when 1), or on the Dask cluster
    at ``scheduler``. Ctrl-C stops the sweep with every finished point kept and the table
    written. Raise SpecsimError if the scheduler cannot be reached.
    """
    summaries: dict[str, Summary] = {}
    errors: dict[str, str] = {}
    outcome = SweepOutcome(pd.DataFrame())
    pending: list[SweepPoint] = []
    for point in points:
        summary = finished_summary(out_dir, point.point_id)
        if summary is None:
            pending.append(point)
        else:
            summaries[point.point_id] = summary
    outcome.num_reused = len(summaries)
    by_id = {point.point_id: point for point in points}
    try:
        for done in _outcomes(pending, str(base_dir), workers, scheduler):
            save_outcome(out_dir, by_id[done.point_id], done)
            if done.result is not None:
                summaries[done.point_id] = done.result.summary
            else:
                errors[done.point_id] = done.error or "unknown error"
            outcome.num_run += 1
            if on_point is not None:
                on_point(done)
    except KeyboardInterrupt:
        outcome.interrupted = True
    finally:
        outcome.frame = write_sweep_table(out_dir, points, summaries, errors)
    outcome.failed = errors
    return outcome


def write_sweep_table(
    out_dir: Path,
    points: list[SweepPoint],
    summaries: dict[str, Summary],
    errors: dict[str, str],
) -> pd.DataFrame:
    """Write ``sweep.csv`` (and ``sweep.parquet`` when pyarrow is installed); return the table."""
    rows = [
        table_row(point, summaries.get(point.point_id), errors.get(point.point_id))
        for point in points
    ]
    frame = pd.DataFrame(rows)
    write_table(out_dir / TABLE_FILE, frame)
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return frame
    write_table(out_dir / PARQUET_FILE, parquet_ready(frame))
    return frame


def _outcomes(
    points: list[SweepPoint], base_dir: str, workers: int, scheduler: str | None
) -> Iterator[PointOutcome]:
    """Outcomes of ``points`` in the order they complete."""
    if not points:
        return
    if scheduler is not None:
        yield from _dask_outcomes(points, base_dir, scheduler)
        return
    if workers <= 1:
        if len(points) > 1:
            load_compiled_loop()
        for point in points:
            yield run_point(point.point_id, point.document, base_dir)
        return
    # The method the pool starts its workers by (the platform's first unless one was set).
    method = multiprocessing.get_start_method(allow_none=True)
    if (method or multiprocessing.get_all_start_methods()[0]) == "fork":
        warm_up(points[0], base_dir)
    executor = ProcessPoolExecutor(
        max_workers=min(workers, len(points)), initializer=point_worker_init
    )
    try:
        futures = [
            executor.submit(run_point, point.point_id, point.document, base_dir) for point in points
        ]
        for future in as_completed(futures):
            yield future.result()
    finally:
        executor.shutdown(wait=False, cancel_futures=True)


def warm_up(point: SweepPoint, base_dir: str) -> None:
    """Run ``point`` cut to :data:`WARM_UP_REQUESTS` requests on the compiled loop, here, before
    the workers fork from this process: each then starts with the loop's machine code, the
    shipped data and the point's cost evaluator loaded (some 0.7 s of CPU a worker loading them
    itself). Nothing is kept of the run; a point that cannot run so short is left to its worker,
    which reports what is wrong with it."""
    if not load_compiled_loop():
        return
    workload = {**point.document.get("workload", {}), "num_requests": WARM_UP_REQUESTS}
    try:
        scenario = validate_document({**point.document, "workload": workload}, "warm-up")
        if scenario.fleet is not None:  # a fleet's replicas keep the Python path
            return
        simulation = build_simulation(scenario, Path(base_dir), step_records="summary")
        simulation.core.compiled_loop_min_requests = 0
        execute(simulation)
    except Exception:  # the point's own run records it (run_point), traceback too
        return


def point_worker_init() -> None:
    """A local worker's start: it ignores Ctrl-C and ends with its parent
    (:func:`sim.pool.pool_worker_init`), and loads the compiled loop once for all the points it
    runs (:func:`sim.engine.compiled_loop.load`), however short each is."""
    pool_worker_init()
    load_compiled_loop()


def _dask_outcomes(
    points: list[SweepPoint], base_dir: str, scheduler: str
) -> Iterator[PointOutcome]:
    """Outcomes of ``points`` run on an existing Dask cluster.

    Relative paths in the scenario resolve against ``base_dir`` on the workers, so a cluster on
    other machines needs the same files at the same place. Raise SpecsimError if dask.distributed
    is missing or the scheduler cannot be reached.
    """
    try:
        from dask.distributed import Client
        from dask.distributed import as_completed as dask_as_completed
    except ImportError:
        raise SpecsimError(
            "--scheduler needs dask.distributed: pip install 'specsim[distributed]'"
        ) from None
    try:
        client = Client(scheduler, timeout="10s")
    except (OSError, TimeoutError) as exc:
        raise SpecsimError(f"--scheduler {scheduler}: cannot connect ({exc})") from None
    futures = []
    try:
        futures = [
            client.submit(
                run_point, point.point_id, point.document, base_dir, key=f"specsim-{point.point_id}"
            )
            for point in points
        ]
        for future in dask_as_completed(futures):
            yield future.result()
    finally:
        client.cancel(futures)
        client.close()
