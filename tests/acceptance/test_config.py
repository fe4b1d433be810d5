"""The scenario key ``speculation.acceptance`` and the factory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from sim.acceptance.config import AcceptanceConfig, build_acceptance_model
from sim.acceptance.models import PositionalAcceptanceModel
from sim.acceptance.plan import Proposal
from sim.acceptance.traces import TraceReplayModel
from sim.errors import ScenarioError


def _build(config: AcceptanceConfig | None, method: str = "eagle3", model: str = "llama-3.1-8b",
           dataset: str | None = "mt-bench", temperature: float = 0.0):  # fmt: skip
    return build_acceptance_model(config, method, model, dataset, temperature, Path("."))


@pytest.mark.parametrize(
    "values",
    [{}, {"alpha": 0.5, "profile": "x"}, {"alpha": 1.0}, {"per_position": []},
     {"mean_acceptance_length": 0.5}, {"alpha": 0.5, "unknown": 1},
     {"alpha": 0.5, "trace_field": "acc_ngram"}, {"per_position": [0.5, 1.5]}],
)  # fmt: skip
def test_invalid_configs_are_rejected(values: dict) -> None:
    with pytest.raises(ValidationError):
        AcceptanceConfig(**values)


def test_each_source_builds_a_model() -> None:
    proposal = Proposal.chain(3)
    assert _build(AcceptanceConfig(alpha=0.6)).expected_acceptance_length(proposal) == (
        pytest.approx(1 + 0.6 + 0.36 + 0.216)
    )
    per_position = _build(AcceptanceConfig(per_position=(0.8, 0.5)))
    assert per_position.expected_acceptance_length(proposal) == pytest.approx(1 + 0.8 + 0.4 + 0.2)
    target = _build(AcceptanceConfig(mean_acceptance_length=2.8))
    assert target.expected_acceptance_length(proposal) == pytest.approx(2.8)
    profile = _build(AcceptanceConfig(profile="eagle3/llama-3.1-8b/mt-bench"))
    assert profile.describe()["citation"]
    trace = _build(AcceptanceConfig(trace="llama-3.1-8b/gsm8k"), method="ngram")
    assert isinstance(trace, TraceReplayModel) and trace.field == "acc_ngram"


def test_errors_name_the_key() -> None:
    with pytest.raises(ScenarioError, match=r"speculation\.acceptance\.mean_acceptance_length"):
        _build(AcceptanceConfig(mean_acceptance_length=9.0)).plan(
            np.array([10]), Proposal.chain(3), np.random.default_rng(0)
        )
    with pytest.raises(ScenarioError, match=r"speculation\.acceptance\.profile: .*shipped"):
        _build(AcceptanceConfig(profile="eagle3/nope/mt-bench"))
    with pytest.raises(ScenarioError, match=r"measured temperatures: \[0\.0\]"):
        _build(AcceptanceConfig(profile="eagle/llama-3.1-8b/mt-bench"), temperature=0.7)
    with pytest.raises(ScenarioError, match=r"speculation\.acceptance\.trace"):
        _build(AcceptanceConfig(trace="missing/file.jsonl"))


def test_defaults_prefer_traces_then_profiles_then_ask() -> None:
    assert isinstance(_build(None, dataset="ShareGPT"), TraceReplayModel)
    profile = _build(None, method="eagle2", model="vicuna-7b", dataset="MT-bench", temperature=1.0)
    assert isinstance(profile, PositionalAcceptanceModel)
    assert profile.describe()["profile"] == "eagle/vicuna-7b/mt-bench"
    with pytest.raises(ScenarioError, match="set one of alpha"):
        _build(None, method="medusa", model="qwen3-8b", dataset="chat")
