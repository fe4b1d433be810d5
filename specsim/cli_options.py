"""Command-line arguments shared by every specsim command that takes a scenario."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ScenarioArg = Annotated[
    Path | None,
    typer.Argument(
        metavar="[SCENARIO.yaml]",
        help="Scenario YAML file; the embedded default scenario when omitted.",
        show_default=False,
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY.PATH=VALUE",
        help="Override a scenario key (repeatable): --set workload.arrival.rate_per_s=8",
    ),
]
OutOpt = Annotated[Path | None, typer.Option("--out", metavar="FOLDER", help="Output folder.")]
ForceOpt = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Replace results already at --out (never an input file).",
        show_default=False,
    ),
]
YesOpt = Annotated[
    bool,
    typer.Option(
        "--yes",
        "-y",
        help="Run even when the pre-run estimate is over the size or time limit.",
        show_default=False,
    ),
]
