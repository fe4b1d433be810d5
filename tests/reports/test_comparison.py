"""specsim compare: common random numbers, method-specific keys, unsupported methods as rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

import reports.comparison as comparison
from reports.comparison import method_document
from sim.errors import ScenarioError
from sim.scenario import METHODS, validate_document
from sim.speculation import CHAIN_ONLY_METHODS

SMALL = ["--set", "workload.num_requests=60"]


def _document(**speculation: Any) -> dict[str, Any]:
    return {"speculation": {"method": "eagle3", **speculation}, "workload": {"num_requests": 10}}


def test_a_trace_field_of_another_method_is_dropped_and_noted() -> None:
    document = _document(acceptance={"trace": "llama-3.1-8b/sharegpt", "trace_field": "acc_eagle"})
    kept, notes = method_document(document, "eagle3")
    assert kept["speculation"]["acceptance"] == document["speculation"]["acceptance"]
    assert notes == []
    dropped, notes = method_document(document, "ngram")
    assert "acceptance" not in dropped["speculation"]
    assert dropped["speculation"]["method"] == "ngram"
    assert len(notes) == 1 and "acc_eagle" in notes[0]
    # The original is untouched.
    assert document["speculation"]["method"] == "eagle3"


def test_a_trace_without_a_field_fits_both_traced_methods() -> None:
    document = _document(acceptance={"trace": "llama-3.1-8b/sharegpt"})
    for method in ("eagle3", "ngram"):
        variant, notes = method_document(document, method)
        assert variant["speculation"]["acceptance"] == {"trace": "llama-3.1-8b/sharegpt"}
        assert notes == []
    _, notes = method_document(document, "medusa")
    assert notes and "medusa" in notes[0]


def test_generic_acceptance_is_kept_and_other_methods_keys_are_dropped() -> None:
    document = _document(
        num_speculative_tokens=5,
        acceptance={"alpha": 0.7},
        draft_model="llama-3.2-1b",
        tree={"shape": [2, 2]},
    )
    variant, notes = method_document(document, "ngram")
    spec = variant["speculation"]
    assert spec["acceptance"] == {"alpha": 0.7} and spec["num_speculative_tokens"] == 5
    assert "draft_model" not in spec and "tree" not in spec
    assert len(notes) == 2
    profile = _document(acceptance={"profile": "eagle3/llama-3.1-8b/mt-bench"})
    assert "acceptance" not in method_document(profile, "eagle")[0]["speculation"]
    assert method_document(document, "none")[0]["speculation"] == {"method": "none"}


@pytest.mark.parametrize("method", [m for m in METHODS if m != "none"])
def test_a_tree_is_kept_exactly_for_the_methods_whose_settings_take_one(method: str) -> None:
    # The compared method's document must load: a chain-only method refuses a tree at load time
    # (sim.speculation), so compare drops it for those and only those.
    document = _document(num_speculative_tokens=3, tree={"shape": [2, 1, 1]})
    variant, notes = method_document(document, method)
    assert ("tree" in variant["speculation"]) == (method not in CHAIN_ONLY_METHODS)
    assert any("speculation.tree dropped" in note for note in notes) == (
        method in CHAIN_ONLY_METHODS
    )
    validate_document(variant, "compare")


def test_compare_runs_every_method_on_identical_requests(
    cli: typer.Typer, runner: CliRunner, tmp_path: Path
) -> None:
    out = tmp_path / "cmp"
    result = runner.invoke(cli, ["compare", "--methods", "eagle3,ngram", "--out", str(out), *SMALL])
    assert result.exit_code == 0, result.output
    assert "none added as the baseline" in result.output
    table = pd.read_csv(out / "comparison.csv")
    assert list(table["method"]) == ["none", "eagle3", "ngram"]
    assert (out / "comparison.png").stat().st_size > 0
    ran = table[table["status"] == "ok"]["method"].tolist()
    if len(ran) < 2:
        pytest.skip("only one method runs in this checkout")
    base = table.set_index("method").loc["none"]
    assert base["speedup_vs_none"] == pytest.approx(1.0)
    columns = ["arrival_at_s", "prompt_tokens", "output_tokens"]
    frames = {m: pd.read_csv(out / m / "requests.csv") for m in ran}
    for method in ran:
        summary = json.loads((out / method / "summary.json").read_text())
        assert summary["method"] == method
        pd.testing.assert_frame_equal(frames[method][columns], frames["none"][columns])
    # The methods did differ where they should: the drafted counts are not all equal.
    drafted = {m: int(frames[m]["num_drafted"].sum()) for m in ran}
    assert drafted["none"] == 0 and any(v > 0 for m, v in drafted.items() if m != "none")


def test_an_arm_that_cannot_run_stops_compare_unless_skipped(
    cli: typer.Typer, runner: CliRunner, tmp_path: Path
) -> None:
    # Llama-3.1-8B has no MTP modules: the arm cannot run, and that is said before any run.
    out = tmp_path / "cmp"
    args = ["compare", "--methods", "none,mtp", "--out", str(out), *SMALL]
    refused = runner.invoke(cli, args)
    assert refused.exit_code == 2
    assert "mtp:" in refused.output and "--skip-unsupported" in refused.output
    assert not out.exists()
    result = runner.invoke(cli, [*args, "--skip-unsupported"])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "comparison.csv").set_index("method")
    assert table.loc["mtp", "status"] == "unsupported"
    assert "MTP" in str(table.loc["mtp", "reason"]) or "mtp" in str(table.loc["mtp", "reason"])
    assert not (out / "mtp").exists()
    assert table.loc["none", "status"] == "ok"


def test_each_arm_takes_its_own_settings(
    cli: typer.Typer, runner: CliRunner, tmp_path: Path
) -> None:
    # The README's comparison: a draft model arm with its own draft and acceptance, and an
    # EAGLE-3 arm at k = 2, side by side; neither setting leaks into another arm.
    out = tmp_path / "arms"
    methods = "none,eagle3:k=2,draft_model:model=meta-llama/Llama-3.2-1B-Instruct,alpha=0.7"
    result = runner.invoke(cli, ["compare", "--methods", methods, "--out", str(out), *SMALL])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "comparison.csv").set_index("method")
    assert list(table["status"]) == ["ok", "ok", "ok"]
    draft_label = "draft_model:model=meta-llama/Llama-3.2-1B-Instruct,alpha=0.7"
    resolved = (out / table.loc[draft_label, "folder"] / "scenario.resolved.yaml").read_text()
    assert "draft_model: llama-3.2-1b" in resolved and "alpha: 0.7" in resolved
    eagle = (out / "eagle3_k=2" / "scenario.resolved.yaml").read_text()
    assert "num_speculative_tokens: 2" in eagle and "alpha" not in eagle


def test_parse_arms_reads_settings_and_continuations() -> None:
    arms, added = comparison.parse_arms("eagle3:k=3,draft_model:model=llama-3.2-1b,alpha=0.7")
    assert added
    assert [a.method for a in arms] == ["none", "eagle3", "draft_model"]
    assert arms[2].settings == (("model", "llama-3.2-1b"), ("alpha", 0.7))
    with pytest.raises(ScenarioError, match="before any method"):
        comparison.parse_arms("k=3,eagle3")
    with pytest.raises(ScenarioError, match="twice"):
        comparison.parse_arms("eagle3:k=3,eagle3:k=3")
    with pytest.raises(ScenarioError, match="KEY=VALUE"):
        comparison.parse_arms("eagle3:")
    # A source of acceptance given to an arm replaces the scenario's, refinements merge.
    document = _document(acceptance={"profile": "eagle3/x/y"})
    variant, _ = comparison.arm_document(document, arms[2])
    assert variant["speculation"]["acceptance"] == {"alpha": 0.7}


def test_compare_fails_with_exit_2_when_every_method_fails(
    cli: typer.Typer, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(scenario: Any, base_dir: Path, *args: Any, **kwargs: Any) -> Any:
        raise ScenarioError(f"no {scenario.speculation.method}")

    monkeypatch.setattr(comparison, "run_scenario", refuse)
    result = runner.invoke(cli, ["compare", "--methods", "none", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2
    assert "no method could run" in result.output


def test_compare_rejects_a_bad_override_before_running(
    cli: typer.Typer, runner: CliRunner, tmp_path: Path
) -> None:
    result = runner.invoke(
        cli, ["compare", "--methods", "none", "--set", "workload.arival.rate_per_s=3"]
    )
    assert result.exit_code == 2
    assert "workload.arival" in result.output
