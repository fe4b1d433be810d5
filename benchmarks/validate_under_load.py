"""Print the validation MAPE tables against the accuracy targets of issue #8.

Runs every regime (batch 1 with its fitted points, batch > 1, TP > 1, MoE, serving-path TTFT,
speculation under load) through the current cost model and prints: MAPE per regime and quantity,
fitted and out-of-sample rows apart; out-of-sample MAPE by TP degree and by batch band; the
targets (out-of-sample MAPE ≤ 10% for TPOT and throughput, ≤ 15% for TTFT, at batch 1-128 as the
issue states them, with closed loops of more clients reported on the same line; every batch-1
fitted row within ±3%) as PASS/MISS lines; the speculative-speedup sign and crossover checks;
the rows kept as not expressible, by reason; and the wall time. Usage::

    python -m benchmarks.validate_under_load [--regime all] [--rows]

``--rows`` also prints every row (the full ``specsim validate`` report). Exit status 0 whatever
the figures: this is a yardstick, not a gate.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Sequence

from sim.validation import format_report, resolve_regimes, run_points, speedup_checks
from sim.validation.checks import tree_speedup_at
from sim.validation.points import load_points
from sim.validation.runner import ValidationResult
from sim.validation.tables import MAPE_FAMILIES, format_mape, mape, targets

BANDS = ((1, "1"), (8, "2-8"), (32, "9-32"), (128, "33-128"))
BAND_ORDER = [label for _, label in BANDS] + ["> 128", "open loop"]


def _band(concurrency: int | None) -> str:
    if concurrency is None:
        return "open loop"
    for upper, label in BANDS:
        if concurrency <= upper:
            return label
    return "> 128"


def by_setup(results: Sequence[ValidationResult]) -> str:
    """Out-of-sample MAPE by TP degree and by batch band (closed-loop clients)."""
    points = {p.point_id: p for p in load_points()}
    outside = [
        r
        for r in results
        if not r.is_fitted and r.point_id in points and r.relative_error is not None
    ]
    lines = [
        "| split | value | " + " | ".join(f"{f} MAPE" for f in MAPE_FAMILIES) + " |",
        "|---|---|" + "---:|" * len(MAPE_FAMILIES),
    ]
    for split, key, order in (
        ("TP", lambda r: str(points[r.point_id].num_gpus), ["1", "2", "4", "8"]),
        ("batch", lambda r: _band(points[r.point_id].concurrency), BAND_ORDER),
    ):
        present = {key(r) for r in outside}
        for value in [v for v in order if v in present]:
            part = [r for r in outside if key(r) == value]
            cells = []
            for family in MAPE_FAMILIES:
                figure, count = mape(part, family)
                cells.append("-" if figure is None else f"{figure:.1f}% (n={count})")
            lines.append(f"| {split} | {value} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and return the process exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regime", action="append", default=None)
    parser.add_argument("--rows", action="store_true", help="print every row too")
    args = parser.parse_args(argv)
    regimes = resolve_regimes(args.regime or ["all"])
    started_s = time.perf_counter()
    results = run_points(regimes=regimes)
    checks = [c.line() for c in speedup_checks(results, tree_speedup_at)]
    wall_s = time.perf_counter() - started_s
    if args.rows:
        print(format_report(results, checks))
    print("MAPE by regime (fitted and out-of-sample apart)\n")
    print(format_mape(results))
    print("\nOut-of-sample MAPE by TP degree and by batch band\n")
    print(by_setup(results))
    print("\nTargets (issue #8)\n")
    print("\n".join(t.line() for t in targets(results)))
    print("\nSpeculative speedup: sign and crossover\n")
    print("\n".join(checks))
    skipped = Counter(r.reason for r in results if r.predicted is None)
    run = sum(r.predicted is not None for r in results)
    print(f"\n{run} rows predicted, {sum(skipped.values())} kept as not expressible:")
    for reason, count in skipped.most_common():
        print(f"  {count:3d}  {reason}")
    print(f"\nwall time {wall_s:.1f} s for {len(results)} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
