"""Time ``specsim plan`` for three methods on the default scenario and print its answer.

Plans none, eagle3 and ngram on the embedded default scenario under its own SLO, with the
command's defaults (three seeds per probed rate, at most 1,000 requests per probe, 5% bracket,
one local process per core), and prints each method's rate, bracket, seed spread and the wall
time. The budget is 60 s on two cores. Usage::

    python -m benchmarks.bench_plan [--methods none,eagle3,ngram] [--workers N] [--out DIR]

Exit status 1 if no method could be planned.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from reports.capacity import plan_capacity
from sim.errors import SpecsimError
from sim.scenario import read_document

BUDGET_S = 60.0


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
    started_s = time.perf_counter()
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
    elapsed_s = time.perf_counter() - started_s
    print(f"SLO {', '.join(plan['slo'])}; {plan['num_requests_per_probe']} requests per probe, "
          f"seeds {plan['seeds']}, {args.workers} workers")  # fmt: skip
    for row in plan["methods"]:
        if row["status"] == "unsupported":
            print(f"  {row['method']:<8} not run: {row['reason']}")
            continue
        seeds = row.get("per_seed_max_rate_per_s") or []
        print(
            f"  {row['method']:<8} {row['status']:<11} max {row['max_rate_per_s']:7.2f} req/s  "
            f"bracket [{row['bracket_low_per_s']}, {row['bracket_high_per_s']})  "
            f"per-seed {min(seeds, default=0):.2f}-{max(seeds, default=0):.2f}  "
            f"probes {row['num_probes']}  nodes for 100 req/s {row['nodes_needed']}"
        )
    print(f"winner: {plan['winner']}")
    budget = "within" if elapsed_s <= BUDGET_S else "OVER"
    print(f"benchmark wall time {elapsed_s:.1f} s ({budget} the {BUDGET_S:g} s budget)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
