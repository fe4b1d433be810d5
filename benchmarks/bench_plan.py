"""Time ``specsim plan`` for three methods on the default scenario and print its answer.

Runs ``python -m specsim plan --methods none,eagle3,ngram --target-qps 100`` on the embedded default
scenario under its own SLO (the README's: TTFT p99 <= 2000 ms, TPOT p50 <= 50 ms) with the
command's defaults: three seeds per probed rate that must all hold, probes of 2,000 requests
lengthened four-fold up to 20,000 while undecided, a 5% bracket, one local process per core,
and the winner's node count verified by fleet runs at 100 req/s. The plan runs in a fresh
process, so the wall time is the whole command's (interpreter start-up, imports, workers, fleet
runs). Prints each method's saturation throughput (where its search starts), max rate, the first
rate above it that failed and the resolution between them (with the rates undecided there:
within the noise of the bound), per-seed rates, how each seed was decided at the max, the runs
and simulated requests it took (and at which rates: the max, the first rate above, the undecided
rates, elsewhere), the verified fleet, the wall time, the load average and the CPU
time of the command and its workers (on a shared machine the CPU time over the number of cores
is the wall time the plan would take alone). The budget is 60 s on two cores. Usage::

    python -m benchmarks.bench_plan [--methods none,eagle3,ngram] [--workers N] [--out DIR]

Exit status 1 if the plan failed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUDGET_S = 60.0
#: Where a method's simulated requests went (plan.json's ``simulated_requests_*``).
PURPOSES = ("at_max", "at_first_above", "at_undecided", "elsewhere")


def children_cpu_seconds() -> float:
    """CPU time (user + system) of the finished child processes and theirs."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _rates(values: list[float | None]) -> str:
    return "/".join("-" if v is None else f"{v:.2f}" for v in values)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and return the process exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="none,eagle3,ngram")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--target-qps", type=float, default=100.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    out_dir = args.out or Path(tempfile.mkdtemp(prefix="bench-plan-"))
    command = [sys.executable, "-m", "specsim", "plan", "--methods", args.methods,
               "--seeds", str(args.seeds), "--workers", str(args.workers),
               "--target-qps", f"{args.target_qps:g}", "--out", str(out_dir)]  # fmt: skip
    load_before = os.getloadavg()[0]
    started_s, started_cpu_s = time.perf_counter(), children_cpu_seconds()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    elapsed_s = time.perf_counter() - started_s
    cpu_s = children_cpu_seconds() - started_cpu_s
    load_after = os.getloadavg()[0]
    if done.returncode != 0:
        print(f"plan failed (exit {done.returncode}):\n{done.stderr.strip()}")
        return 1
    plan = json.loads((out_dir / "plan.json").read_text())
    print(f"SLO {', '.join(plan['slo'])}; probes of {plan['num_requests_per_probe']} requests "
          f"(up to {plan['max_requests_per_probe']}), seeds {plan['seeds']}, "
          f"{args.workers} workers")  # fmt: skip
    for row in plan["methods"]:
        if not row.get("max_rate_per_s"):
            print(f"  {row['method']:<7} {row['status']}: {row['reason']}")
            continue
        above = row["first_rate_above_per_s"]
        undecided = "/".join(f"{r:.2f}" for r in row["undecided_rates_per_s"]) or "none"
        nodes = row["nodes_needed"] if row["nodes_needed"] is not None else (
            f"~{row['nodes_estimate']}")  # fmt: skip
        print(
            f"  {row['method']:<7} saturation {row['saturation_rate_per_s'] or 0:6.2f}  max "
            f"{row['max_rate_per_s']:6.2f} req/s  first above "
            f"{'-' if above is None else f'{above:.2f}'} (resolution "
            f"{'-' if above is None else format(row['resolution'], '.1%')}, undecided "
            f"{undecided})  per-seed "
            f"{_rates(row['per_seed_max_rate_per_s'])} (decided by "
            f"{'/'.join(str(d) for d in row['decided_by_at_max'])})  {row['num_probes']} "
            f"probes, {row['num_runs']} runs, {row['num_simulated_requests']} requests  nodes "
            f"for {args.target_qps:g} req/s {nodes}"
        )
        parts = [row.get(f"simulated_requests_{key}") for key in PURPOSES]
        if all(part is not None for part in parts):
            print("          requests at the max rate {}, at the first rate above {}, at the "
                  "undecided rates {}, elsewhere {}".format(*parts))  # fmt: skip
    tied = f" (tied: {', '.join(plan['tied'])})" if plan["tied"] else ""
    print(f"winner: {plan['winner']}{tied}")
    fleet = plan.get("fleet")
    if fleet:
        sizes = ", ".join(
            f"{p['num_units']} {'holds' if p['holds'] else 'fails'}" for p in fleet["probes"]
        )
        print(f"fleet at {fleet['target_rate_per_s']:g} req/s ({fleet['router']}, "
              f"{fleet['num_requests']} requests, seeds {fleet['seeds']}): {sizes}; answer "
              f"{fleet['num_units']} nodes")  # fmt: skip
    print(f"plan written to {out_dir}")
    cores = min(args.workers, os.cpu_count() or 1)
    alone_s = cpu_s / cores
    verdict = "within" if elapsed_s <= BUDGET_S else "OVER"
    print(f"wall time {elapsed_s:.1f} s ({verdict} the {BUDGET_S:g} s budget; load average "
          f"{load_before:.1f} before, {load_after:.1f} after); CPU time {cpu_s:.1f} s = "
          f"{alone_s:.1f} s on {cores} free cores")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
