"""``specsim recommend`` answers from simulation: known results, and answers that follow runs."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from reports import recommend_candidates
from reports.recommend import Request, recommend_configuration
from sim.errors import ScenarioError

FAST = {"num_requests": 60}


def test_low_load_chat_on_8b_recommends_speculation() -> None:
    # Known result: EAGLE-3 on Llama-3.1-8B speeds up low-load chat (vLLM, SpecDecode-Bench).
    answer = recommend_configuration(
        Request("llama-3.1-8b", "h100-sxm", "chat", rate_per_s=1.0, **FAST)
    )
    assert answer.best.method != "none"
    assert answer.runner_up is not None and answer.runner_up.label != answer.best.label
    labels = [o.label for o in answer.outcomes]
    assert "none" in labels and len(set(labels)) == len(labels)
    base = next(o for o in answer.outcomes if o.method == "none")
    assert answer.best.mean_e2e_latency_ms < base.mean_e2e_latency_ms
    assert any("confirms" in line for line in answer.explanation)


def test_the_answer_follows_the_acceptance_data(monkeypatch: pytest.MonkeyPatch) -> None:
    # With every draft rejected, no method can pay: the runs, not a table, must say none.
    def rejected(*args: object) -> tuple[dict[str, object], str, str]:
        task = args[3]
        return {"acceptance": {"alpha": 0.0}}, "alpha 0 (test)", task.datasets[0]  # type: ignore[attr-defined]

    monkeypatch.setattr(recommend_candidates, "find_acceptance", rejected)
    answer = recommend_configuration(
        Request("llama-3.1-8b", "h100-sxm", "chat", rate_per_s=1.0, **FAST)
    )
    assert answer.best.method == "none"
    assert all(o.mean_acceptance_length <= 1.0 + 1e-9 for o in answer.outcomes)


def test_methods_are_ranked_on_one_dataset_or_the_answer_says_so() -> None:
    # Chat tries ShareGPT then MT-Bench. EAGLE-3 and n-gram have ShareGPT traces, EAGLE only an
    # MT-Bench profile: ShareGPT is the common dataset and EAGLE's rows say they are not on it.
    answer = recommend_configuration(
        Request("llama-3.1-8b", "h100-sxm", "chat", rate_per_s=1.0, **FAST)
    )
    assert "methods ranked on one dataset: sharegpt" in answer.notes
    eagle = [n for n in answer.notes if n.startswith("acceptance for eagle k=")]
    assert eagle and all("not like-for-like" in n for n in eagle)
    same = [n for n in answer.notes if n.startswith("acceptance for eagle3 k=")]
    assert same and not any("not like-for-like" in n for n in same)


def test_bad_requests_are_refused() -> None:
    with pytest.raises(ScenarioError, match="--task"):
        recommend_configuration(Request("llama-3.1-8b", "h100-sxm", "poetry", rate_per_s=1.0))
    with pytest.raises(ScenarioError, match="exactly one"):
        recommend_configuration(
            Request("llama-3.1-8b", "h100-sxm", "chat", rate_per_s=1.0, concurrency=4)
        )


def test_cli_json_and_errors(cli: typer.Typer, runner: CliRunner) -> None:
    args = [
        "recommend",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--task",
        "summarisation",
        "--concurrency",
        "4",
        "--requests",
        "40",
        "--tpot-p50-ms",
        "1000",
        "--json",
    ]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["best"]["label"] in {o["label"] for o in answer["outcomes"]}
    assert all(o["meets_slo"] for o in answer["outcomes"])
    bad = runner.invoke(
        cli, ["recommend", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--task", "chat"]
    )
    assert bad.exit_code == 2
    assert "exactly one" in bad.output
