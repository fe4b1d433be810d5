"""Parser logic on small inline samples: runs everywhere, with no data beside the checkout."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from sim.artifacts import KINDS, detect_kind, parse_artifact, parse_runs
from sim.artifacts.prometheus import parse_prometheus_scrapes
from sim.artifacts.replay import read_replay_requests
from sim.artifacts.schema import requests_to_dataframe
from sim.errors import CalibrationError

Writer = Callable[[Path, str, str], Path]


@pytest.mark.parametrize("kind", KINDS)
def test_every_sample_is_detected_as_its_kind(
    kind: str, samples: dict[str, str], write: Writer, tmp_path: Path
) -> None:
    path = write(tmp_path, kind, samples[kind])
    assert detect_kind(path) == kind
    assert parse_runs(path)[0].kind == kind


def test_bench_json_handles_inf_rate_failures_start_times_and_spec_block(
    samples: dict[str, str], write: Writer, tmp_path: Path
) -> None:
    artifact = parse_artifact(write(tmp_path, "vllm_bench_json", samples["vllm_bench_json"]))
    requests = artifact.requests
    assert requests is not None and requests.arrival_at_s is not None
    assert artifact.metadata.request_rate_per_s is None  # "inf"
    np.testing.assert_allclose(requests.arrival_at_s, [0.5, 0.0, 1.0])  # perf-counter rebased
    assert requests.errors == (None, "boom", None)
    assert math.isnan(requests.ttft_s[1]) and math.isnan(requests.e2e_s[1])  # type: ignore[index]
    np.testing.assert_allclose(requests.e2e_s[[0, 2]], [0.13, 0.23])  # type: ignore[index]
    spec = artifact.spec_decode
    assert spec is not None
    assert spec.draft_acceptance_rate == pytest.approx(0.5)  # 50 % in the file
    assert spec.per_position_acceptance_rate == (0.7, 0.5, 0.3)
    assert artifact.metadata.num_speculative_tokens == 3
    assert artifact.metadata.engine_era == "vllm>=0.15"
    frame = requests_to_dataframe(artifact)
    assert list(frame["num_chunks"]) == [3, 0, 2]


def test_bench_json_lines_typo_and_infinity(tmp_path: Path) -> None:
    old = {"date": "x", "model_id": "m", "request_rate": float("inf"), "burstiness": 1.0}
    old.update({"duration": 1.0, "completed": 1, "request_goodput:": 1.5})
    new = {"model_id": "m", "request_rate": 2.5, "duration": 1.0, "completed": 1}
    path = tmp_path / "appended.json"
    path.write_text(json.dumps(old) + "\n" + json.dumps(new) + "\n", encoding="utf-8")
    first, second = parse_runs(path, "vllm_bench_json")
    assert first.metadata.request_rate_per_s is None  # Infinity literal
    assert first.aggregates["request_goodput"] == 1.5  # read through the "request_goodput:" typo
    assert "0.6.4-0.9.0" in str(first.metadata.engine_era)
    assert second.metadata.request_rate_per_s == 2.5
    with pytest.raises(CalibrationError, match="found 2"):
        parse_artifact(path)


def test_2024_bench_json_has_its_e2el_mean_and_median_swapped_back(tmp_path: Path) -> None:
    # e2e per request = ttft + sum(itls) = 1, 2 and 6 s: mean 3000 ms, median 2000 ms.
    result = {"model_id": "m", "best_of": 1, "request_rate": 1.0, "duration": 9.0, "completed": 3}
    result.update({"ttfts": [0.5, 1.0, 1.0], "itls": [[0.5], [1.0], [5.0]]})
    result.update({"mean_e2el_ms": 2000.0, "median_e2el_ms": 3000.0})  # the 2024 bug
    path = tmp_path / "old.json"
    path.write_text(json.dumps(result), encoding="utf-8")
    artifact = parse_artifact(path)
    assert artifact.aggregates["mean_e2el_ms"] == 3000.0
    assert artifact.aggregates["median_e2el_ms"] == 2000.0
    assert any("swapped" in note for note in artifact.notes)


def test_replay_sorts_arrivals_drops_failures_and_names_file_without_lengths(
    samples: dict[str, str], write: Writer, tmp_path: Path
) -> None:
    replay = read_replay_requests(write(tmp_path, "vllm_bench_json", samples["vllm_bench_json"]))
    np.testing.assert_allclose(replay.arrival_at_s, [0.0, 0.5])  # type: ignore[arg-type]
    assert replay.prompt_tokens.tolist() == [10, 30] and replay.output_tokens.tolist() == [4, 3]
    assert replay.request_rate_per_s is None
    timings = read_replay_requests(
        write(tmp_path / "t", "vllm_request_timings", samples["vllm_request_timings"])
    )
    np.testing.assert_allclose(timings.arrival_at_s, [0.0, 0.5])  # type: ignore[arg-type]
    assert timings.output_tokens.tolist() == [2, 7]
    bare = tmp_path / "bare.json"
    bare.write_text('{"model_id": "m", "duration": 1.0, "completed": 1}', encoding="utf-8")
    with pytest.raises(CalibrationError, match=r"bare\.json.*per-request lengths"):
        read_replay_requests(bare)


def test_vllm_log_merges_engine_and_spec_lines_and_reads_iterations(
    samples: dict[str, str], write: Writer, tmp_path: Path
) -> None:
    artifact = parse_artifact(write(tmp_path, "vllm_log", samples["vllm_log"]))
    intervals, steps = artifact.intervals, artifact.steps
    assert intervals is not None and intervals.num_intervals == 1
    assert intervals.num_running[0] == 2 and intervals.kv_cache_usage[0] == pytest.approx(0.4)
    # num_drafts = Accepted / sum(rates) = 20 / 1.0; mean length 1 + 20/20 = 2 (bonus included).
    assert intervals.num_drafts[0] == 20 and intervals.mean_acceptance_length[0] == 2.0
    assert steps is not None and steps.num_steps == 1
    assert steps.num_generation_tokens[0] == 12 and steps.elapsed_s[0] == pytest.approx(0.0155)
    assert steps.at_s[0] == 1.0 and steps.kv_cache_usage[0] == pytest.approx(0.41)


def _spec_line(body: str, prefix: str = "INFO 05-01 10:00:00 [metrics.py:9] ") -> str:
    return f"{prefix}SpecDecoding metrics: {body}\n"


@pytest.mark.parametrize(
    ("printed_length", "layout"), [(1.0, "vllm-log-0.8.5"), (2.0, "vllm-log-0.9.0")]
)
def test_085_and_090_layouts_are_told_apart_by_the_per_position_sum(
    printed_length: float, layout: str, tmp_path: Path
) -> None:
    body = (
        f"Draft acceptance rate: 33.3%, Mean acceptance length: {printed_length:.2f}, "
        "Accepted: 20 tokens, Drafted: 60 tokens, Per-position acceptance rate: 0.600, 0.300, 0.100"
    )
    path = tmp_path / "log.txt"
    path.write_text(_spec_line(body), encoding="utf-8")
    artifact = parse_artifact(path)
    assert artifact.spec_decode is not None and artifact.spec_decode.layout == layout
    assert artifact.spec_decode.mean_acceptance_length == pytest.approx(2.0)  # bonus included


def test_ansi_and_apiserver_prefix_and_083_layout(tmp_path: Path) -> None:
    prefix = "(APIServer pid=7) \x1b[32mINFO\x1b[0m 05-01 10:00:05 [metrics.py:9] "
    body = "Draft acceptance rate: 50.0%, Accepted: 5 tokens, Drafted: 10 tokens"
    path = tmp_path / "log.txt"
    first = "Draft acceptance rate: 1.0%, Accepted: 1 tokens, Drafted: 100 tokens"
    path.write_text(_spec_line(first) + _spec_line(body, prefix), encoding="utf-8")
    intervals = parse_artifact(path).intervals
    assert intervals is not None
    assert intervals.at_s.tolist() == [0.0, 5.0]
    assert intervals.num_accepted_tokens.tolist() == [1.0, 5.0]
    assert np.isnan(intervals.num_drafts).all()  # 0.8.3 lines do not give num_drafts


def test_v0_cumulative_lines_are_differenced(tmp_path: Path) -> None:
    line = (
        "INFO 10-16 19:05:{s} metrics.py:367] Speculative metrics: Draft acceptance rate: 0.5, "
        "System efficiency: 0.5, Number of speculative tokens: 2, Number of accepted tokens: {a}, "
        "Number of draft tokens: {d}, Number of emitted tokens: {e}.\n"
    )
    path = tmp_path / "v0.txt"
    path.write_text(line.format(s=40, a=10, d=40, e=30) + line.format(s=45, a=16, d=60, e=46))
    intervals = parse_artifact(path).intervals
    assert intervals is not None
    assert intervals.num_draft_tokens.tolist() == [40.0, 20.0]
    assert intervals.num_drafts.tolist() == [20.0, 10.0]  # draft tokens / k
    assert intervals.mean_acceptance_length.tolist() == [1.5, 1.6]  # emitted / drafts


def test_malformed_iteration_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.log"
    path.write_text("hello\nINFO 01-01 00:00:00 [x.py:1] Engine 000: Iteration(3): garbage\n")
    with pytest.raises(CalibrationError, match=r"bad\.log: line 2: expected .*context requests"):
        parse_artifact(path, "vllm_log")


def test_prometheus_scrapes_are_summed_over_engines_and_differenced(
    samples: dict[str, str], write: Writer, tmp_path: Path
) -> None:
    artifact = parse_artifact(write(tmp_path, "prometheus", samples["prometheus"]))
    intervals = artifact.intervals
    assert intervals is not None and intervals.num_intervals == 1
    assert intervals.num_drafts[0] == 300.0  # (300 + 150) - (100 + 50); _created ignored
    assert intervals.num_running[0] == 5.0
    assert artifact.spec_decode is not None
    assert artifact.spec_decode.mean_acceptance_length == pytest.approx(1 + 300 / 300)
    halves = samples["prometheus"].splitlines(keepends=True)
    first, second = tmp_path / "a.prom", tmp_path / "b.prom"
    first.write_text("".join(halves[:7]))
    second.write_text("".join(halves[7:]))
    (joined,) = parse_prometheus_scrapes([first, second])
    assert joined.intervals is not None and joined.intervals.num_drafts.tolist() == [300.0]


def test_prometheus_refuses_v0_counters_and_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "v0.prom"
    path.write_text('vllm:spec_decode_num_emitted_tokens_total{model_name="m"} 5.0\n')
    with pytest.raises(CalibrationError, match="sum-of-sums"):
        parse_artifact(path, "prometheus")
    path.write_text("vllm:x 1\nthis is not a sample\n")
    with pytest.raises(CalibrationError, match=r"line 2: expected a Prometheus sample"):
        parse_artifact(path, "prometheus")


def test_sglang_parsers(samples: dict[str, str], write: Writer, tmp_path: Path) -> None:
    log = parse_artifact(write(tmp_path, "sglang_log", samples["sglang_log"]))
    assert log.intervals is not None
    assert log.intervals.mean_acceptance_length.tolist() == [2.0, 3.0]  # TP1 line skipped
    assert log.intervals.at_s.tolist() == [0.0, 2.0] and log.intervals.num_waiting[0] == 2
    bench = parse_artifact(write(tmp_path, "sglang_bench_jsonl", samples["sglang_bench_jsonl"]))
    assert bench.metadata.request_rate_per_s is None and bench.metadata.max_concurrency == 8
    assert bench.aggregates["mean_e2el_ms"] == 100.0
    assert bench.aggregates["total_token_throughput"] == 50.0
    assert bench.spec_decode is not None and bench.spec_decode.mean_acceptance_length == 2.7


def test_per_request_metrics_and_traces(
    samples: dict[str, str], write: Writer, tmp_path: Path
) -> None:
    kind = "vllm_per_request_spec_metrics"
    spec = parse_artifact(write(tmp_path, kind, samples[kind])).spec_decode
    assert spec is not None and spec.mean_acceptance_length == pytest.approx(1 + 3 / 4)
    assert spec.per_position_acceptance_rate == (0.5, 0.25)  # P(accepted > 0), P(accepted > 1)
    traces = parse_artifact(write(tmp_path, "acceptance_traces", samples["acceptance_traces"]))
    assert traces.acceptance is not None and traces.acceptance.methods == ("eagle", "ngram")
    assert traces.acceptance.output_tokens.tolist() == [5]


def test_not_what_it_claims_is_a_clean_error(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_text('{"model_id": "m",\n "duration": 1.0,\n "completed": }\n')
    with pytest.raises(CalibrationError, match=r"result\.json: line 3: expected a JSON value"):
        parse_artifact(path, "vllm_bench_json")
    path.write_text('{"hello": 1}')
    with pytest.raises(CalibrationError, match="completed"):
        parse_artifact(path, "vllm_bench_json")
    with pytest.raises(CalibrationError, match="unknown artifact kind"):
        parse_artifact(path, "nope")
    with pytest.raises(CalibrationError, match="cannot read"):
        parse_artifact(tmp_path / "missing.json", "vllm_bench_json")


def test_a_few_thousand_requests_parse_whole(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    num_requests = 3000
    output = rng.integers(1, 400, num_requests)
    result = {
        "model_id": "m",
        "request_rate": 10.0,
        "burstiness": 1.0,
        "duration": 500.0,
        "completed": num_requests,
        "input_lens": rng.integers(1, 2000, num_requests).tolist(),
        "output_lens": output.tolist(),
        "ttfts": rng.random(num_requests).tolist(),
        "itls": [rng.random(n - 1).round(4).tolist() for n in output],
        "start_times": np.cumsum(rng.random(num_requests)).tolist(),
        "errors": [""] * num_requests,
    }
    path = tmp_path / "big.json"
    path.write_text(json.dumps(result), encoding="utf-8")
    replay = read_replay_requests(path)
    assert replay.num_requests == num_requests
