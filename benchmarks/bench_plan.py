"""Time ``specsim plan`` for three methods on the default scenario and print its answer.

Plans none, eagle3 and ngram on the embedded default scenario under its own SLO (the README's:
TTFT p99 <= 2000 ms, TPOT p50 <= 50 ms) with the command's defaults: three seeds per probed
rate that must all hold, probes of 2,000 requests lengthened up to 8,000 while undecided, a 5%
bracket, one local process per core. Prints each method's rate, interval, per-seed rates, the
runs and simulated requests it took, the wall time and the CPU time of this process and its
workers (on a shared machine the CPU time over the number of cores is the wall time the plan
would take alone). The budget is 60 s on two cores. Usage::

    python -m benchmarks.bench_plan [--methods none,eagle3,ngram] [--workers N] [--out DIR]

Exit status 1 if no method could be planned.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from reports.capacity import plan_capacity
from sim.errors import SpecsimError
from sim.scenario import read_document

BUDGET_S = 60.0


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (user + system)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and return the process exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="none,eagle3,ngram")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    document, base_dir, source = read_document(None)
    out_dir = args.out or Path(tempfile.mkdtemp(prefix="bench-plan-"))
    started_s, started_cpu_s = time.perf_counter(), cpu_seconds()
    try:
        plan = plan_capacity(
            document,
            base_dir,
            source,
            slo_text=None,
            methods_text=args.methods,
            target_qps=100.0,
            gpu_hour_usd=None,
            num_seeds=args.seeds,
            num_requests=None,
            tolerance=0.05,
            workers=args.workers,
            out_dir=out_dir,
        )
    except SpecsimError as exc:
        print(f"plan failed: {exc}")
        return 1
    elapsed_s, cpu_s = time.perf_counter() - started_s, cpu_seconds() - started_cpu_s
    print(f"SLO {', '.join(plan['slo'])}; probes of {plan['num_requests_per_probe']} requests "
          f"(up to {plan['max_requests_per_probe']}), seeds {plan['seeds']}, "
          f"{args.workers} workers")  # fmt: skip
    for row in plan["methods"]:
        if not row.get("max_rate_per_s"):
            print(f"  {row['method']:<8} {row['status']}: {row['reason']}")
            continue
        seeds = "/".join(f"{r:g}" for r in row["per_seed_max_rate_per_s"])
        high = row["interval_high_per_s"]
        print(
            f"  {row['method']:<8} max {row['max_rate_per_s']:6.2f} req/s  interval "
            f"[{row['interval_low_per_s']:g}, {high if high is None else f'{high:g}'}]  "
            f"per-seed {seeds}  {row['num_runs']} runs, "
            f"{row['num_simulated_requests']} requests  nodes for 100 req/s {row['nodes_needed']}"
        )
    print(f"plan written to {out_dir}")
    tied = f" (tied: {', '.join(plan['tied'])})" if plan["tied"] else ""
    print(f"winner: {plan['winner']}{tied}")
    cores = min(args.workers, os.cpu_count() or 1)
    alone_s = cpu_s / cores
    budget = "within" if alone_s <= BUDGET_S else "OVER"
    print(f"wall time {elapsed_s:.1f} s; CPU time {cpu_s:.1f} s = {alone_s:.1f} s on {cores} "
          f"free cores ({budget} the {BUDGET_S:g} s budget)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
