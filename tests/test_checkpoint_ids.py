"""Quantized checkpoints named by their Hugging Face id: the catalogue model they resolve to, the
weight format they set, and the scenarios that contradict them refused with one message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from sim.catalogue import get_model, model_names
from sim.model_names import (
    QUANTIZED_CHECKPOINTS,
    hf_model_id,
    quantized_checkpoint,
    resolve_model_name,
    stated_weights,
)
from sim.precision import WEIGHT_FORMATS
from sim.scenario import Scenario
from sim.validation.points import load_points
from sim.validation.scenarios import inexpressible_reason, try_build
from specsim.cli import app

SCOUT_FP8 = "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic"
QWEN_FP8 = "Qwen/Qwen3-235B-A22B-FP8"


@pytest.mark.parametrize(
    ("name", "model", "weights"),
    [
        (SCOUT_FP8, "llama-4-scout", "fp8"),
        (SCOUT_FP8.lower(), "llama-4-scout", "fp8"),
        ("Llama-4-Scout-17B-16E-Instruct-FP8-dynamic", "llama-4-scout", "fp8"),
        (QWEN_FP8, "qwen3-235b-a22b", "fp8"),
        ("Qwen/Qwen3-235B-A22B", "qwen3-235b-a22b", None),
        ("01-ai/Yi-34B", "yi-34b", None),
        ("Qwen/Qwen3-1.7B", "qwen3-1.7b", None),
    ],
)
def test_an_id_resolves_to_its_model_and_states_its_format(
    name: str, model: str, weights: str | None
) -> None:
    assert resolve_model_name(name) == model
    assert stated_weights(name) == weights


def test_every_checkpoint_names_a_catalogue_model_a_known_format_and_its_fp8_scaling() -> None:
    """The catalogue entry's FP8 block size picks the expert kernel (sim/moe.py: block-scaled or
    per-channel), so it must be the checkpoint's own."""
    for model_id, checkpoint in QUANTIZED_CHECKPOINTS.items():
        assert checkpoint.model in model_names(), model_id
        assert checkpoint.weights in WEIGHT_FORMATS, model_id
        spec = get_model(checkpoint.model).spec
        assert spec.fp8_weight_block_size == checkpoint.fp8_block_size, model_id
        # The id is another repository than the model's own.
        assert model_id != hf_model_id(checkpoint.model)


def test_an_unknown_quantized_looking_id_resolves_to_nothing() -> None:
    assert quantized_checkpoint("someone/Llama-4-Scout-17B-16E-Instruct-FP8") is None
    assert resolve_model_name("someone/Llama-4-Scout-17B-16E-Instruct-FP8") is None


def _scenario(**values: object) -> Scenario:
    base: dict[str, object] = {"hardware": {"gpu": "h200", "num_gpus": 4}, "model": QWEN_FP8}
    return Scenario.model_validate({**base, **values})


def test_the_id_sets_the_weight_format_and_keeps_the_other_precision_keys() -> None:
    scenario = _scenario(precision={"kv_cache": "fp8"})
    assert scenario.model == "qwen3-235b-a22b"
    assert (scenario.precision.weights, scenario.precision.kv_cache) == ("fp8", "fp8")
    # The same format given explicitly agrees with the id.
    assert _scenario(precision={"weights": "fp8"}).precision.weights == "fp8"


def test_a_conflicting_explicit_precision_is_refused_naming_the_key() -> None:
    with pytest.raises(ValidationError) as caught:
        _scenario(precision={"weights": "bf16"})
    message = str(caught.value)
    assert "precision.weights: bf16 conflicts with model" in message
    assert "'Qwen/Qwen3-235B-A22B'" in message  # the unquantized id to name instead


def test_a_quantized_draft_is_refused() -> None:
    with pytest.raises(ValidationError, match="a draft model runs in bf16"):
        Scenario.model_validate(
            {
                "model": "qwen3-32b",
                "speculation": {"method": "draft_model", "draft_model": QWEN_FP8},
            }
        )


def test_the_cli_refuses_the_conflict_with_exit_2_and_no_traceback(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model": SCOUT_FP8,
                "precision": {"weights": "int4-awq"},
                "hardware": {"gpu": "h100-sxm", "num_gpus": 2},
            }
        )
    )
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "precision.weights: int4-awq conflicts" in result.output
    assert "Traceback" not in result.output


def test_the_rows_that_name_quantized_ids_are_expressible() -> None:
    """The BLIS Llama-4-Scout rows and the AIConfigurator Qwen3-235B-A22B-FP8 rows name their
    checkpoints; they now build a scenario at the checkpoint's format."""
    rows = [p for p in load_points() if p.model in (SCOUT_FP8, QWEN_FP8)]
    assert len(rows) == 16
    for point in rows:
        assert inexpressible_reason(point) == ""
        scenario, reason = try_build(point)
        assert reason == "" and scenario is not None
        assert scenario.precision.weights == "fp8"
        assert scenario.model == QUANTIZED_CHECKPOINTS[point.model].model


def test_recommend_refuses_a_quantized_id_it_would_price_in_bf16() -> None:
    result = CliRunner().invoke(
        app, ["recommend", "--model", QWEN_FP8, "--gpu", "h200", "--task", "chat"]
    )
    assert result.exit_code == 2
    assert "recommend prices bf16 weights only" in result.output


def test_calibrate_refuses_a_quantized_id_it_would_replay_in_bf16(tmp_path: Path) -> None:
    # The replay prices bf16 weights: an FP8 checkpoint's run fitted as bf16 would put the
    # format's difference into the fitted overheads, so the id is refused before any fitting.
    artifact = tmp_path / "bench.json"
    artifact.write_text("{}")
    out = tmp_path / "profile.yaml"
    result = CliRunner().invoke(
        app,
        ["calibrate", str(artifact), "--out", str(out), "--gpu", "h100-sxm", "--model", SCOUT_FP8],
    )
    assert result.exit_code == 2
    assert "calibrate replays runs with bf16 weights only" in result.output
    assert SCOUT_FP8 in result.output and "llama-4-scout" in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("given", "model", "weights", "num_gpus"),
    [
        (SCOUT_FP8, "llama-4-scout", "fp8", 2),
        # Another id of the same entry than the one the catalogue writes for it.
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b", "bf16", 1),
    ],
)
def test_outputs_name_the_model_as_given(
    tmp_path: Path, given: str, model: str, weights: str, num_gpus: int
) -> None:
    """vLLM's bench records the id the server served (``model_id``, ``tokenizer_id``); so do the
    run folder's vllm_bench.json, its saved scenario and its report, while the run prices the
    catalogue entry at the id's precision, and the saved scenario validates to the same run."""
    document = {
        "model": given,
        "hardware": {"gpu": "h100-sxm", "num_gpus": num_gpus},
        "workload": {"num_requests": 20},
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(document))
    folder = tmp_path / "run"
    ran = CliRunner().invoke(app, ["run", str(tmp_path / "s.yaml"), "--out", str(folder)])
    assert ran.exit_code == 0, ran.output
    bench = json.loads((folder / "vllm_bench.json").read_text())
    assert bench["model_id"] == bench["tokenizer_id"] == given
    saved = yaml.safe_load((folder / "scenario.resolved.yaml").read_text())
    assert saved["model"] == given
    del saved["derived"]
    again = Scenario.model_validate(saved)
    assert (again.model, again.precision.weights) == (model, weights)
    assert again.model_as_given == given
    reported = CliRunner().invoke(app, ["report", str(folder)])
    assert reported.exit_code == 0, reported.output
    assert f"Scenario `default`: {given} on" in (folder / "report.md").read_text()


@pytest.mark.parametrize("written", ["llama-3.1-8b", "Llama-3.1-8B"])
def test_a_catalogue_name_stays_the_catalogue_name(written: str) -> None:
    # Written in any case, it is the entry's name, which vllm_bench.json turns into its id.
    scenario = Scenario.model_validate({"model": written})
    assert scenario.model_as_given == "llama-3.1-8b"
    assert scenario.model_dump()["model"] == "llama-3.1-8b"
