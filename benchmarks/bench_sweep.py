"""Time a 100-point sweep of the default scenario, interrupt it, and check the resume.

The grid is ten request rates (1 to 10 per second) by ten seeds of the embedded default scenario
(1,000 requests each). First the sweep runs in a child process that receives Ctrl-C (SIGINT to its
process group, as a terminal sends it) once a third of the points are finished; then the same
sweep runs again here and must run only the points that were not finished, leaving every
finished point's files untouched. Prints both wall times and their sum; the budget for the whole
sweep is 120 s with two local workers. Usage::

    python -m benchmarks.bench_sweep [--workers 2] [--out DIR]

Exit status 1 if the resume recomputed a finished point, a point failed, or points are missing.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reports.sweep import SUMMARY_FILE, run_sweep
from reports.sweep_grid import expand_grid, parse_grid
from sim.scenario import read_document

BUDGET_S = 120.0
GRID = ["workload.arrival.rate_per_s=1,2,3,4,5,6,7,8,9,10", "seed=0,1,2,3,4,5,6,7,8,9"]


def _sweep(out_dir: Path, workers: int) -> tuple[int, int, int, bool]:
    document, base_dir, source = read_document(None)
    points = expand_grid(document, parse_grid(GRID), source)
    outcome = run_sweep(points, out_dir, base_dir, workers=workers)
    return outcome.num_run, outcome.num_reused, len(outcome.failed), outcome.interrupted


def _finished(out_dir: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in out_dir.glob(f"points/*/{SUMMARY_FILE}")}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and return the process exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    out_dir = args.out or Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    if args.child:
        return 130 if _sweep(out_dir, args.workers)[3] else 0

    started_s = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.bench_sweep", "--child", "--out", str(out_dir),
         "--workers", str(args.workers)],
        start_new_session=True,
    )  # fmt: skip
    while child.poll() is None and len(_finished(out_dir)) < 33:
        time.sleep(0.05)
    if child.poll() is None:
        os.killpg(child.pid, signal.SIGINT)
    child.wait()
    first_s = time.perf_counter() - started_s
    before = _finished(out_dir)
    print(f"interrupted run: {len(before)} points finished in {first_s:.1f} s "
          f"(exit {child.returncode})")  # fmt: skip

    started_s = time.perf_counter()
    num_run, num_reused, num_failed, _ = _sweep(out_dir, args.workers)
    second_s = time.perf_counter() - started_s
    after = _finished(out_dir)
    untouched = all(after.get(path) == stamp for path, stamp in before.items())
    print(f"resumed run: {num_run} run, {num_reused} reused, {num_failed} failed "
          f"in {second_s:.1f} s; finished points untouched: {untouched}")  # fmt: skip
    total_s = first_s + second_s
    budget = "within" if total_s <= BUDGET_S else "OVER"
    print(f"100 points with {args.workers} workers: {total_s:.1f} s in all "
          f"({budget} the {BUDGET_S:g} s budget); results in {out_dir}")  # fmt: skip
    ok = untouched and num_failed == 0 and num_reused == len(before) and len(after) == 100
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
