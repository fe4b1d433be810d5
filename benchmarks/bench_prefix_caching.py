"""What prefix caching costs the simulator, printed as figures: caching on against off.

Two workloads: the speed benchmark's reference workload (``reference_llama2_70b_a100.yaml``, no
shared prefix: caching must cost next to nothing, the target is at most 10% more time), and the
scenario ``lib-chat-system-prompt`` (shared system prompts and multi-turn sessions, where the
cache does real work). Each case runs ``--repeats`` times in a fresh Python process, alternating
on and off so that a busy machine slows both alike; the figures are the fastest run's simulation
wall time and the process's CPU time (user + system), which a busy machine disturbs less.

Run: ``python benchmarks/bench_prefix_caching.py`` (``--repeats N``, default 3).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES = (
    ("reference, 10,000 requests", HERE / "reference_llama2_70b_a100.yaml"),
    ("lib-chat-system-prompt", HERE.parent / "scenarios" / "lib-chat-system-prompt.yaml"),
)

#: The child process: load, simulate, print the wall time, CPU time and the figures compared.
CHILD = """
import json, resource, sys
from pathlib import Path
from sim.run import run_scenario
from sim.scenario import load_scenario
scenario, base_dir = load_scenario(Path(sys.argv[1]), sys.argv[2:])
summary = run_scenario(scenario, base_dir).summary.to_dict()
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_time_s": summary["wall_time_s"], "num_steps": summary["num_steps"],
                  "cpu_s": usage.ru_utime + usage.ru_stime,
                  "ttft_mean_ms": summary["ttft_ms"]["mean"],
                  "hit_rate": summary["prefix_cache_hit_rate"]}))
"""


def run_case(scenario: Path, caching: bool) -> dict[str, float]:
    """Run one case in a fresh process and return its figures."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(scenario), f"engine.enable_prefix_caching={caching}"],
        check=True,
        capture_output=True,
        text=True,
        cwd=HERE.parent,
    )
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(
        f"{'case':<30}{'caching':>8}{'steps':>9}{'sim s':>8}{'cpu s':>8}"
        f"{'TTFT ms':>9}{'hit rate':>9}"
    )
    for label, scenario in CASES:
        best: dict[bool, dict[str, float]] = {}
        for _ in range(args.repeats):
            for caching in (True, False):
                figures = run_case(scenario, caching)
                kept = best.get(caching)
                if kept is None or figures["cpu_s"] < kept["cpu_s"]:
                    best[caching] = figures
        for caching in (True, False):
            f = best[caching]
            rate = "-" if f["hit_rate"] is None else f"{f['hit_rate']:.3f}"
            print(
                f"{label:<30}{'on' if caching else 'off':>8}{f['num_steps']:>9,}"
                f"{f['wall_time_s']:>8.2f}{f['cpu_s']:>8.2f}{f['ttft_mean_ms']:>9.1f}{rate:>9}"
            )
        ratio = best[True]["cpu_s"] / best[False]["cpu_s"]
        print(f"{label:<30}{'on/off CPU time':>25}: {ratio:.3f}")
    print("\ntarget: reference workload, caching on / off <= 1.10")


if __name__ == "__main__":
    main()
