"""The command line in a vLLM user's words: options, result format, names, help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import typer
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]


def test_run_prints_the_vllm_keys_and_writes_them(
    cli: typer.Typer, runner: CliRunner, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    args = ["run", "--request-rate", "inf", "--max-concurrency", "4", "--num-prompts", "40"]
    result = runner.invoke(cli, [*args, "--result-format", "vllm", "--out", str(out)])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed["request_rate"] == "inf" and printed["max_concurrency"] == 4
    # A closed loop of 4 clients never has more than 4 requests in flight.
    assert printed["max_concurrent_requests"] <= 4
    saved = json.loads((out / "vllm_bench.json").read_text())
    assert saved["mean_tpot_ms"] == printed["mean_tpot_ms"]


def test_bad_bench_options_exit_2_with_the_option_named(
    cli: typer.Typer, runner: CliRunner
) -> None:
    result = runner.invoke(cli, ["run", "--request-rate", "fast"])
    assert result.exit_code == 2
    assert "--request-rate" in result.output and "Traceback" not in result.output
    result = runner.invoke(cli, ["run", "--goodput", "ttft=5"])
    assert result.exit_code == 2 and "--goodput" in result.output


def test_catalogue_lists_models_with_their_hugging_face_ids(
    cli: typer.Typer, runner: CliRunner
) -> None:
    result = runner.invoke(cli, ["catalogue", "models", "--json"])
    assert result.exit_code == 0, result.output
    models = {row["name"]: row for row in json.loads(result.stdout)["models"]}
    assert "meta-llama/Llama-3.1-8B-Instruct" in models["llama-3.1-8b"]["hf_ids"]
    assert all(row["source"] for row in models.values())
    for section in ("gpus", "presets", "methods"):
        assert runner.invoke(cli, ["catalogue", section]).exit_code == 0
    assert runner.invoke(cli, ["catalogue", "cars"]).exit_code == 2


def _specsim(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m specsim ARGS`` from the repository root, as a user runs it."""
    env = {**os.environ, "COLUMNS": "120"}
    return subprocess.run(
        [sys.executable, "-m", "specsim", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_version_short_help_and_plain_metavars() -> None:
    version = _specsim("--version")
    assert version.returncode == 0 and version.stdout.startswith("specsim ")
    helped = _specsim("run", "-h")
    assert helped.returncode == 0
    assert "<list[str]>" not in helped.stdout and "KEY.PATH=VALUE" in helped.stdout
    assert "--request-rate" in helped.stdout
    assert "Write the schema" in _specsim("schema", "-h").stdout
