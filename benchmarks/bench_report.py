"""Time ``specsim report`` on a 100-point sweep, and ``specsim recommend`` on one request.

The sweep is ten request rates (2 to 64 per second) by two methods (none, EAGLE-3) by five seeds
of the shipped chat scenario with EAGLE-3 (200 requests per point), so the report draws every
sweep figure: load curves, speed-up, acceptance histograms, tokens per step.
The sweep folder can be reused with ``--sweep DIR`` (a finished sweep is not rerun). Prints the
sweep's time, the report's time against its budget of 20 s, and the recommender's time against its
budget of 20 s. Usage::

    python -m benchmarks.bench_report [--workers 2] [--sweep DIR]

Exit status 1 if a point failed or a budget was missed.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from reports.sweep import run_sweep, write_manifest
from reports.sweep_grid import expand_grid, parse_grid
from sim.scenario import read_document

REPORT_BUDGET_S = 20.0
RECOMMEND_BUDGET_S = 20.0
SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "spec-chat-eagle3.yaml"
GRID = [
    "workload.arrival.rate_per_s=2,4,8,12,16,24,32,40,48,64",
    "speculation.method=none,eagle3",
    "seed=0,1,2,3,4",
]


def build_sweep(out_dir: Path, workers: int) -> tuple[int, int]:
    """Run (or resume) the 100-point sweep into ``out_dir``; return points and failures."""
    document, base_dir, source = read_document(SCENARIO)
    document["workload"]["num_requests"] = 200
    axes = parse_grid(GRID)
    points = expand_grid(document, axes, source)
    write_manifest(out_dir, source, axes, ["workload.num_requests=200"])
    outcome = run_sweep(points, out_dir, base_dir, workers=workers)
    return len(points), len(outcome.failed)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and return the process exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sweep", type=Path, default=None)
    args = parser.parse_args(argv)
    out_dir = args.sweep or Path(tempfile.mkdtemp(prefix="bench-report-"))

    started_s = time.perf_counter()
    num_points, num_failed = build_sweep(out_dir, args.workers)
    sweep_s = time.perf_counter() - started_s
    print(f"sweep: {num_points} points ({num_failed} failed) in {sweep_s:.1f} s -> {out_dir}")

    from reports.render import render_report

    started_s = time.perf_counter()
    written = render_report(out_dir)
    report_s = time.perf_counter() - started_s
    size_kb = written.html_path.stat().st_size / 1024
    print(
        f"report: {len(written.figure_paths)} figures, {size_kb:.0f} kB HTML in {report_s:.2f} s "
        f"(budget {REPORT_BUDGET_S:.0f} s)"
    )

    from reports.recommend import Request, recommend_configuration

    started_s = time.perf_counter()
    answer = recommend_configuration(Request("llama-3.1-8b", "h100-sxm", "chat", rate_per_s=4.0))
    recommend_s = time.perf_counter() - started_s
    print(
        f"recommend: {len(answer.outcomes)} configurations simulated, best {answer.best.label}, "
        f"in {recommend_s:.2f} s (budget {RECOMMEND_BUDGET_S:.0f} s)"
    )
    ok = num_failed == 0 and report_s <= REPORT_BUDGET_S and recommend_s <= RECOMMEND_BUDGET_S
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
