"""Step records written as the run goes give what the run held in memory gives, bit for bit.

A run given a folder hands each full chunk of steps to a file writer and computes its summary
from the file (:mod:`sim.step_stats`): the files must be the bytes the in-memory run writes, the
summary and ``vllm_bench.json`` the same values, whatever the chunk sizes; and a run that fails
or is killed must leave no partial file under the final name.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import results, step_stats
from sim.engine.recorder import STEP_COLUMNS, StepRecorder
from sim.metrics import summarize, weighted_percentiles
from sim.results import STEPS_FILE, STEPS_PARQUET_FILE, StepStreamWriter, save_result
from sim.run import ScenarioResult, build_simulation, execute, run_scenario
from sim.scenario import Scenario, load_scenario
from sim.step_stats import MemorySteps, StepFile, select_ranks

ROOT = Path(__file__).resolve().parents[1]
EAGLE3 = ROOT / "scenarios" / "spec-chat-eagle3.yaml"
#: 300 chat requests with EAGLE-3, a steady window and a goodput SLO: every summary path.
OVERRIDES = [
    "workload.num_requests=300",
    "measurement.window=steady",
    "measurement.warmup_fraction=0.1",
    "measurement.cooldown_fraction=0.1",
    "measurement.goodput={ttft: 500, tpot: 50}",
    "measurement.percentile_metrics=[ttft, tpot, itl, e2el]",
    "measurement.metric_percentiles=[50, 90, 99, 99.9]",
]


def _scenario() -> tuple[Scenario, Path]:
    return load_scenario(EAGLE3, OVERRIDES)


def _timeless(document: dict[str, Any]) -> dict[str, Any]:
    """A summary or vllm_bench document without its wall time and date."""
    return {k: v for k, v in document.items() if k not in ("wall_time_s", "date")}


@pytest.fixture(scope="module")
def in_memory() -> ScenarioResult:
    scenario, base_dir = _scenario()
    return run_scenario(scenario, base_dir)


@pytest.mark.parametrize("steps_name", [STEPS_PARQUET_FILE, STEPS_FILE])
def test_streamed_outputs_equal_the_in_memory_write(
    in_memory: ScenarioResult,
    steps_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(results, "steps_file_name", lambda: steps_name)
    held, streamed = tmp_path / "held", tmp_path / "streamed"
    save_result(in_memory, held)
    scenario, base_dir = _scenario()
    result = run_scenario(scenario, base_dir, steps_to=streamed)
    assert result.steps_file == streamed / steps_name and result.steps == {}
    save_result(result, streamed)
    assert sorted(p.name for p in streamed.iterdir()) == sorted(p.name for p in held.iterdir())
    for name in (steps_name, "requests.csv", "scenario.resolved.yaml"):
        assert (streamed / name).read_bytes() == (held / name).read_bytes(), name
    for name in ("summary.json", "vllm_bench.json"):
        a, b = (json.loads((folder / name).read_text()) for folder in (held, streamed))
        assert _timeless(a) == _timeless(b), name
    assert _timeless(result.summary.to_dict()) == _timeless(in_memory.summary.to_dict())


def test_itl_by_selection_equals_the_sorted_sample(in_memory: ScenarioResult) -> None:
    """The streamed ITL percentiles are exactly numpy's over the expanded sample (the old
    in-memory computation); the exactly rounded mean agrees with numpy's pairwise sum to
    rounding."""
    steps, (irregular, irregular_at) = in_memory.steps, in_memory.irregular_itl
    start, end = in_memory.summary.measurement_window_s
    inside = (steps["start_at_s"] >= start) & (steps["start_at_s"] < end)
    late = (irregular_at >= start) & (irregular_at <= end)
    values = np.concatenate([steps["duration_s"][inside], irregular[late]])
    weights = np.concatenate([steps["num_regular_itl"][inside], np.ones(int(late.sum()), int)])
    ms = values * 1e3
    expected = weighted_percentiles(ms, weights, (50, 90, 99))
    got = in_memory.summary.itl_ms
    assert [got.p50, got.p90, got.p99] == expected
    assert got.mean == pytest.approx(float((ms * weights).sum() / weights.sum()), rel=1e-14)


def _split(total: int, sizes: list[int]) -> list[tuple[int, int]]:
    """Consecutive ``[start, stop)`` pieces of ``total`` rows, cycling through ``sizes``."""
    pieces, start, i = [], 0, 0
    while start < total:
        stop = min(total, start + sizes[i % len(sizes)])
        pieces.append((start, stop))
        start, i = stop, i + 1
    return pieces


class _ListSink:
    def __init__(self) -> None:
        self.chunks: list[dict[str, np.ndarray]] = []

    def write(self, columns: Any) -> None:
        self.chunks.append(dict(columns))


@settings(max_examples=40, deadline=None)
@given(
    chunk_rows=st.integers(1, 4000),
    append_sizes=st.lists(st.integers(1, 300), min_size=1, max_size=5),
    read_rows=st.integers(16, 5000),
)
def test_chunk_boundaries_change_nothing(
    in_memory: ScenarioResult, chunk_rows: int, append_sizes: list[int], read_rows: int
) -> None:
    """Whatever the appends, the chunks handed on and the chunks read back, the recorder's
    chunks join into the held columns, and the summary read in chunks is the same."""
    steps = in_memory.steps
    total = len(steps["start_at_s"])
    sink = _ListSink()
    recorder = StepRecorder()
    recorder.stream_to(sink, chunk_rows)
    for start, stop in _split(total, append_sizes):
        rows: dict[str, object] = {name: column[start:stop] for name, column in steps.items()}
        if stop - start == 1:
            rows["spec_k"] = int(steps["spec_k"][start])  # a scalar, as the core passes
        recorder.append(rows)
    recorder.flush()
    assert len(recorder) == total
    assert all(len(c["start_at_s"]) == chunk_rows for c in sink.chunks[:-1])
    for name in STEP_COLUMNS:
        joined = np.concatenate([c[name] for c in sink.chunks])
        assert joined.dtype == steps[name].dtype and np.array_equal(joined, steps[name]), name
    scenario, _ = _scenario()
    measurement = scenario.measurement
    irregular, irregular_at = in_memory.irregular_itl
    options = {"trim_fractions": measurement.trim_fractions, "goodput_ms": measurement.goodput}
    again = summarize(
        in_memory.requests,
        MemorySteps(steps, read_rows),
        irregular,
        irregular_at,
        measurement.warmup_requests,
        in_memory.memory.num_blocks,
        scenario=scenario.name,
        method=scenario.speculation.method,
        seed=scenario.seed,
        prefix_caching=bool(in_memory.resolved_scenario["engine"]["enable_prefix_caching"]),
        **options,
    )
    # The same summary but for what the run adds after summarising: its wall time and version.
    assert again.wall_time_s is None and in_memory.summary.wall_time_s is not None
    assert again == replace(in_memory.summary, wall_time_s=None, specsim_version=None)


@settings(max_examples=10, deadline=None)
@given(chunk_rows=st.integers(1, 3000), read_rows=st.integers(64, 3000))
def test_a_written_file_reads_back_in_any_chunks(
    in_memory: ScenarioResult, chunk_rows: int, read_rows: int, tmp_path_factory: Any
) -> None:
    folder = tmp_path_factory.mktemp("steps")
    steps = in_memory.steps
    for name in (STEPS_PARQUET_FILE, STEPS_FILE):
        recorder = StepRecorder()
        with StepStreamWriter(folder / name) as writer:
            recorder.stream_to(writer, chunk_rows)
            recorder.append(dict(steps))
            recorder.flush()
        source = StepFile(folder / name, read_rows)
        assert len(source) == len(steps["start_at_s"])
        chunks = list(source.chunks(tuple(STEP_COLUMNS)))
        assert all(len(c["start_at_s"]) <= read_rows for c in chunks)
        for column in STEP_COLUMNS:
            read = np.concatenate([c[column] for c in chunks])
            assert np.array_equal(read, steps[column]), (name, column)


def test_a_failed_run_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flushes = []
    flush = StepRecorder.flush

    def failing_flush(self: StepRecorder) -> None:
        flush(self)
        flushes.append(len(self))
        if len(flushes) == 3:
            raise RuntimeError("disk full")

    monkeypatch.setattr(StepRecorder, "flush", failing_flush)
    scenario, base_dir = _scenario()
    # Chunks of 64 steps: the third is handed on mid-run, and the run fails there.
    with pytest.raises(RuntimeError, match="disk full"):
        execute(build_simulation(scenario, base_dir), steps_to=tmp_path, chunk_rows=64)
    assert len(flushes) == 3
    assert list(tmp_path.iterdir()) == []


def test_a_killed_run_leaves_no_partial_file(tmp_path: Path) -> None:
    """kill -9 mid-run: the chunks written so far sit under a hidden temporary name only."""
    out = tmp_path / "run"
    command = [
        sys.executable, "-m", "specsim", "run", str(EAGLE3), "--out", str(out),
        "--set", "workload.num_requests=200000", "--yes",
    ]  # fmt: skip
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90
        partial: list[Path] = []
        while time.monotonic() < deadline and not partial:
            time.sleep(0.25)
            if child.poll() is not None:
                stderr = child.stderr.read().decode() if child.stderr else ""
                raise AssertionError(f"the run ended before it was killed: {stderr}")
            partial = (
                [p for p in out.glob(".steps.*") if p.stat().st_size > 0] if out.exists() else []
            )
        assert partial, "the run never wrote a chunk"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=10)
    assert not (out / STEPS_PARQUET_FILE).exists() and not (out / STEPS_FILE).exists()
    assert not (out / "summary.json").exists()


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(
        st.one_of(
            st.floats(allow_nan=False, allow_infinity=False),
            st.sampled_from([0.0, -0.0, 0.25, 1e-3, 5e-324]),
        ),
        min_size=1,
        max_size=200,
    ),
    collect_limit=st.integers(1, 64),
    data=st.data(),
)
def test_select_ranks_finds_the_sorted_values(
    values: list[float], collect_limit: int, data: Any
) -> None:
    """Small collect limits force several histogram passes before the samples are sorted."""
    v = np.array(values)
    w = np.array(data.draw(st.lists(st.integers(1, 4), min_size=len(v), max_size=len(v))))
    step = data.draw(st.integers(1, 50))
    expanded = np.sort(np.repeat(v, w))
    ranks = sorted(set(data.draw(st.lists(st.integers(0, len(expanded) - 1), min_size=1))))

    def chunks() -> Any:
        for start in range(0, len(v), step):
            yield v[start : start + step], w[start : start + step]

    found = select_ranks(chunks, ranks, collect_limit)
    assert all(found[r] == expanded[r] for r in ranks)


@settings(max_examples=60, deadline=None)
@given(
    durations=st.lists(st.floats(1e-6, 10.0), min_size=1, max_size=300),
    irregular=st.lists(st.floats(1e-6, 100.0), max_size=40),
    data=st.data(),
)
def test_itl_percentiles_held_or_streamed_agree(
    durations: list[float], irregular: list[float], data: Any
) -> None:
    """The ITL percentiles from every sample held and one selection (a sweep point's or a
    probe's sample) are those of the streamed passes (a million-request run's), bit for bit,
    and both are the order statistics' linear interpolation (weighted_percentiles)."""
    n = len(durations)
    weights = data.draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
    steps = {
        "start_at_s": np.arange(n, dtype=np.float64),
        "duration_s": np.array(durations),
        "num_regular_itl": np.array(weights, dtype=np.int32),
    }
    sample = step_stats.ItlSample(
        MemorySteps(steps, 7), 0.0, float(n), np.array(irregular), np.zeros(len(irregular))
    )
    total = sample.total()
    if total == 0:
        return
    qs = (50.0, 90.0, 99.0, 99.9)
    held = sample.percentiles_ms(total, qs)
    saved = step_stats.EXPAND_LIMIT
    step_stats.EXPAND_LIMIT = 0
    try:
        streamed = sample.percentiles_ms(total, qs)
    finally:
        step_stats.EXPAND_LIMIT = saved
    assert held == streamed
    values = np.concatenate([np.array(durations), np.array(irregular)]) * 1e3
    counts = np.concatenate([np.array(weights), np.ones(len(irregular))])
    expected = weighted_percentiles(values, counts, qs)
    np.testing.assert_allclose(held, expected, rtol=1e-12)


_FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 0.1, 1e16, 1e-5, 123456789.123, 2.0**60, 5e-324]),
)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 60),
    rows=st.integers(1, 25),
    data=st.data(),
)
def test_requests_csv_is_pandas_bytes(n: int, rows: int, data: Any, tmp_path_factory: Any) -> None:
    """``requests.csv`` formatted without a frame is what ``requests_frame(...).to_csv`` writes,
    byte for byte, chunk sizes and all: floats of every kind (NaN empty, infinities, signed
    zeros, subnormals, large and small magnitudes), ints of each width, a fleet's replica."""
    floats = st.lists(_FLOATS, min_size=n, max_size=n)
    ints = st.lists(st.integers(-(2**40), 2**40), min_size=n, max_size=n)
    requests = {
        "prompt_tokens": np.array(data.draw(ints), dtype=np.int64),
        "arrival_at_s": np.array(data.draw(floats)),
        "first_token_at_s": np.array(data.draw(floats)),
        "finished_at_s": np.array(data.draw(floats)),
        "replica": np.array(data.draw(ints), dtype=np.int64).astype(np.int32),
    }
    result = ScenarioResult.__new__(ScenarioResult)
    result.requests = requests
    path = tmp_path_factory.mktemp("csv") / "requests.csv"
    results.write_requests(path, result, rows)
    expected = results.requests_frame(result).to_csv(index=False, lineterminator="\n")
    assert path.read_text(encoding="utf-8") == expected
