"""Is the plan's answer right? Long runs at each method's max rate and at the next probed rate.

For every shipped plan scenario (``scenarios/lib-capacity-plan-chat.yaml`` and the default
scenario under the README's SLO), plans the methods with the command's defaults, then runs each
method ten times longer than a probe (every seed, same steady window) at its reported max rate,
where the SLO must hold in every seed with at least 97% of the offered rate served, and at the
first probed rate above it, where it must not. Prints one line per long run and a verdict per
(scenario, method). Usage::

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
    """One line per method: max rate, per-seed rates, the bracket's upper end."""
    for row in plan["methods"]:
        seeds = "/".join(f"{r:.2f}" for r in row.get("per_seed_max_rate_per_s") or [])
        rate, above = row["max_rate_per_s"], row["bracket_high_per_s"]
        print(f"{name} plan: {row['method']:<7} {row['status']:<14} max "
              f"{'-' if rate is None else f'{rate:.2f}'} req/s, per seed {seeds}, first failing "
              f"{'-' if above is None else f'{above:.2f}'}")  # fmt: skip


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
    missed = 0
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
            missed += not ok
            print(f"  {entry['method']:<7} {entry['which']:<5} {entry['rate_per_s']:7.2f} req/s: "
                  f"{'holds in every seed' if entry['holds_in_every_seed'] else 'does not hold'} "
                  f"({'as required' if ok else 'MISSED'})")  # fmt: skip
            for run in entry["runs"]:
                values = ", ".join(
                    f"{key} {value:.4g}" if value is not None else f"{key} -"
                    for key, value in run["values"].items()
                )
                print(f"      seed {run['seed']}: served {run['served_share']:.1%}, {values}")
    print("all targets met" if not missed else f"{missed} target(s) missed")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
