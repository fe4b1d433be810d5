"""Is the plan's answer right? Long runs at each method's max rate and at its first rate above.

For every shipped plan scenario (``scenarios/lib-capacity-plan-chat.yaml`` and the default
scenario under the README's SLO), plans the methods with the command's defaults, then runs each
method ten times longer than a probe (every seed, same steady window) at its reported max rate,
where the SLO must hold in every seed with at least 97% of the offered rate served and no
growing backlog, and at the first rate above it that the plan reports (the other end of its
stated resolution), where it must not. Each long run is also judged as the plan judges its
longest runs, and the line says whether that verdict is the one the plan claims. Prints one
line per long run and a verdict per (scenario, method). Usage::

    python -m benchmarks.bench_plan_soundness [--workers N] [--factor 10] [--methods ...]

Exit status 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from reports.capacity import plan_capacity, plan_targets
from reports.plan_check import check_plan
from sim.scenario import read_document, validate_document

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS: tuple[tuple[str, Path | None, str], ...] = (
    ("default", None, "none,eagle3,ngram"),
    ("lib-capacity-plan-chat", ROOT / "scenarios" / "lib-capacity-plan-chat.yaml",
     "none,eagle3,ngram"),
)  # fmt: skip


def print_plan(name: str, plan: dict[str, Any]) -> None:
    """One line per method: max rate, per-seed rates, the first rate above and the resolution."""
    for row in plan["methods"]:
        seeds = "/".join(f"{r:.2f}" for r in row.get("per_seed_max_rate_per_s") or [])
        rate, above = row["max_rate_per_s"], row.get("first_rate_above_per_s")
        undecided = "/".join(f"{r:.2f}" for r in row.get("undecided_rates_per_s") or []) or "none"
        resolution = row.get("resolution")
        print(f"{name} plan: {row['method']:<7} {row['status']:<14} max "
              f"{'-' if rate is None else f'{rate:.2f}'} req/s, per seed {seeds}, first above "
              f"{'-' if above is None else f'{above:.2f}'} (resolution "
              f"{'-' if resolution is None else f'{resolution:.1%}'}, undecided between: "
              f"{undecided})")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and return the process exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--factor", type=int, default=10)
    parser.add_argument("--methods", default=None, help="Override every scenario's methods.")
    parser.add_argument("--scenario", default=None, help="Only this one (default or lib-...).")
    parser.add_argument(
        "--reuse", action="append", default=[], metavar="NAME=DIR",
        help="Check the plan already in DIR for scenario NAME instead of planning again.",
    )  # fmt: skip
    args = parser.parse_args(argv)
    missed = mismatched = 0
    for name, path, methods in SCENARIOS:
        if args.scenario and name != args.scenario:
            continue
        document, base_dir, source = read_document(path)
        reused = dict(item.split("=", 1) for item in args.reuse)
        if name in reused:
            out_dir = Path(reused[name])
            plan = json.loads((out_dir / "plan.json").read_text())
            print_plan(name, plan)
        else:
            out_dir = Path(tempfile.mkdtemp(prefix=f"bench-sound-{name}-"))
            plan = plan_capacity(document, base_dir, source, slo_text=None,
                                 methods_text=args.methods or methods, target_qps=None,
                                 gpu_hour_usd=None, num_seeds=3, num_requests=None,
                                 tolerance=0.05, workers=args.workers,
                                 out_dir=out_dir)  # fmt: skip
            print_plan(name, plan)
        targets = plan_targets(validate_document(document, source), None, None, None)
        length = args.factor * plan["num_requests_per_probe"]
        print(f"{name}: SLO {', '.join(plan['slo'])}; long runs of {length} requests; "
              f"plan in {out_dir}")  # fmt: skip
        entries = check_plan(document, base_dir, source, plan, targets, args.factor, args.workers)
        for entry in entries:
            want = entry["which"] == "max"
            ok = entry["holds_in_every_seed"] == want
            # What the plan claims of its own longest runs: holds in every seed at the max,
            # fails in one seed at the first rate above.
            verdicts = [run["plan_verdict"] for run in entry["runs"]]
            claimed = all(v == "holds" for v in verdicts) if want else "fails" in verdicts
            missed += not ok
            mismatched += not claimed
            print(f"  {entry['method']:<7} {entry['which']:<5} {entry['rate_per_s']:7.2f} req/s: "
                  f"{'holds in every seed' if entry['holds_in_every_seed'] else 'does not hold'} "
                  f"({'as required' if ok else 'MISSED'})")  # fmt: skip
            for run in entry["runs"]:
                values = ", ".join(
                    f"{key} {value:.4g}" if value is not None else f"{key} -"
                    for key, value in run["values"].items()
                )
                print(f"      seed {run['seed']}: served {run['served_share']:.1%}, {values}; "
                      f"plan's reading: {run['plan_verdict']}")  # fmt: skip
            if not claimed:
                print("      the plan's own reading of these runs is not what it claims")
    print("all targets met" if not missed else f"{missed} target(s) missed")
    if mismatched:
        print(f"{mismatched} plan claim(s) not reproduced by the long runs")
    return 1 if missed or mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
