"""Long commands: a line per item off a terminal, a plan's probe estimate, one line on Ctrl-C."""

from __future__ import annotations

import io
import math
from typing import Any

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

import reports.comparison as comparison
from reports.plan_rows import MethodPlan
from reports.progress import item_progress
from reports.rate_search import RateSearch
from specsim.plan_command import plan_progress


def test_off_a_terminal_each_item_is_one_line() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=False, width=200)
    with item_progress(3, "compare", console) as progress:
        for name in ("none", "eagle3", "ngram"):
            progress.start(name)
            progress.done(f"{name} done")
    lines = buffer.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == [
        "compare [1/3] none done",
        "compare [2/3] eagle3 done",
        "compare [3/3] ngram done",
    ]


def test_the_plan_estimate_counts_the_bisections_left() -> None:
    # Bracketed at [8, 16] with tolerance 0.05: the width 8 must shrink below 0.05 * 16 = 0.8,
    # that is 8 / 2^n <= 0.8, n = ceil(log2(10)) = 4 more probes.
    search = RateSearch(4.0, 0.05)
    search.record(8.0, True)
    search.record(16.0, False)
    plan = MethodPlan("none", [], search)
    done, total, text = plan_progress([plan])
    assert (done, total) == (0, math.ceil(math.log2(10)))
    assert text == "none at 12 req/s"
    finished = RateSearch(4.0, 0.05)
    finished.record(8.0, True)
    finished.record(8.2, False)
    assert plan_progress([MethodPlan("eagle3", [], finished)])[1:] == (0, "eagle3 done")


def test_ctrl_c_in_compare_is_one_line_and_exit_130(
    cli: typer.Typer, runner: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    def interrupt(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(comparison, "run_scenario", interrupt)
    result = runner.invoke(cli, ["compare", "--methods", "none", "--out", str(tmp_path / "c")])
    assert result.exit_code == 130
    assert result.output.strip().splitlines()[-1].startswith("interrupted:")
    assert "Traceback" not in result.output
