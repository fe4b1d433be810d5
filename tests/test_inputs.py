"""Hostile and careless input: bounded YAML, strict types, text encodings and physical ranges.

Each case ends in one ScenarioError (exit 2 on the command line) naming the file or key path and,
where the text has one, the line: never a traceback, a hang or memory that grows without bound.
"""

from __future__ import annotations

import resource
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.errors import CalibrationError, ScenarioError
from sim.inputs import MAX_DEPTH, MAX_NODES, InputError, decode_text, load_yaml
from sim.scenario import load_scenario
from specsim.cli import app


def _billion_laughs(levels: int = 9, fan: int = 9) -> str:
    """The classic entity-expansion document: ``fan ** levels`` strings from a few hundred bytes."""
    lines = ["a0: &a0 [" + ", ".join(['"lol"'] * fan) + "]"]
    for level in range(1, levels):
        refs = ", ".join([f"*a{level - 1}"] * fan)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return "\n".join(lines) + "\n"


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_an_alias_bomb_is_refused_quickly_with_its_line() -> None:
    text = _billion_laughs()  # 9**9 = 387M strings once expanded
    before = _peak_rss_mb()
    started = time.perf_counter()
    with pytest.raises(InputError, match=r"bomb.yaml: line \d+: .*more than 1,000,000 nodes"):
        load_yaml(text, "bomb.yaml")
    assert time.perf_counter() - started < 5.0
    # Expanding it would take tens of gigabytes; refusing it takes nothing measurable.
    assert _peak_rss_mb() - before < 200


def test_aliases_that_stay_small_are_kept() -> None:
    text = "base: &b {x: 1, y: [1, 2]}\nc: *b\nd:\n  <<: *b\n  x: 2\n"
    assert load_yaml(text, "ok.yaml") == {
        "base": {"x": 1, "y": [1, 2]},
        "c": {"x": 1, "y": [1, 2]},
        "d": {"x": 2, "y": [1, 2]},
    }
    # A document of exactly MAX_NODES expanded nodes is the bound, not past it.
    assert MAX_NODES >= 1000


@pytest.mark.parametrize("text", ["[" * 3000, "a: " + "[" * 3000 + "]" * 3000, "{a: " * 500])
def test_deep_nesting_is_refused_not_a_recursion_error(text: str) -> None:
    with pytest.raises(InputError, match=rf"line 1: .*deeper than {MAX_DEPTH}"):
        load_yaml(text, "deep.yaml")


def test_a_recursive_alias_is_refused() -> None:
    with pytest.raises(InputError, match="contains it"):
        load_yaml("a: &x [1, *x]\n", "loop.yaml")


def test_a_repeated_key_names_both_lines() -> None:
    text = "name: one\nworkload:\n  num_requests: 10\n  num_requests: 20\n"
    with pytest.raises(InputError, match=r"line 4: .*'num_requests' given twice \(lines 3 and 4\)"):
        load_yaml(text, "dup.yaml")


def test_floats_without_a_dot_are_numbers() -> None:
    # YAML 1.1 reads 1e-3 as text; the strict schema would then refuse a number the user wrote.
    assert load_yaml("a: [1e-3, 2E+2, -1e1]", "x") == {"a": [0.001, 200.0, -10.0]}


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        ("name: x\n".encode("utf-16"), "UTF-16"),
        ("name: x\n".encode("utf-32"), "UTF-32"),
        (b"name: x\n\x00\x01\x02", r"line 2: a NUL byte"),
        (b"name: x\nseed: \xff\n", r"line 2: byte 0xff is not UTF-8"),
    ],
)
def test_text_that_is_not_utf8_is_named(raw: bytes, match: str) -> None:
    with pytest.raises(InputError, match=match):
        decode_text(raw, "f.yaml")


def test_a_utf8_byte_order_mark_is_accepted() -> None:
    assert decode_text(b"\xef\xbb\xbfname: x\n", "f.yaml") == "name: x\n"


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        ("name: x\n".encode("utf-16"), "UTF-16"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "binary"),
        (b"name: caf\xe9\n", r"line 1: byte 0xe9"),
        (_billion_laughs().encode(), "nodes"),
        (b"workload:\n  num_requests: 5\n  num_requests: 6\n", "given twice"),
    ],
)
def test_scenario_files_that_are_not_utf8_yaml_are_scenario_errors(
    tmp_path: Path, raw: bytes, match: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(raw)
    with pytest.raises(ScenarioError, match=match):
        load_scenario(path)


@pytest.mark.parametrize(
    ("override", "match"),
    [
        # YAML's yes/true are booleans: a count or a number refuses them.
        ("workload.max_prompt_tokens=yes", r"workload\.max_prompt_tokens: must be a whole number"),
        ("hardware.num_gpus=true", r"hardware\.num_gpus: must be a whole number"),
        ("workload.arrival.rate_per_s=on", r"rate_per_s: must be a number"),
        ("seed='7'", r"seed: .*valid integer"),
        ("speculation.tree.shape=" + "[" * 3000, "deeper than"),
    ],
)
def test_overrides_are_strict(override: str, match: str) -> None:
    with pytest.raises(ScenarioError, match=match):
        load_scenario(None, [override])


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("engine.step_overhead_s=1e308", r"engine\.step_overhead_s: must be <= 1 s, got 1e\+308 s"),
        ("engine.per_token_overhead_s=-1e-3", r"must be >= 0 s"),
        ("workload.arrival.rate_per_s=1e-300", r"rate_per_s: must be >= 1e-06 /s"),
        ("workload.arrival.rate_per_s=1e12", r"rate_per_s: must be <= 1e\+06 /s"),
        (
            "workload.output_tokens={distribution: lognormal, mean: 1e308, sigma: 0.5}",
            r"output_tokens\.mean: must be <= 1e\+07 tokens",
        ),
        (
            "workload.output_tokens={distribution: lognormal, mean: 200, sigma: 1e308}",
            r"output_tokens\.sigma: must be <= 3",
        ),
        ("workload.prompt_tokens={distribution: fixed, value: 0}", r"value: must be >= 1 tokens"),
        ("workload.temperature=50", r"temperature: must be <= 2"),
        ("speculation={method: eagle3, tree: {shape: [64, 64, 64]}}", "1024 nodes"),
        ("slo.ttft_p99_ms=1e300", r"<= 8\.64e\+07 ms"),
        ("speculation.acceptance.mean_acceptance_length=1e9", r"must be <= 33"),
    ],
)
def test_physical_quantities_have_ranges_with_units(override: str, match: str) -> None:
    with pytest.raises(ScenarioError, match=match):
        load_scenario(None, [override])


def test_a_key_typo_suggests_the_key() -> None:
    typo = r"workload\.arival: unknown key \(did you mean 'arrival'"
    with pytest.raises(ScenarioError, match=typo):
        load_scenario(None, ["workload.arival.rate_per_s=3"])
    typo = r"engine\.step_overhead: unknown key .*'step_overhead_s'"
    with pytest.raises(ScenarioError, match=typo):
        load_scenario(None, ["engine.step_overhead=0.001"])


def test_set_without_equals_says_what_is_wrong() -> None:
    # ``--set key 8`` makes ``8`` the scenario argument; the message is about the --set.
    result = CliRunner().invoke(app, ["run", "--set", "workload.num_requests", "8"])
    assert result.exit_code == 2
    assert "expected KEY.PATH=VALUE" in result.output
    assert "--set workload.num_requests=8" in result.output
    assert "no such scenario file" not in result.output


def test_an_empty_scenario_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing yet\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["run", str(path)])
    assert result.exit_code == 2
    assert "empty" in result.output


def test_acceptance_traces_out_of_range_name_the_line(tmp_path: Path) -> None:
    from sim.acceptance.traces import load_jsonl_traces

    path = tmp_path / "traces.jsonl"
    path.write_text('{"acc_eagle": {"acc_len": [1, 2]}}\n{"acc_eagle": {"acc_len": [1e400]}}\n')
    with pytest.raises(CalibrationError, match=r"traces\.jsonl:2: "):
        load_jsonl_traces(path, "acc_eagle")
    path.write_text('{"acc_eagle": {"acc_len": [1, 0]}}\n')
    with pytest.raises(CalibrationError, match=r"traces\.jsonl:1: .*holds 0"):
        load_jsonl_traces(path, "acc_eagle")
    path.write_bytes('{"acc_eagle": {"acc_len": [1]}}\n'.encode("utf-16"))
    with pytest.raises(CalibrationError, match="UTF-16"):
        load_jsonl_traces(path, "acc_eagle")


def test_a_trace_csv_in_latin1_is_named(tmp_path: Path) -> None:
    from sim.workload.trace import read_trace

    path = tmp_path / "trace.csv"
    path.write_bytes(b"arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\n# caf\xe9\n")
    with pytest.raises(ScenarioError, match=r"trace\.csv: line 3: byte 0xe9"):
        read_trace(path)


def test_simulated_times_that_would_lose_precision_are_refused(tmp_path: Path) -> None:
    # 10,000 requests at 1e-6 /s span 1e10 s: float64 spacing there is 2**-19 s, past 1 us.
    overrides = ["workload.num_requests=10000", "workload.arrival.rate_per_s=1e-6"]
    with pytest.raises(ScenarioError, match=r"workload: the arrivals alone span ~1e\+10 s"):
        load_scenario(None, overrides)
    load_scenario(None, ["workload.num_requests=1000", "workload.arrival.rate_per_s=1e-6"])
    from sim.workload.trace import read_trace

    trace = tmp_path / "trace.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\n1e301,1,1\n")
    with pytest.raises(ScenarioError, match="lose microsecond precision"):
        read_trace(trace)


def test_an_engine_profile_is_held_to_the_schema_bounds(tmp_path: Path) -> None:
    from sim.calibrated_profiles import load_engine_profile

    path = tmp_path / "p.yaml"
    path.write_text(
        "provenance: {}\nengine: {step_overhead_s: 1.0e308, per_sequence_overhead_s: 0.0}\n"
    )
    with pytest.raises(ScenarioError, match=r"step_overhead_s must be a number in \[0, 1\] s"):
        load_engine_profile(str(path), tmp_path)
