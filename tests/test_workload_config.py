"""The ``workload:`` schema: defaults, discriminated unions, and errors that name the key path."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from sim.workload import (
    FixedLengthConfig,
    GammaArrivalConfig,
    LognormalLengthConfig,
    PoissonArrivalConfig,
    TraceLengthConfig,
    WorkloadConfig,
)


def _error_locations(data: dict[str, Any]) -> list[tuple[str | int, ...]]:
    with pytest.raises(ValidationError) as caught:
        WorkloadConfig.model_validate(data)
    return [error["loc"] for error in caught.value.errors()]


def test_every_key_has_a_default() -> None:
    config = WorkloadConfig()
    assert config.num_requests == 1000
    assert config.arrival == PoissonArrivalConfig(process="poisson", rate_per_s=4.0)
    assert config.prompt_tokens == FixedLengthConfig(distribution="fixed", value=512)
    assert config.output_tokens == LognormalLengthConfig(
        distribution="lognormal", mean=256, sigma=0.6
    )
    assert config.max_prompt_tokens is None and config.max_output_tokens is None
    assert config.temperature == 0.0
    assert config.dataset == "mt-bench"
    assert WorkloadConfig.model_validate({}) == config


def test_the_design_example_validates() -> None:
    text = """
    num_requests: 1000
    arrival: {process: gamma, rate_per_s: 4.0, cv: 2.0}
    prompt_tokens: {distribution: uniform, low: 100, high: 900}
    output_tokens: {distribution: lognormal, mean: 256, sigma: 0.6}
    temperature: 0.7
    dataset: sharegpt
    max_output_tokens: 1024
    """
    config = WorkloadConfig.model_validate(yaml.safe_load(text))
    assert config.arrival == GammaArrivalConfig(process="gamma", rate_per_s=4.0, cv=2.0)
    assert config.max_output_tokens == 1024


def test_trace_arrival_defaults_to_the_recorded_lengths() -> None:
    config = WorkloadConfig.model_validate({"arrival": {"process": "trace", "path": "t.csv"}})
    assert isinstance(config.prompt_tokens, TraceLengthConfig)
    assert isinstance(config.output_tokens, TraceLengthConfig)
    explicit = WorkloadConfig.model_validate(
        {
            "arrival": {"process": "trace", "path": "t.csv"},
            "output_tokens": {"distribution": "fixed", "value": 64},
        }
    )
    assert isinstance(explicit.prompt_tokens, TraceLengthConfig)
    assert explicit.output_tokens == FixedLengthConfig(distribution="fixed", value=64)


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"arrival": {"process": "closed_loop", "concurrency": 8, "think_time_s": 0.5}},
        {"arrival": {"process": "trace", "path": "runs/t.csv", "loop": True}},
        {"prompt_tokens": {"distribution": "empirical", "path": "p.json"}},
    ],
)
def test_a_dumped_config_validates_back_to_itself(data: dict[str, Any]) -> None:
    config = WorkloadConfig.model_validate(data)
    assert WorkloadConfig.model_validate(config.model_dump(mode="json")) == config


_INVALID = [
    ("num_request", {"num_request": 10}),
    ("arrival.poisson.rate_per_sec", {"arrival": {"process": "poisson", "rate_per_sec": 4}}),
    ("num_requests", {"num_requests": "many"}),
    ("num_requests", {"num_requests": 0}),
    ("arrival.poisson.rate_per_s", {"arrival": {"process": "poisson", "rate_per_s": -3}}),
    ("arrival.poisson.rate_per_s", {"arrival": {"process": "poisson", "rate_per_s": "inf"}}),
    ("arrival.gamma.cv", {"arrival": {"process": "gamma", "cv": 0}}),
    ("arrival", {"arrival": {"process": "fifo"}}),
    ("arrival.poisson.concurrency", {"arrival": {"concurrency": 4}}),
    ("arrival.closed_loop.concurrency", {"arrival": {"process": "closed_loop", "concurrency": 0}}),
    ("arrival.trace.path", {"arrival": {"process": "trace"}}),
    ("prompt_tokens.fixed.value", {"prompt_tokens": {"distribution": "fixed", "value": 0}}),
    ("prompt_tokens.fixed.value", {"prompt_tokens": {"distribution": "fixed", "value": 2.5}}),
    ("output_tokens.lognormal.sigma", {"output_tokens": {"distribution": "lognormal", "mean": 9}}),
    ("output_tokens.uniform", {"output_tokens": {"distribution": "uniform", "low": 9, "high": 3}}),
    ("max_output_tokens", {"max_output_tokens": -1}),
    ("temperature", {"temperature": -0.1}),
]


@pytest.mark.parametrize(("location", "data"), _INVALID)
def test_invalid_values_are_reported_at_their_key_path(location: str, data: dict[str, Any]) -> None:
    expected = tuple(location.split("."))
    locations = _error_locations(data)
    assert expected in locations, locations


def test_negative_rate_message_names_the_value() -> None:
    with pytest.raises(ValidationError, match=r"greater than") as caught:
        WorkloadConfig.model_validate({"arrival": {"process": "poisson", "rate_per_s": -3}})
    assert caught.value.errors()[0]["input"] == -3


def test_trace_lengths_need_a_trace_arrival() -> None:
    with pytest.raises(ValidationError, match="prompt_tokens: distribution 'trace' needs"):
        WorkloadConfig.model_validate({"prompt_tokens": {"distribution": "trace"}})


def test_closed_loop_cannot_have_more_clients_than_requests() -> None:
    with pytest.raises(ValidationError, match="concurrency: 16 clients exceed num_requests 8"):
        WorkloadConfig.model_validate(
            {"num_requests": 8, "arrival": {"process": "closed_loop", "concurrency": 16}}
        )
    static_batch = WorkloadConfig.model_validate(
        {"num_requests": 16, "arrival": {"process": "closed_loop", "concurrency": 16}}
    )
    assert static_batch.arrival.process == "closed_loop"


def test_the_config_is_frozen() -> None:
    config = WorkloadConfig()
    with pytest.raises(ValidationError):
        config.num_requests = 5


def test_errors_inside_an_embedding_scenario_start_with_workload() -> None:
    class Scenario(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        workload: WorkloadConfig = WorkloadConfig()

    with pytest.raises(ValidationError) as caught:
        Scenario.model_validate({"workload": {"arrival": {"process": "gamma", "rate_per_s": 0}}})
    assert caught.value.errors()[0]["loc"] == ("workload", "arrival", "gamma", "rate_per_s")


def test_an_arrival_without_a_process_is_the_default_poisson() -> None:
    # ``--set workload.arrival.rate_per_s=8`` on a file with no arrival section.
    config = WorkloadConfig.model_validate({"arrival": {"rate_per_s": 8.0}})
    assert config.arrival == PoissonArrivalConfig(process="poisson", rate_per_s=8.0)
