"""Running scenarios end to end: determinism, common random numbers, and bad input.

A run is a pure function of its scenario: the same seed gives identical records, a different seed
different ones, and every drafting strategy sees the same arrivals and lengths. A user's mistake
is a ScenarioError or CatalogueError naming the key path and the value, and the command line turns
it into one message with exit code 2, never a traceback.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sim.errors import CatalogueError, InvariantError, ScenarioError, SpecsimError
from sim.run import ScenarioResult, build_simulation, run_scenario
from sim.scenario import load_scenario, validate_document
from specsim.cli import app

REPO = Path(__file__).resolve().parents[1]


def _document(**overrides: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "seed": 11,
        "workload": {
            "num_requests": 50,
            "arrival": {"process": "poisson", "rate_per_s": 20.0},
            "prompt_tokens": {"distribution": "lognormal", "mean": 300, "sigma": 0.8},
            "output_tokens": {"distribution": "lognormal", "mean": 120, "sigma": 0.6},
            "max_prompt_tokens": 4000,
            "max_output_tokens": 1000,
        },
    }
    for key, value in overrides.items():
        document[key] = {**document.get(key, {}), **value} if isinstance(value, dict) else value
    return document


def _run(document: dict[str, Any]) -> ScenarioResult:
    return run_scenario(validate_document(document, "test"), Path("."))


def _same_records(a: ScenarioResult, b: ScenarioResult) -> bool:
    tables = [(a.requests, b.requests), (a.steps, b.steps)]
    return all(
        x.keys() == y.keys() and all(np.array_equal(x[k], y[k], equal_nan=True) for k in x)
        for x, y in tables
    )


# --- determinism ------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["none", "eagle3"])
def test_same_seed_same_records(method: str) -> None:
    document = _document(speculation={"method": method})
    first, second = _run(document), _run(document)
    assert _same_records(first, second)
    assert replace(first.summary, wall_time_s=None) == replace(second.summary, wall_time_s=None)


def test_different_seeds_differ() -> None:
    a, b = _run(_document(seed=1)), _run(_document(seed=2))
    assert not np.array_equal(a.requests["arrival_at_s"], b.requests["arrival_at_s"])
    assert not np.array_equal(a.requests["prompt_tokens"], b.requests["prompt_tokens"])
    assert not _same_records(a, b)


SPECULATION_VARIANTS = [
    {"method": "none"},
    {"method": "eagle3", "num_speculative_tokens": 2},
    {"method": "eagle3", "num_speculative_tokens": 5},
    {"method": "eagle", "tree": {"shape": [2, 2, 2]}},
    {"method": "draft_model", "draft_model": "llama-3.2-1b", "acceptance": {"alpha": 0.6}},
    {"method": "ngram", "acceptance": {"alpha": 0.3}},
]


def test_every_strategy_sees_the_same_arrivals_and_lengths() -> None:
    results = [_run(_document(speculation=variant)) for variant in SPECULATION_VARIANTS]
    base = results[0].requests
    for variant, result in zip(SPECULATION_VARIANTS, results, strict=True):
        for column in ("arrival_at_s", "prompt_tokens", "output_tokens"):
            assert np.array_equal(result.requests[column], base[column]), (variant, column)
    # ... and the strategies do differ where they should.
    drafted = [int(result.requests["num_drafted"].sum()) for result in results]
    assert drafted[0] == 0 and all(d > 0 for d in drafted[1:])
    assert len({result.summary.sim_duration_s for result in results}) == len(results)


def test_engine_settings_do_not_change_the_workload() -> None:
    a = _run(_document())
    b = _run(_document(engine={"max_num_seqs": 4, "block_size": 32, "kv_rollback": "scratch"}))
    for column in ("arrival_at_s", "prompt_tokens", "output_tokens"):
        assert np.array_equal(a.requests[column], b.requests[column])
    assert not np.array_equal(a.requests["finished_at_s"], b.requests["finished_at_s"])


def test_same_acceptance_stream_for_the_same_strategy_under_other_engines() -> None:
    # The acceptance plan is drawn from its own stream: a scheduling change keeps every request's
    # verify-step acceptances (on an ample pool nobody is preempted, so the counts match).
    spec = {"method": "eagle3", "num_speculative_tokens": 4}
    a = _run(_document(speculation=spec))
    b = _run(_document(speculation=spec, engine={"max_num_seqs": 3}))
    assert a.summary.num_preemptions == b.summary.num_preemptions == 0
    for column in ("num_decode_steps", "num_drafted", "num_accepted"):
        assert np.array_equal(a.requests[column], b.requests[column]), column


# --- bad input ---------------------------------------------------------------------------------
def _write(tmp_path: Path, document: Any, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document) if not isinstance(document, str) else document)
    return path


BAD_DOCUMENTS = [
    ({"foo": 1}, "foo", "1"),
    ({"workload": {"arrival": {"process": "poisson", "rate": 3}}}, "workload.arrival.rate", "3"),
    ({"engine": {"max_num_seqs": "many"}}, "engine.max_num_seqs", "'many'"),
    ({"engine": {"block_size": 0}}, "engine.block_size", "0"),
    (
        {"workload": {"arrival": {"process": "poisson", "rate_per_s": -3}}},
        "workload.arrival.rate_per_s",
        "-3",
    ),
    ({"hardware": {"num_gpus": 0}}, "hardware.num_gpus", "0"),
    ({"hardware": {"gpu": "h900"}}, "hardware.gpu", "'h900'"),
    ({"model": "llama-9"}, "model", "'llama-9'"),
    ({"speculation": {"method": "magic"}}, "speculation.method", "'magic'"),
    ({"seed": -1}, "seed", "-1"),
    ({"engine": {"gpu_memory_utilization": 1.5}}, "engine.gpu_memory_utilization", "1.5"),
    (
        {"workload": {"output_tokens": {"distribution": "uniform", "low": 9, "high": 3}}},
        "workload.output_tokens",
        "high",
    ),
]


@pytest.mark.parametrize(("document", "key_path", "value"), BAD_DOCUMENTS)
def test_invalid_scenarios_name_the_key_path_and_value(
    tmp_path: Path, document: dict[str, Any], key_path: str, value: str
) -> None:
    path = _write(tmp_path, document)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    message = str(caught.value)
    assert str(path) in message
    line = next(line for line in message.splitlines() if line.strip().startswith(key_path + ":"))
    assert value in line


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = _write(tmp_path, {"seed": -1, "hardware": {"num_gpus": 0}, "bogus": True})
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    message = str(caught.value)
    for key_path in ("seed:", "hardware.num_gpus:", "bogus:"):
        assert key_path in message


def test_overrides_are_validated_like_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, {"workload": {"arrival": {"process": "poisson"}}}, "ok.yaml")
    load_scenario(path, ["workload.arrival.rate_per_s=2"])
    with pytest.raises(ScenarioError, match=r"workload\.arrival\.rate_per_s: .*got -2"):
        load_scenario(path, ["workload.arrival.rate_per_s=-2"])
    with pytest.raises(ScenarioError, match=r"KEY\.PATH=VALUE"):
        load_scenario(path, ["no-equals-sign"])


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("a: [1, 2\n", "line"),
        ("- 1\n- 2\n", "mapping"),
        # An empty file is a mistake (a truncated copy, the wrong file), not the defaults.
        ("", "empty"),
        ("# only a comment\n", "empty"),
    ],
)
def test_files_that_are_not_scenario_mappings(tmp_path: Path, text: str, match: str) -> None:
    path = _write(tmp_path, text, "odd.yaml")
    with pytest.raises(ScenarioError, match=match):
        load_scenario(path)


def test_a_missing_file_is_a_scenario_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no such scenario file"):
        load_scenario(tmp_path / "absent.yaml")


def test_a_model_that_does_not_fit_names_the_model_gpu_and_key(tmp_path: Path) -> None:
    path = _write(tmp_path, {"model": "llama-3.1-70b", "hardware": {"num_gpus": 1}})
    scenario, base_dir = load_scenario(path)
    with pytest.raises(CatalogueError) as caught:
        build_simulation(scenario, base_dir)
    message = str(caught.value)
    for part in ("llama-3.1-70b", "h100-sxm", "TP 1", "hardware.num_gpus"):
        assert part in message


def test_the_pool_must_hold_the_longest_request() -> None:
    document = _document(
        engine={"gpu_memory_utilization": 0.25},
        workload={"output_tokens": {"distribution": "fixed", "value": 60_000}},
    )
    document["workload"]["max_output_tokens"] = 100_000
    with pytest.raises(ScenarioError, match="workload"):
        build_simulation(validate_document(document, "long"), Path("."))


# Values of every type at keys of every kind: loading, building and running either succeed or
# raise one of specsim's own errors, never anything else.
KEY_PATHS = [
    ("seed",),
    ("hardware", "gpu"),
    ("hardware", "num_gpus"),
    ("model",),
    ("engine", "max_num_seqs"),
    ("engine", "max_num_batched_tokens"),
    ("engine", "block_size"),
    ("engine", "gpu_memory_utilization"),
    ("engine", "chunked_prefill"),
    ("speculation", "method"),
    ("speculation", "num_speculative_tokens"),
    ("workload", "num_requests"),
    ("workload", "arrival"),
    ("workload", "prompt_tokens"),
    ("measurement", "warmup_requests"),
    ("slo",),
]
ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(-2, 5), max_size=3),
    st.dictionaries(st.text(max_size=6), st.integers(-2, 5), max_size=2),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes=st.lists(st.tuples(st.sampled_from(KEY_PATHS), ANY_VALUE), max_size=3))
def test_any_value_anywhere_fails_only_with_specsim_errors(
    changes: list[tuple[tuple[str, ...], Any]],
) -> None:
    document: dict[str, Any] = {"workload": {"num_requests": 5}}
    for path, value in changes:
        node = document
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    try:
        scenario = validate_document(document, "fuzz")
        if scenario.workload.num_requests > 20:
            return  # a valid but long run: its size is another test's concern
        result = run_scenario(scenario, Path("."), check_invariants=True)
    except SpecsimError as exc:
        assert not isinstance(exc, InvariantError), exc
        return
    assert result.summary.num_completed == result.summary.num_requests


def test_an_absurd_request_count_is_a_scenario_error() -> None:
    document = {"workload": {"num_requests": 10**16}}
    with pytest.raises(ScenarioError, match=r"workload\.num_requests"):
        build_simulation(validate_document(document, "huge"), Path("."))


# --- the command line --------------------------------------------------------------------------
def test_cli_reports_a_bad_scenario_with_exit_code_2(tmp_path: Path) -> None:
    path = _write(tmp_path, {"workload": {"arrival": {"process": "poisson", "rate_per_s": -3}}})
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "workload.arrival.rate_per_s" in result.output
    assert "-3" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_cli_reports_a_model_that_does_not_fit_with_exit_code_2(tmp_path: Path) -> None:
    path = _write(tmp_path, {"model": "llama-3.1-70b"})
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "llama-3.1-70b" in result.output and "Traceback" not in result.output


def test_python_dash_m_sim_exits_2_without_a_traceback(tmp_path: Path) -> None:
    path = _write(tmp_path, {"hardware": {"num_gpus": 0}, "engine": {"max_num_seqs": "x"}})
    completed = subprocess.run(
        [sys.executable, "-m", "specsim", "run", str(path), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert completed.returncode == 2
    assert "Traceback" not in completed.stderr
    assert "hardware.num_gpus" in completed.stderr
    assert "engine.max_num_seqs" in completed.stderr
