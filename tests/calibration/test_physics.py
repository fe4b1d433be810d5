"""Artifacts whose values no real run can produce are refused before a fit, naming the file."""

# ruff: noqa: E501  (the table of damaged samples reads best one case a line)

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.artifacts import parse_runs
from sim.errors import CalibrationError
from specsim.cli import app

_spec = importlib.util.spec_from_file_location(
    "parser_samples", Path(__file__).with_name("conftest.py")
)
assert _spec is not None and _spec.loader is not None
_samples = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_samples)
SAMPLES: dict[str, str] = _samples.SAMPLES


def _write(tmp_path: Path, kind: str, text: str) -> Path:
    return Path(_samples.write_artifact(tmp_path, kind, text))


def test_the_samples_themselves_pass(tmp_path: Path) -> None:
    for kind, text in SAMPLES.items():
        folder = tmp_path / kind
        folder.mkdir()
        parse_runs(_write(folder, kind, text), kind)


@pytest.mark.parametrize(
    ("kind", "old", "new", "match"),
    [
        # Latencies: zero or negative TTFT (scipy's "Residuals are not finite" before).
        ("vllm_bench_json", '"ttfts": [0.1, 0.0, 0.2]', '"ttfts": [-0.1, 0.0, 0.2]', "request 0: TTFT"),
        ("vllm_bench_json", '"ttfts": [0.1, 0.0, 0.2]', '"ttfts": [0.0, 0.0, 0.2]', "must be > 0"),
        ("vllm_bench_json", '[[0.01, 0.02], [], [0.03]]', '[[0.01, -0.02], [], [0.03]]', "gap"),
        # Accepted tokens beyond the drafted ones.
        ("vllm_bench_json", '"spec_decode_accepted_tokens": 15', '"spec_decode_accepted_tokens": 45', "exceed 30 drafted"),
        ("vllm_log", "Accepted: 20 tokens", "Accepted: 90 tokens", "exceed 60"),
        # tau below 1, or not finite.
        ("vllm_bench_stdout", "Acceptance length:                       2.20", "Acceptance length:                       -2.00", "outside"),
        ("vllm_log", "Mean acceptance length: 2.00", "Mean acceptance length: nan", None),
        # A Prometheus counter that goes down between scrapes.
        ("prometheus", 'num_draft_tokens_total{engine="0",model_name="m"} 900.0', 'num_draft_tokens_total{engine="0",model_name="m"} 100.0', "never goes down|exceed"),
        # Acceptance rates outside [0, 1].
        ("vllm_bench_json", '[0.7, 0.5, 0.3]', '[0.7, 1.5, 0.3]', r"\[0, 1\]"),
    ],
)  # fmt: skip
def test_impossible_values_are_refused_naming_the_file(
    tmp_path: Path, kind: str, old: str, new: str, match: str | None
) -> None:
    assert old in SAMPLES[kind]
    path = _write(tmp_path, kind, SAMPLES[kind].replace(old, new))
    if match is None:
        # A value the parser cannot read as a number is its own clean error, or left out.
        try:
            parse_runs(path, kind)
        except CalibrationError as error:
            assert str(path.name) in str(error)
        return
    with pytest.raises(CalibrationError, match=match) as caught:
        parse_runs(path, kind)
    assert path.name in str(caught.value)


def test_tau_above_k_plus_one_is_refused(tmp_path: Path) -> None:
    from sim.artifacts.physics import check_artifact
    from sim.artifacts.schema import ParsedArtifact, RunMetadata, SpecDecodeSummary

    artifact = ParsedArtifact(
        kind="vllm_log",
        metadata=RunMetadata("run.log", "0" * 64, num_speculative_tokens=3),
        spec_decode=SpecDecodeSummary("vllm-log", mean_acceptance_length=4.0),
    )
    assert check_artifact(artifact) is artifact  # k + 1 = 4 is the most a step emits
    too_long = ParsedArtifact(
        kind="vllm_log",
        metadata=RunMetadata("run.log", "0" * 64, num_speculative_tokens=3),
        spec_decode=SpecDecodeSummary("vllm-log", mean_acceptance_length=1e9),
    )
    with pytest.raises(CalibrationError, match=r"run\.log: .*\[1, k \+ 1\] = \[1, 4\]"):
        check_artifact(too_long)


def test_calibrate_refuses_instead_of_writing_an_impossible_profile(tmp_path: Path) -> None:
    text = SAMPLES["vllm_log"].replace("Accepted: 20 tokens", "Accepted: 90 tokens")
    path = _write(tmp_path, "vllm_log", text)
    out = tmp_path / "profile.yaml"
    result = CliRunner().invoke(app, ["calibrate", str(path), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "exceed" in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_an_artifact_in_utf16_is_named(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_bytes(SAMPLES["vllm_bench_json"].encode("utf-16"))
    with pytest.raises(CalibrationError, match="UTF-16"):
        parse_runs(path, "vllm_bench_json")
