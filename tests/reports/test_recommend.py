"""``specsim recommend`` answers from simulation: known results, and answers that follow runs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from reports import recommend_candidates
from reports.recommend import Request, recommend_configuration, simulate
from reports.recommend_candidates import base_document, candidates
from sim.errors import ScenarioError
from sim.run import run_scenario
from sim.scenario import validate_document

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
    def rejected(*args: object, **draft: object) -> tuple[dict[str, object], str, str]:
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


#: Qwen3-32B on two H100s writing code at temperature 0: the task's first dataset, InstructCoder,
#: is where the (Qwen3-32B, Qwen3-1.7B) and (Qwen3-32B, Qwen3-4B) pairs and Qwen3-32B's EAGLE-3
#: head were measured (acceptance_published_pairs.yaml).
QWEN_CODE = Request("qwen3-32b", "h100-sxm", "code", num_gpus=2, concurrency=4, num_requests=40)


@pytest.mark.parametrize(
    ("label", "speculation"),
    [
        (
            "draft_model qwen3-1.7b k=3",
            {"method": "draft_model", "draft_model": "qwen3-1.7b", "num_speculative_tokens": 3},
        ),
        (
            "draft_model qwen3-4b k=5",
            {"method": "draft_model", "draft_model": "qwen3-4b", "num_speculative_tokens": 5},
        ),
        ("eagle3 k=3", {"method": "eagle3", "num_speculative_tokens": 3}),
    ],
)
def test_a_candidate_uses_the_acceptance_a_run_of_it_uses(
    label: str, speculation: dict[str, object]
) -> None:
    """A recommend candidate and `specsim run` of the same scenario written without
    speculation.acceptance (so the run looks the pair's acceptance up itself) agree exactly on
    the acceptance model, the acceptance length and the throughput: same document, same seed.
    Recommend's own approximations (a profile at the nearest measured temperature above the
    requested one, a same-tokenizer model's measurements for the target) do not apply here:
    the pairs are measured at temperature 0 on this target."""
    found, _, sources = candidates(QWEN_CODE)
    candidate = next(c for c in found if c.label == label)
    assert "published" in sources[label], sources[label]
    outcome = simulate(base_document(QWEN_CODE), candidate, QWEN_CODE, sources[label])
    document = {**base_document(QWEN_CODE), "speculation": speculation}
    run = run_scenario(validate_document(document, "run"), Path.cwd())
    variant = {**base_document(QWEN_CODE), "speculation": dict(candidate.speculation)}
    variant["speculation"].pop("_temperature")
    mine = run_scenario(validate_document(variant, "candidate"), Path.cwd())
    acceptance = run.resolved_scenario["derived"]["strategy"]["acceptance"]
    assert mine.resolved_scenario["derived"]["strategy"]["acceptance"] == acceptance
    assert outcome.mean_acceptance_length == run.summary.mean_acceptance_length > 1.0
    assert outcome.output_throughput_tok_s == run.summary.output_throughput_tok_s


def test_draft_models_without_a_measured_pair_need_an_assumed_acceptance() -> None:
    # Qwen2.5-0.5B shares Qwen3's tokenizer but no (Qwen3-32B, Qwen2.5-0.5B) acceptance is
    # shipped: only --draft-alpha brings it in, and its source says it is assumed.
    found, _, sources = candidates(QWEN_CODE)
    assert not any("qwen2.5-0.5b" in c.label for c in found)
    assumed = replace(QWEN_CODE, draft_alpha=0.6)
    found, _, sources = candidates(assumed)
    label = "draft_model qwen2.5-0.5b k=3"
    assert label in {c.label for c in found} and "assumed" in sources[label]
    assert "published" in sources["draft_model qwen3-1.7b k=3"]
    # At a temperature no pair was measured at, nothing is shipped for any draft.
    hot = replace(QWEN_CODE, temperature=0.7)
    _, skipped, _ = candidates(hot)
    assert "give --draft-alpha" in skipped["draft_model"]


def test_the_answer_names_the_model_as_given(cli: typer.Typer, runner: CliRunner) -> None:
    given = "meta-llama/Meta-Llama-3.1-8B-Instruct"
    args = ["recommend", "--model", given, "--gpu", "h100-sxm", "--task", "summarisation"]
    result = runner.invoke(cli, [*args, "--concurrency", "2", "--requests", "20"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"{given} on 1x h100-sxm, summarisation")
