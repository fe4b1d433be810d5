"""One million requests of the reference workload, without speculation and with EAGLE-3.

The reference workload (``benchmarks/reference_llama2_70b_a100.yaml``, 0.8 requests/s) at
1,000,000 requests, each case in a fresh process that writes the default outputs of
``specsim run`` into a temporary folder: the step records streamed to ``steps.parquet`` as the
run goes, then ``requests.csv``, ``vllm_bench.json`` and ``summary.json``. Prints the whole
process's wall time and CPU time, the simulation loop's wall time, the peak resident memory,
the cost per step and the size of the step file. ``--summary-only`` keeps only the step columns
the summary reads in memory and writes nothing (``step_records="summary"``, as a sweep or a plan
does).

Targets: each case <= 60 s and <= 1 GB peak on a 2-core machine.
Run: ``python -m benchmarks.bench_million [--requests 1000000] [--methods none,eagle3]``.
"""

from __future__ import annotations

import argparse

from benchmarks.bench_reference import EAGLE3, run_case

CHILD = """
import json, os, resource, shutil, sys, tempfile
from pathlib import Path
from sim.results import save_result
from sim.run import run_scenario
from sim.scenario import load_scenario
summary_only = sys.argv[2] == "summary"
scenario, base_dir = load_scenario(Path(sys.argv[1]), sys.argv[3:])
out = Path(tempfile.mkdtemp(prefix="bench-million-"))
try:
    if summary_only:
        summary = run_scenario(scenario, base_dir, step_records="summary").summary.to_dict()
    else:
        result = run_scenario(scenario, base_dir, steps_to=out)
        save_result(result, out)
        summary = result.summary.to_dict()
    steps_mb = sum(p.stat().st_size for p in out.glob("steps.*")) / 1e6
finally:
    shutil.rmtree(out)
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({
    "num_steps": summary["num_steps"], "num_completed": summary["num_completed"],
    "wall_time_s": summary["wall_time_s"], "cpu_s": usage.ru_utime + usage.ru_stime,
    "peak_rss_mb": usage.ru_maxrss / 1024.0,  # Linux reports KiB
    "steps_mb": steps_mb,
}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--methods", default="none,eagle3")
    parser.add_argument(
        "--summary-only",
        action="store_true",
        help="keep the summary's step columns in memory and write nothing",
    )
    args = parser.parse_args()
    mode = "summary" if args.summary_only else "outputs"
    print(f"outputs: {'none (summary columns in memory)' if args.summary_only else 'default'}")
    print(
        f"{'case':<18}{'requests':>11}{'steps':>12}{'process s':>11}{'cpu s':>8}{'sim s':>8}"
        f"{'peak MB':>9}{'us/step':>9}{'steps MB':>10}"
    )
    for method in args.methods.split(","):
        extra = EAGLE3 if method == "eagle3" else []
        figures = run_case(
            [mode, f"workload.num_requests={args.requests}", *extra], CHILD, cost=None
        )
        per_step_us = figures["wall_time_s"] / figures["num_steps"] * 1e6
        print(
            f"{method:<18}{args.requests:>11,}{figures['num_steps']:>12,}"
            f"{figures['process_wall_s']:>11.1f}{figures['cpu_s']:>8.1f}"
            f"{figures['wall_time_s']:>8.1f}{figures['peak_rss_mb']:>9.0f}{per_step_us:>9.1f}"
            f"{figures['steps_mb']:>10.0f}"
        )
    print("\ntargets: each case <= 60 s and <= 1 GB peak on a 2-core machine")


if __name__ == "__main__":
    main()
