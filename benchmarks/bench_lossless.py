"""Time the lossless check at its full size and print its figures.

Runs :func:`sim.theory.lossless_check.run_lossless_check` with 50,000 speculative and 50,000
direct sequences, once with the exact residual and once with the deliberately broken one, and
prints both reports with their wall times. The budget is five seconds per check on two cores.
Usage::

    python -m benchmarks.bench_lossless [--samples N] [--seed S]    (from the repository root)

Exit status 1 if the exact samplers fail or the broken control is not caught.
"""

from __future__ import annotations

import argparse
import sys
import time

from sim.theory.lossless_check import run_lossless_check

BUDGET_S = 5.0


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and return the process exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    status = 0
    for broken in (False, True):
        started_s = time.perf_counter()
        report = run_lossless_check(samples=args.samples, seed=args.seed, broken_residual=broken)
        elapsed_s = time.perf_counter() - started_s
        print(report.format_text())
        budget = "within" if elapsed_s <= BUDGET_S else "OVER"
        print(f"benchmark wall time {elapsed_s:.2f} s ({budget} the {BUDGET_S:g} s budget)\n")
        caught = all(check.min_p_value < 1e-6 for check in report.checks)
        if (not broken and not report.passed) or (broken and not caught):
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
