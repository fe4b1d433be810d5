"""The fleet simulator's own speed and memory, printed as figures.

The case: the default chat scenario (Llama-3.1-8B on one H100 SXM per replica) as a fleet of 16
replicas behind a router, 100,000 requests, Poisson arrivals at 20 requests/s per replica (320/s
in all). Each case runs in a fresh Python process, so the wall time and peak resident memory are
the whole process's (interpreter start-up, imports and scenario loading included).

Target: 16 replicas, 100,000 requests, least-outstanding routing, in ≤ 60 s on a 2-core machine.
The CPU time is printed beside the wall time: on a shared machine the two differ.

Run: ``python benchmarks/bench_fleet.py`` (``--quick``: 10,000 requests;
``--routers round_robin,least_outstanding`` picks the routers).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

#: The child process: load the default scenario with the fleet overrides, run, print figures.
CHILD = """
import json, resource, sys
from sim.run import run_scenario
from sim.scenario import load_scenario
scenario, base_dir = load_scenario(None, sys.argv[1:])
summary = run_scenario(scenario, base_dir).summary.to_dict()
figures = {k: summary[k] for k in ("num_steps", "num_completed", "wall_time_s",
           "request_throughput_req_s")}
figures["ttft_p99_ms"] = summary["ttft_ms"]["p99"]
routed = [r["num_routed"] for r in summary["fleet"]["replicas"]]
figures["routed_min_max"] = [min(routed), max(routed)]
usage = resource.getrusage(resource.RUSAGE_SELF)
figures["peak_rss_mb"] = usage.ru_maxrss / 1024.0
# CPU seconds of the whole process: on a shared machine the wall time also counts waiting.
figures["cpu_s"] = usage.ru_utime + usage.ru_stime
print(json.dumps(figures))
"""


def run_case(overrides: list[str]) -> dict[str, float]:
    """Run one case in a fresh process; return its figures with the process's wall time."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *overrides], check=True, capture_output=True, text=True
    )
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    figures["process_wall_s"] = time.perf_counter() - started
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 requests instead of 100,000")
    parser.add_argument("--replicas", type=int, default=16)
    parser.add_argument("--rate-per-replica", type=float, default=20.0)
    parser.add_argument("--routers", default="least_outstanding,round_robin")
    args = parser.parse_args()
    num_requests = 10_000 if args.quick else 100_000
    rate = args.rate_per_replica * args.replicas
    print(
        f"{'router':<19}{'replicas':>9}{'requests':>10}{'steps':>10}{'process s':>10}"
        f"{'CPU s':>7}{'sim s':>7}{'peak MB':>8}{'us/step':>8}{'TTFT p99':>9}  routed min-max"
    )
    for router in args.routers.split(","):
        figures = run_case(
            [
                f"fleet.replicas={args.replicas}",
                f"fleet.router={router}",
                f"workload.num_requests={num_requests}",
                f"workload.arrival.rate_per_s={rate}",
            ]
        )
        per_step_us = figures["wall_time_s"] / figures["num_steps"] * 1e6
        print(
            f"{router:<19}{args.replicas:>9}{figures['num_completed']:>10,}"
            f"{figures['num_steps']:>10,}{figures['process_wall_s']:>10.2f}"
            f"{figures['cpu_s']:>7.1f}{figures['wall_time_s']:>7.1f}{figures['peak_rss_mb']:>8.0f}"
            f"{per_step_us:>8.1f}{figures['ttft_p99_ms']:>9.1f}  {figures['routed_min_max']}"
        )
    print(
        "us/step = the simulator's own time / steps; CPU s = the process's CPU time (on a shared "
        "machine the wall time also counts time waiting for a core)"
    )


if __name__ == "__main__":
    main()
