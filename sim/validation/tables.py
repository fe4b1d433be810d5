"""The validation report: per regime, the fitted rows and the out-of-sample rows apart, each row
with its measured value, prediction, error and verdict; then MAPE per regime and quantity, and the
accuracy targets as pass/miss lines.

A row is a miss when its error exceeds its quantity's tolerance (:data:`TOLERANCE`). Every row is
printed; nothing is averaged away: a MAPE sits beside the rows it summarises, and a group with no
expressible row says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.validation.runner import ValidationResult
from sim.validation.scenarios import REGIME_TITLES, REGIMES

#: Per-row tolerance by quantity family (issue #8 targets: 10% TPOT/throughput, 15% TTFT p50).
TOLERANCE = {"tpot": 0.10, "throughput": 0.10, "ttft": 0.15, "speedup": 0.10, "acceptance": 0.10}
#: The batch-1 fitted rows must stay within ±3%.
BATCH1_FITTED_TOLERANCE = 0.03
MAPE_FAMILIES = ("tpot", "throughput", "ttft", "speedup")


def tolerance(result: ValidationResult) -> float:
    """The error a row may have before it is a miss."""
    if result.regime == "batch-1" and result.is_fitted:
        return BATCH1_FITTED_TOLERANCE
    return TOLERANCE[result.family]


def is_miss(result: ValidationResult) -> bool:
    """Whether an expressible row's error exceeds its tolerance."""
    error = result.relative_error
    return error is not None and abs(error) > tolerance(result)


def mape(results: Sequence[ValidationResult], family: str) -> tuple[float | None, int]:
    """Mean absolute percentage error of the expressible rows of ``family``, and their count."""
    errors = [
        abs(r.relative_error)
        for r in results
        if r.family == family and r.relative_error is not None
    ]
    if not errors:
        return None, 0
    return 100.0 * sum(errors) / len(errors), len(errors)


def _row_line(result: ValidationResult) -> str:
    error = result.relative_error
    assert error is not None and result.predicted is not None
    verdict = "MISS" if is_miss(result) else "ok"
    quantity = f"{result.quantity} ({result.statistic})"
    return (
        f"| {result.point_id} | {result.setup} | {quantity} | {result.measured:.4g} | "
        f"{result.predicted:.4g} | {100 * error:+.1f}% | {verdict} | {result.source_group} |"
    )


def _table(results: Sequence[ValidationResult], title: str) -> list[str]:
    lines = [f"{title}:"]
    if not results:
        return [*lines, "(none)", ""]
    lines.append("| point | setup | quantity | measured | predicted | error | verdict | source |")
    lines.append("|---|---|---|---:|---:|---:|---|---|")
    lines.extend(_row_line(r) for r in results)
    misses = sum(is_miss(r) for r in results)
    lines.append(f"{misses} of {len(results)} rows are misses.")
    lines.append("")
    return lines


def format_regime(results: Sequence[ValidationResult], regime: str) -> str:
    """One regime's section: fitted rows, out-of-sample rows, not-expressible rows."""
    mine = [r for r in results if r.regime == regime]
    run = [r for r in mine if r.predicted is not None]
    lines = [f"## {REGIME_TITLES[regime]} ({regime})", ""]
    lines += _table([r for r in run if r.is_fitted], "Fitted rows (a constant was fitted on them)")
    lines += _table([r for r in run if not r.is_fitted], "Out-of-sample rows (no fit used them)")
    skipped = [r for r in mine if r.predicted is None]
    if skipped:
        lines.append(f"Not expressible ({len(skipped)} rows, kept):")
        lines.extend(
            f"- {r.point_id}: {r.quantity} {r.measured:.4g} {r.unit} - not expressible: {r.reason}"
            for r in skipped
        )
        lines.append("")
    return "\n".join(lines)


def _cell(results: Sequence[ValidationResult], family: str) -> str:
    value, count = mape(results, family)
    return "-" if value is None else f"{value:.1f}% (n={count})"


def format_mape(results: Sequence[ValidationResult]) -> str:
    """MAPE per regime, fitted and out of sample apart, for TPOT, throughput, TTFT, speedup."""
    lines = [
        "| regime | rows | " + " | ".join(f"{f} MAPE" for f in MAPE_FAMILIES) + " |",
        "|---|---|" + "---:|" * len(MAPE_FAMILIES),
    ]
    for regime in REGIMES:
        mine = [r for r in results if r.regime == regime]
        if not mine:
            continue
        for label, fitted in (("fitted", True), ("out-of-sample", False)):
            part = [r for r in mine if r.is_fitted == fitted]
            if not part:
                continue
            cells = " | ".join(_cell(part, f) for f in MAPE_FAMILIES)
            lines.append(f"| {regime} | {label} | {cells} |")
    return "\n".join(lines)


@dataclass(frozen=True)
class Target:
    """An accuracy target of issue #8 and whether the results meet it."""

    name: str
    value: float | None
    limit: float
    count: int
    #: Rows of the same family outside the target's scope, reported beside it (empty: none).
    apart: str = ""

    @property
    def passed(self) -> bool | None:
        """None when no row could be judged."""
        return None if self.value is None else self.value <= self.limit

    def line(self) -> str:
        """``PASS``/``MISS``/``NOT RUN`` with the figure and its limit."""
        verdict = {True: "PASS", False: "MISS", None: "NOT RUN"}[self.passed]
        figure = "no rows" if self.value is None else f"{self.value:.1f}%"
        line = f"{verdict}  {self.name}: {figure} (limit {self.limit:.0f}%, n={self.count})"
        return f"{line}; {self.apart}" if self.apart else line


#: Issue #8 states its MAPE targets for batch 1-128 ("Out-of-sample rows: MAPE <= 10% for TPOT and
#: throughput at batch 1-128 and TP 1-8, <= 15% for TTFT"): a closed loop of more clients is
#: outside their scope and its rows are reported beside each target, never dropped.
TARGET_MAX_CLIENTS = 128


def in_target_scope(result: ValidationResult) -> bool:
    """Whether ``result`` falls in the batch range of issue #8's MAPE targets: every row that is
    not a closed loop (batch 1, open loops), and closed loops of at most 128 clients."""
    return result.concurrency is None or result.concurrency <= TARGET_MAX_CLIENTS


def targets(results: Sequence[ValidationResult]) -> list[Target]:
    """Out-of-sample MAPE ≤ 10% for TPOT and throughput, ≤ 15% for TTFT, over every regime but
    speculation's speedup ratios, at batch 1-128 (closed loops of more clients are reported
    beside each target); every batch-1 fitted row within ±3% (largest error)."""
    outside = [r for r in results if not r.is_fitted and in_target_scope(r)]
    above = [r for r in results if not r.is_fitted and not in_target_scope(r)]
    found: list[Target] = []
    for family, limit in (("tpot", 10.0), ("throughput", 10.0), ("ttft", 15.0)):
        value, count = mape(outside, family)
        above_value, above_count = mape(above, family)
        apart = (
            f"above {TARGET_MAX_CLIENTS} clients, outside the target, {above_value:.1f}% "
            f"(n={above_count})"
            if above_value is not None
            else ""
        )
        found.append(
            Target(f"out-of-sample {family} MAPE, batch 1-128", value, limit, count, apart)
        )
    fitted = [
        abs(r.relative_error)
        for r in results
        if r.regime == "batch-1"
        and r.is_fitted
        and r.family != "acceptance"
        and r.relative_error is not None
    ]
    largest = 100.0 * max(fitted) if fitted else None
    found.append(Target("batch-1 fitted rows, largest |error|", largest, 3.0, len(fitted)))
    return found


def format_report(results: Sequence[ValidationResult], check_lines: Sequence[str] = ()) -> str:
    """The whole report: every regime present, the MAPE table, the targets and the checks."""
    present = [regime for regime in REGIMES if any(r.regime == regime for r in results)]
    parts = [format_regime(results, regime) for regime in present]
    parts.append("## MAPE by regime\n\n" + format_mape(results))
    parts.append("## Targets\n\n" + "\n".join(t.line() for t in targets(results)))
    if check_lines:
        parts.append("## Speculative speedup: sign and crossover\n\n" + "\n".join(check_lines))
    return "\n\n".join(parts) + "\n"
