"""Counts of the fuzz suite's outcomes, printed at the end of the test session.

Every generated case ends as ``ran`` (exit 0, its metrics checked), ``refused`` (one clear
SpecsimError, exit 2), ``estimated`` (valid, but longer than the suite runs: the pre-run
estimate is checked instead) or one of the failures the suite must never see: ``traceback``,
``hang`` (past its time limit), ``memory`` (past its memory limit) and ``bad_metrics`` (exit 0
with a non-finite or impossible metric).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

#: Outcomes per area (scenario, set, yaml, parser, subprocess): shared by the suite's tests.
COUNTS: dict[str, Counter[str]] = {}
FAILURES = ("traceback", "hang", "memory", "bad_metrics")


@pytest.fixture(scope="session")
def fuzz_counts() -> dict[str, Counter[str]]:
    """The session's outcome counts, filled in by each fuzz test."""
    return COUNTS


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not COUNTS:
        return
    total: Counter[str] = Counter()
    lines = []
    for area, counts in sorted(COUNTS.items()):
        total.update(counts)
        shown = ", ".join(f"{key} {value}" for key, value in sorted(counts.items()))
        lines.append(f"  {area:10} {sum(counts.values()):5} cases: {shown}")
    failures = ", ".join(f"{name} {total.get(name, 0)}" for name in FAILURES)
    terminalreporter.write_sep("=", "fuzz suite")
    for line in lines:
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"  {'all':10} {sum(total.values()):5} cases; {failures}")
