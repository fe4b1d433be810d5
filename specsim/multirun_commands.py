"""The multi-run commands of the ``specsim`` command line: ``compare``, ``sweep`` and ``plan``.

``register(app)`` adds them to the application. Each validates its whole input (the scenario,
every override, every grid point, the SLO) before the first run, and reports a user's mistake
as one message with exit code 2. Each command has its own module (:mod:`specsim.compare_command`,
:mod:`specsim.sweep_command`, :mod:`specsim.plan_command`); here is what they share: the
scenario with its overrides, the inputs no output may replace, and number formatting.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import typer

from specsim.bench_options import BenchOptions, apply_bench_options


def load_document(
    path: Path | None, overrides: list[str], bench: BenchOptions | None = None
) -> tuple[dict[str, Any], Path, str]:
    """The scenario mapping with ``--set`` overrides and then the ``vllm bench serve`` options
    applied, validated, with its folder and name.

    Raise ScenarioError if the file, an override, an option or the resulting scenario is invalid.
    """
    from sim.scenario import document_with_overrides, validate_document

    document, base_dir, source = document_with_overrides(path, overrides)
    if bench is not None:
        apply_bench_options(document, bench)
    validate_document(document, source)
    return document, base_dir, source


def _inputs(scenario: Path | None) -> tuple[Path, ...]:
    """The files a command reads, which its outputs must never replace."""
    return () if scenario is None else (scenario,)


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def register(app: typer.Typer) -> None:
    """Add ``compare``, ``sweep`` and ``plan`` to ``app``."""
    from specsim.compare_command import register as register_compare
    from specsim.plan_command import register as register_plan
    from specsim.sweep_command import register as register_sweep

    register_compare(app)
    register_sweep(app)
    register_plan(app)
