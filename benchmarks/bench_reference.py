"""The simulator's own speed and memory on the reference workload, printed as figures.

The reference workload (``benchmarks/reference_llama2_70b_a100.yaml``): Llama-2-70B on two
A100-80GB (TP2), Poisson arrivals at 0.8 requests/s, prompt and output lengths drawn from the
Azure conversation trace, max_num_seqs 128. Each case runs in a fresh Python process, so the wall
time and the peak resident memory include interpreter start-up, imports and loading the scenario:
the whole process, as a user running ``specsim`` pays it.

Targets: 10,000 requests without speculation in ≤ 3.0 s and ≤ 300 MB; with EAGLE-3 (k = 3,
trace-driven acceptance) in ≤ 4 s and ≤ 350 MB; cost linear in the number of steps.

Run: ``python benchmarks/bench_reference.py`` (add ``--quick`` to skip the 100,000-request case).
``--requests 100000 --eagle3-requests 100000 --cost python`` runs other sizes, and every block
costed by the Python cost model and every event on the Python path instead of the compiled
evaluator (which a run loads once it has costed 20,000 blocks, see ``sim/engine/cost_kernel.py``)
and the compiled loop (which a run of 3,000 open-loop requests or more loads, see
``sim/engine/compiled_loop.py``), to compare the two back to back. ``loop cpu`` is the CPU time
of ``execute()`` (the simulation and its summary, loading the compiled code included), ``cpu s``
that of the whole process.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCENARIO = HERE / "reference_llama2_70b_a100.yaml"

#: The child process: load the scenario, simulate, summarise; print the summary's key figures.
CHILD = """
import json, resource, sys, time
from pathlib import Path
from sim.run import build_simulation, execute
from sim.scenario import load_scenario
scenario, base_dir = load_scenario(Path(sys.argv[2]), sys.argv[3:])
simulation = build_simulation(scenario, base_dir)
simulation.core.compiled_cost = sys.argv[1] == "compiled"
simulation.core.compiled_loop = sys.argv[1] == "compiled"
started = time.process_time()
summary = execute(simulation).summary.to_dict()
loop_cpu_s = time.process_time() - started
figures = {k: summary[k] for k in ("num_steps", "num_completed", "wall_time_s",
           "output_throughput_tok_s", "mean_acceptance_length")}
figures["loop_cpu_s"] = loop_cpu_s
usage = resource.getrusage(resource.RUSAGE_SELF)
# Peak resident set of this whole process (Linux reports KiB), and its CPU time.
figures["peak_rss_mb"] = usage.ru_maxrss / 1024.0
figures["cpu_s"] = usage.ru_utime + usage.ru_stime
# The same case again in this process: the compiled code and the evaluator's tables loaded.
again = build_simulation(scenario, base_dir)
again.core.compiled_cost = again.core.compiled_loop = sys.argv[1] == "compiled"
started = time.process_time()
execute(again)
figures["loaded_loop_cpu_s"] = time.process_time() - started
print(json.dumps(figures))
"""

EAGLE3 = [
    "speculation.method=eagle3",
    "speculation.num_speculative_tokens=3",
    "speculation.acceptance.trace=llama-3.1-8b/sharegpt",
]


def run_case(
    overrides: list[str], child: str = CHILD, cost: str | None = "compiled"
) -> dict[str, float]:
    """Run one case in a fresh process (``child``'s code; ``cost``: the compiled evaluator
    allowed or the Python cost model only, for the default child); return the figures it
    prints, with the process's wall time."""
    started = time.perf_counter()
    cost_arg = [] if cost is None else [cost]
    done = subprocess.run(
        [sys.executable, "-c", child, *cost_arg, str(SCENARIO), *overrides],
        check=True,
        capture_output=True,
        text=True,
    )
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    figures["process_wall_s"] = time.perf_counter() - started
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="skip the 100,000-request case")
    parser.add_argument("--requests", help="comma-separated sizes of the cases without drafts")
    parser.add_argument("--eagle3-requests", type=int, default=10_000)
    parser.add_argument("--cost", choices=("compiled", "python"), default="compiled")
    args = parser.parse_args()
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    if args.requests:
        sizes = [int(size) for size in args.requests.split(",")]
    print(
        f"{'case':<28}{'requests':>10}{'steps':>11}{'process s':>11}{'cpu s':>7}{'sim s':>8}"
        f"{'loop cpu':>9}{'loaded':>8}{'peak MB':>9}{'us/step':>9}"
    )
    cases = [("none", n, []) for n in sizes] + [("eagle3 k=3 trace", args.eagle3_requests, EAGLE3)]
    for label, n, extra in cases:
        figures = run_case([f"workload.num_requests={n}", *extra], cost=args.cost)
        per_step_us = figures["wall_time_s"] / figures["num_steps"] * 1e6
        print(
            f"{label:<28}{n:>10,}{figures['num_steps']:>11,}{figures['process_wall_s']:>11.2f}"
            f"{figures['cpu_s']:>7.2f}{figures['wall_time_s']:>8.2f}{figures['loop_cpu_s']:>9.2f}"
            f"{figures['loaded_loop_cpu_s']:>8.2f}"
            f"{figures['peak_rss_mb']:>9.0f}{per_step_us:>9.1f}"
        )
    print("\ntargets: 10,000 requests: none <= 3.0 s and <= 300 MB; eagle3 <= 4 s and <= 350 MB;")
    print("the loop with its code loaded ('loaded': the case again in the same process) <= 0.25 s")


if __name__ == "__main__":
    main()
