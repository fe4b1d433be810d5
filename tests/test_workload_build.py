"""build_workload: named streams, closed loops, trace replay and empirical lengths from files."""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.errors import ScenarioError
from sim.random_streams import RandomStreams
from sim.workload import Workload, WorkloadConfig, build_workload
from sim.workload.trace import TraceRequests, take_requests

SHARED_TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "workload-traces"

TRACE_CSV = """arrived_at,num_prefill_tokens,num_decode_tokens
10.0,100,5
10.5,200,0
12.0,300,7
13.0,5000,9
"""


def _build(data: dict[str, Any], seed: int = 0, base_dir: Path = Path(".")) -> Workload:
    return build_workload(WorkloadConfig.model_validate(data), RandomStreams(seed), base_dir)


def _write_trace(tmp_path: Path, text: str = TRACE_CSV) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return path


def test_open_loop_workload_has_one_sorted_arrival_per_request() -> None:
    workload = _build({"num_requests": 10_000})
    assert workload.num_requests == 10_000
    assert workload.arrival_at_s is not None
    assert workload.arrival_at_s.dtype == np.float64
    assert np.all(np.diff(workload.arrival_at_s) >= 0) and workload.arrival_at_s[0] > 0
    assert workload.prompt_tokens.dtype == np.int64 and workload.output_tokens.min() >= 1
    assert workload.concurrency is None and workload.think_time_s == 0.0
    assert workload.analytic_means() == {
        "mean_prompt_tokens": 512.0,
        "mean_output_tokens": pytest.approx(256.0),
        "mean_gap_s": 0.25,
        "request_rate_per_s": 4.0,
    }
    with pytest.raises(ValueError, match="read-only"):
        workload.prompt_tokens[0] = 1


def test_same_seed_gives_identical_arrays_and_another_seed_does_not() -> None:
    data = {"arrival": {"process": "gamma", "rate_per_s": 3.0, "cv": 1.5}}
    first, again, other = _build(data, seed=1), _build(data, seed=1), _build(data, seed=2)
    assert first.arrival_at_s is not None and other.arrival_at_s is not None
    np.testing.assert_array_equal(first.arrival_at_s, again.arrival_at_s)
    np.testing.assert_array_equal(first.output_tokens, again.output_tokens)
    assert not np.array_equal(first.arrival_at_s, other.arrival_at_s)
    assert not np.array_equal(first.output_tokens, other.output_tokens)


def test_changing_the_rate_leaves_lengths_unchanged_and_vice_versa() -> None:
    slow = _build({"arrival": {"process": "poisson", "rate_per_s": 1.0}})
    fast = _build({"arrival": {"process": "poisson", "rate_per_s": 8.0}})
    np.testing.assert_array_equal(slow.output_tokens, fast.output_tokens)
    assert slow.arrival_at_s is not None and fast.arrival_at_s is not None
    np.testing.assert_allclose(fast.arrival_at_s, slow.arrival_at_s / 8.0)
    longer = _build(
        {
            "arrival": {"process": "poisson", "rate_per_s": 1.0},
            "output_tokens": {"distribution": "lognormal", "mean": 900, "sigma": 0.6},
        }
    )
    assert longer.arrival_at_s is not None
    np.testing.assert_array_equal(longer.arrival_at_s, slow.arrival_at_s)
    np.testing.assert_array_equal(longer.prompt_tokens, slow.prompt_tokens)
    assert not np.array_equal(longer.output_tokens, slow.output_tokens)


def test_prompt_and_output_streams_are_independent() -> None:
    lengths = {"distribution": "uniform", "low": 1, "high": 10_000}
    workload = _build({"num_requests": 20_000, "prompt_tokens": lengths, "output_tokens": lengths})
    correlation = np.corrcoef(workload.prompt_tokens, workload.output_tokens)[0, 1]
    assert abs(correlation) < 4 / np.sqrt(20_000)


def test_closed_loop_and_static_batch_have_no_arrival_times() -> None:
    workload = _build(
        {
            "num_requests": 64,
            "arrival": {"process": "closed_loop", "concurrency": 8, "think_time_s": 2},
        }
    )
    assert workload.arrival_at_s is None and workload.concurrency == 8
    assert workload.think_time_s == 2.0
    assert workload.analytic_means()["mean_gap_s"] is None
    static_batch = _build(
        {"num_requests": 32, "arrival": {"process": "closed_loop", "concurrency": 32}}
    )
    assert static_batch.concurrency == static_batch.num_requests == 32


def test_caps_clip_every_length() -> None:
    workload = _build(
        {
            "num_requests": 5000,
            "output_tokens": {"distribution": "lognormal", "mean": 256, "sigma": 1.0},
            "max_prompt_tokens": 300,
            "max_output_tokens": 128,
        }
    )
    assert workload.prompt_tokens.max() == 300
    assert workload.output_tokens.max() == 128
    assert workload.analytic_means()["mean_output_tokens"] < 128


def test_csv_trace_replays_times_from_zero_and_lengths_in_order(tmp_path: Path) -> None:
    _write_trace(tmp_path)
    workload = _build(
        {"num_requests": 3, "arrival": {"process": "trace", "path": "trace.csv"}}, base_dir=tmp_path
    )
    assert workload.arrival_at_s is not None
    np.testing.assert_array_equal(workload.arrival_at_s, [0.0, 0.5, 2.0])
    assert workload.prompt_tokens.tolist() == [100, 200, 300]
    assert workload.output_tokens.tolist() == [5, 1, 7]  # the recorded 0 is clipped to 1
    assert workload.analytic_means()["mean_gap_s"] == pytest.approx(1.0)
    assert workload.analytic_means()["mean_prompt_tokens"] == pytest.approx(200.0)


def test_trace_lengths_can_be_replaced_and_capped(tmp_path: Path) -> None:
    _write_trace(tmp_path)
    workload = _build(
        {
            "num_requests": 4,
            "arrival": {"process": "trace", "path": "trace.csv"},
            "output_tokens": {"distribution": "fixed", "value": 77},
            "max_prompt_tokens": 1000,
        },
        base_dir=tmp_path,
    )
    assert workload.prompt_tokens.tolist() == [100, 200, 300, 1000]
    assert workload.output_tokens.tolist() == [77] * 4


def test_asking_for_more_requests_than_the_trace_holds_fails_unless_looping(
    tmp_path: Path,
) -> None:
    _write_trace(tmp_path)
    with pytest.raises(ScenarioError, match=r"5 requested but .* holds 4.*loop: true"):
        _build(
            {"num_requests": 5, "arrival": {"process": "trace", "path": "trace.csv"}},
            base_dir=tmp_path,
        )
    looped = _build(
        {"num_requests": 6, "arrival": {"process": "trace", "path": "trace.csv", "loop": True}},
        base_dir=tmp_path,
    )
    # Period = 3 s span + one mean gap (1 s): the second pass starts at 4 s.
    assert looped.arrival_at_s is not None
    np.testing.assert_allclose(looped.arrival_at_s, [0.0, 0.5, 2.0, 3.0, 4.0, 4.5])
    assert looped.prompt_tokens.tolist() == [100, 200, 300, 5000, 100, 200]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("arrived_at,num_prefill_tokens\n0,5\n", "missing column.*num_decode_tokens"),
        (TRACE_CSV.replace("12.0,", "9.0,"), "line 4: arrived_at decreases"),
        (TRACE_CSV.replace("300,7", "abc,7"), "line 4: column 'num_prefill_tokens'"),
        (TRACE_CSV.replace("300,7", "-3,7"), "non-negative integers, got -3.0"),
        ("arrived_at,num_prefill_tokens,num_decode_tokens\n", "no requests"),
    ],
)
def test_malformed_csv_traces_name_the_file_and_line(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _write_trace(tmp_path, text)
    with pytest.raises(ScenarioError, match=message) as caught:
        _build({"num_requests": 1, "arrival": {"process": "trace", "path": str(path)}})
    assert str(path) in str(caught.value)


def test_a_missing_trace_file_is_a_scenario_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no such file"):
        _build({"arrival": {"process": "trace", "path": "absent.csv"}}, base_dir=tmp_path)


@dataclass(frozen=True)
class _FakeReplay:
    arrival_at_s: np.ndarray | None
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    request_rate_per_s: float | None
    source: str


def _install_replay(monkeypatch: pytest.MonkeyPatch, replay: _FakeReplay) -> list[Path]:
    """Stand in for sim.artifacts.replay so the JSON path is tested without the vLLM parsers."""
    calls: list[Path] = []

    def read_replay_requests(path: Path) -> _FakeReplay:
        calls.append(path)
        return replay

    module = types.ModuleType("sim.artifacts.replay")
    module.read_replay_requests = read_replay_requests  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sim.artifacts.replay", module)
    return calls


@pytest.mark.parametrize(
    ("arrival_at_s", "rate_per_s", "expected_gap_s"),
    [(np.array([0.0, 0.2, 0.6, 0.9]), None, 0.3), (None, 5.0, 0.2), (None, None, 0.0)],
)
def test_json_traces_go_through_the_replay_reader(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    arrival_at_s: np.ndarray | None,
    rate_per_s: float | None,
    expected_gap_s: float,
) -> None:
    replay = _FakeReplay(
        arrival_at_s, np.array([10, 20, 30, 40]), np.array([1, 2, 3, 4]), rate_per_s, "bench.json"
    )
    calls = _install_replay(monkeypatch, replay)
    (tmp_path / "bench.json").write_text("{}")
    workload = _build(
        {"num_requests": 4, "arrival": {"process": "trace", "path": "bench.json"}},
        base_dir=tmp_path,
    )
    assert calls == [tmp_path / "bench.json"]
    assert workload.prompt_tokens.tolist() == [10, 20, 30, 40]
    assert workload.arrival_at_s is not None
    assert workload.analytic_means()["mean_gap_s"] == pytest.approx(expected_gap_s)
    if rate_per_s is None and arrival_at_s is None:
        assert workload.arrival_at_s.tolist() == [0.0] * 4
        assert workload.analytic_means()["request_rate_per_s"] is None


def test_empirical_lengths_from_a_csv_column_and_a_json_list(tmp_path: Path) -> None:
    _write_trace(tmp_path)
    (tmp_path / "lengths.json").write_text(json.dumps([3, 3, 9]))
    (tmp_path / "keyed.json").write_text(json.dumps({"output_len": [4, 8]}))
    workload = _build(
        {
            "num_requests": 20_000,
            "prompt_tokens": {
                "distribution": "empirical",
                "path": "trace.csv",
                "column": "num_prefill_tokens",
            },
            "output_tokens": {"distribution": "empirical", "path": "lengths.json"},
        },
        base_dir=tmp_path,
    )
    assert set(workload.prompt_tokens.tolist()) == {100, 200, 300, 5000}
    assert workload.analytic_means()["mean_prompt_tokens"] == pytest.approx(1400.0)
    assert set(workload.output_tokens.tolist()) == {3, 9}
    share_of_nines = float(np.mean(workload.output_tokens == 9))
    assert abs(share_of_nines - 1 / 3) < 4 * np.sqrt(2 / 9 / 20_000)
    keyed = _build(
        {
            "output_tokens": {
                "distribution": "empirical",
                "path": "keyed.json",
                "column": "output_len",
            }
        },
        base_dir=tmp_path,
    )
    assert set(keyed.output_tokens.tolist()) == {4, 8}


@pytest.mark.parametrize(
    ("lengths", "message"),
    [
        ({"path": "trace.csv"}, "prompt_tokens.column: a CSV file"),
        ({"path": "trace.csv", "column": "tokens"}, "missing column"),
        ({"path": "bad.json"}, "expected a JSON list of numbers"),
        ({"path": "absent.json"}, "prompt_tokens.path: no such file"),
    ],
)
def test_empirical_file_errors_name_the_key_or_file(
    tmp_path: Path, lengths: dict[str, str], message: str
) -> None:
    _write_trace(tmp_path)
    (tmp_path / "bad.json").write_text(json.dumps(["a", 1]))
    with pytest.raises(ScenarioError, match=message):
        _build({"prompt_tokens": {"distribution": "empirical", **lengths}}, base_dir=tmp_path)


@pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="shared workload traces not present")
def test_splitwise_conversation_trace_replays_whole() -> None:
    path = SHARED_TRACES / "splitwise_conv.csv"
    frame = pd.read_csv(path)
    workload = _build(
        {"num_requests": len(frame), "arrival": {"process": "trace", "path": str(path)}}
    )
    assert workload.arrival_at_s is not None
    np.testing.assert_allclose(
        workload.arrival_at_s, frame["arrived_at"] - frame["arrived_at"].iloc[0]
    )
    np.testing.assert_array_equal(workload.prompt_tokens, frame["num_prefill_tokens"].clip(lower=1))
    np.testing.assert_array_equal(workload.output_tokens, frame["num_decode_tokens"].clip(lower=1))
    span_s = frame["arrived_at"].iloc[-1] - frame["arrived_at"].iloc[0]
    assert workload.analytic_means()["request_rate_per_s"] == pytest.approx(
        (len(frame) - 1) / span_s
    )
    with pytest.raises(ScenarioError, match="holds 19366"):
        _build({"num_requests": len(frame) + 1, "arrival": {"process": "trace", "path": str(path)}})


@given(
    gaps_s=st.lists(st.floats(0.0, 100.0), min_size=1, max_size=30),
    num_repeats=st.integers(1, 4),
)
def test_looping_a_trace_keeps_order_lengths_and_rate(
    gaps_s: list[float], num_repeats: int
) -> None:
    times_s = np.cumsum([0.0, *gaps_s])
    num_recorded = len(times_s)
    recorded = TraceRequests(
        prompt_tokens=np.arange(1, num_recorded + 1),
        output_tokens=np.full(num_recorded, 3),
        arrival_at_s=times_s,
        request_rate_per_s=None,
        source="trace",
    )
    looped = take_requests(recorded, num_recorded * num_repeats, loop=True)
    assert looped.arrival_at_s is not None
    assert np.all(np.diff(looped.arrival_at_s) >= 0)
    assert looped.prompt_tokens.tolist() == list(range(1, num_recorded + 1)) * num_repeats
    # n·R requests span R periods minus one mean gap: the mean gap is the recorded one.
    mean_gap_s = times_s[-1] / (num_recorded - 1)
    looped_mean_gap_s = looped.arrival_at_s[-1] / (len(looped.arrival_at_s) - 1)
    assert looped_mean_gap_s == pytest.approx(mean_gap_s, rel=1e-9, abs=1e-12)


def test_a_trace_read_once_replays_as_the_file_does_without_reading_it_again(
    tmp_path: Path,
) -> None:
    # A replay fit reads its artifact once and hands the requests to every simulation: the
    # workload built from them must be the one the file gives, and the file is not opened again.
    from sim.workload.trace import read_trace

    path = _write_trace(tmp_path)
    config = {"num_requests": 6, "arrival": {"process": "trace", "path": "trace.csv", "loop": True}}
    from_file = _build(config, base_dir=tmp_path)
    trace = read_trace(path)
    path.unlink()
    handed = build_workload(
        WorkloadConfig.model_validate(config), RandomStreams(0), tmp_path, trace=trace
    )
    np.testing.assert_array_equal(handed.arrival_at_s, from_file.arrival_at_s)  # type: ignore[arg-type]
    np.testing.assert_array_equal(handed.prompt_tokens, from_file.prompt_tokens)
    np.testing.assert_array_equal(handed.output_tokens, from_file.output_tokens)
    with pytest.raises(ValueError, match="not a trace"):
        build_workload(
            WorkloadConfig.model_validate({"num_requests": 3}), RandomStreams(0), tmp_path, trace
        )
