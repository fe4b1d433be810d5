"""Every real artifact beside the checkout parses, and its numbers match values read by hand.

Each expected value says where in the file it was read. The tests skip when ``../shared/data`` is
absent.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.artifacts import detect_kind, mean_acceptance_length, parse_artifact, parse_runs
from sim.artifacts.replay import read_replay_requests
from sim.errors import CalibrationError

ARTIFACTS = "vllm-artifacts"
BENCH = f"{ARTIFACTS}/vllm_benchmark_serving_json/llm-k8s__tp8_pp1_sharegpt_qps_04.json"
TRACES = "acceptance-traces/llama-3.1-8b-h100-vllm"

# Every data file, with its kind and number of runs; licences, provenance and the sidecar are
# not artifacts and must be refused cleanly.
DATA_FILES = {
    f"{ARTIFACTS}/logs/sglang_decode_batch_logs.txt": ("sglang_log", 1),
    f"{ARTIFACTS}/logs/vllm_bench_serve_stdout_excerpts.txt": ("vllm_bench_stdout", 2),
    f"{ARTIFACTS}/logs/vllm_offline_spec_decode_example_output.txt": ("vllm_log", 1),
    f"{ARTIFACTS}/logs/vllm_per_request_spec_decode_metrics_response.txt": (
        "vllm_per_request_spec_metrics",
        1,
    ),
    f"{ARTIFACTS}/logs/vllm_prometheus_spec_decode_scrape_excerpts.txt": ("prometheus", 2),
    f"{ARTIFACTS}/logs/vllm_v0_speculative_metrics_lines.txt": ("vllm_log", 1),
    f"{ARTIFACTS}/logs/vllm_v1_specdecoding_lines.txt": ("vllm_log", 1),
    f"{ARTIFACTS}/sglang/specforge__dev_result.jsonl": ("specforge_jsonl", 6),
    f"{ARTIFACTS}/synthetic/SYNTHETIC_vllm_v1_metrics_exposition.txt": ("prometheus", 1),
    f"{ARTIFACTS}/vllm_benchmark_serving_json/llm-k8s__tp8_pp1_benchmark_results_aggregate.json": (
        "vllm_nightly_aggregate",
        4,
    ),
    BENCH: ("vllm_bench_json", 1),
    f"{ARTIFACTS}/vllm_request_timings": ("vllm_request_timings", 1),
    f"{ARTIFACTS}/vllm_request_timings/requests.jsonl": ("vllm_request_timings", 1),
    f"{ARTIFACTS}/vllm_request_timings/timeseries.csv": ("vllm_request_timings", 1),
    f"{ARTIFACTS}/vllm_request_timings/meta.json": ("vllm_request_timings", 1),
    **{
        f"{TRACES}/combined_{name}.jsonl": ("acceptance_traces", 1)
        for name in ("sharegpt", "cnn", "gsm8k", "instructcoder")
    },
}
NOT_ARTIFACTS = (
    f"{ARTIFACTS}/PROVENANCE.md",
    f"{ARTIFACTS}/sglang/specforge__LICENSE.txt",
    f"{ARTIFACTS}/vllm_benchmark_serving_json/llm-k8s__LICENSE.txt",
    f"{ARTIFACTS}/vllm_benchmark_serving_json/llm-k8s__tp8_pp1_sharegpt_qps_04.commands",
    f"{ARTIFACTS}/vllm_request_timings/LLMServingSim_LICENSE.txt",
)


def test_the_lists_above_cover_every_data_file(shared_data: Path) -> None:
    on_disk = {
        str(p.relative_to(shared_data))
        for folder in (ARTIFACTS, TRACES)
        for p in (shared_data / folder).rglob("*")
        if p.is_file()
    }
    assert on_disk == (set(DATA_FILES) | set(NOT_ARTIFACTS)) - {f"{ARTIFACTS}/vllm_request_timings"}


@pytest.mark.parametrize("relative", sorted(DATA_FILES))
def test_every_artifact_is_detected_and_parses(shared_data: Path, relative: str) -> None:
    kind, num_runs = DATA_FILES[relative]
    assert detect_kind(shared_data / relative) == kind
    runs = parse_runs(shared_data / relative)
    assert len(runs) == num_runs
    assert all(len(run.metadata.source_sha256.split(";")[0]) == 64 for run in runs)


@pytest.mark.parametrize("relative", NOT_ARTIFACTS)
def test_files_that_are_not_artifacts_are_refused_cleanly(shared_data: Path, relative: str) -> None:
    with pytest.raises(CalibrationError, match=Path(relative).name.replace(".", r"\.")):
        parse_artifact(shared_data / relative)


def test_benchmark_serving_json(shared_data: Path) -> None:
    artifact = parse_artifact(shared_data / BENCH)
    requests = artifact.requests
    assert requests is not None and requests.num_requests == 200  # "num_prompts": 200
    assert requests.prompt_tokens is not None and requests.output_tokens is not None
    assert requests.prompt_tokens[:3].tolist() == [13, 25, 27]  # start of "input_lens"
    assert requests.output_tokens[:3].tolist() == [120, 770, 81]  # start of "output_lens"
    assert requests.ttft_s is not None and requests.ttft_s[0] == 0.03028566500006491  # "ttfts"[0]
    # The file's own totals ("total_input_tokens": 42659, "total_output_tokens": 42449).
    assert requests.prompt_tokens.sum() == artifact.aggregates["total_input_tokens"] == 42659
    assert requests.output_tokens.sum() == artifact.aggregates["total_output_tokens"] == 42449
    assert np.mean(requests.ttft_s) * 1000 == pytest.approx(artifact.aggregates["mean_ttft_ms"])
    # VLLM_FORMATS.md §1.5: output_len - (len(itls) + 1) is 0 for 175 and 1 for 25 requests.
    assert requests.itls_s is not None
    gaps = requests.output_tokens - np.array([len(g) + 1 for g in requests.itls_s])
    assert (gaps == 0).sum() == 175 and (gaps == 1).sum() == 25
    assert requests.errors is not None and not any(requests.errors)  # "errors": ["", ...]
    assert requests.arrival_at_s is None  # no start_times in a 2025-04 file
    assert any("request_goodput:" in note for note in artifact.notes)  # the typo key is present
    metadata = artifact.metadata
    assert metadata.request_rate_per_s == 4.0  # "request_rate": 4.0
    assert metadata.model == "meta-llama/Llama-3.3-70B-Instruct"  # "model_id"
    assert metadata.gpu == "Standard_ND96asr_v4 x 1"  # "gpu_type" in the .commands sidecar
    assert "0.6.4-0.9.0" in str(metadata.engine_era)
    replay = read_replay_requests(shared_data / BENCH)
    assert replay.num_requests == 200 and replay.request_rate_per_s == 4.0


def test_nightly_table_agrees_with_the_result_file(shared_data: Path) -> None:
    table = parse_runs(shared_data / f"{ARTIFACTS}/vllm_benchmark_serving_json/"
                       "llm-k8s__tp8_pp1_benchmark_results_aggregate.json")  # fmt: skip
    assert [run.metadata.request_rate_per_s for run in table] == [1.0, 4.0, 16.0, None]
    assert all(run.metadata.tensor_parallel_size == 8 for run in table)  # "tp8_pp1_qps_*"
    bench = parse_artifact(shared_data / BENCH)
    assert table[1].aggregates["mean_ttft_ms"] == bench.aggregates["mean_ttft_ms"]


def test_request_timings(shared_data: Path) -> None:
    artifact = parse_artifact(shared_data / f"{ARTIFACTS}/vllm_request_timings")
    requests, intervals = artifact.requests, artifact.intervals
    assert requests is not None and requests.num_requests == 300  # 300 lines
    assert requests.prompt_tokens is not None and requests.prompt_tokens[0] == 2358  # bench-0
    assert requests.ttft_s is not None
    # bench-0: first_token_ts 479748.510151426 - queued_ts 479748.340626232.
    assert requests.ttft_s[0] == pytest.approx(0.169525194)
    assert intervals is not None and intervals.num_intervals == 67  # rows t = 1 .. 67
    assert intervals.num_running[12] == 128 and intervals.num_waiting[12] == 11  # row t = 13.0
    assert artifact.metadata.engine_version == "0.19.0"  # meta.json "vllm_version"
    assert artifact.metadata.tensor_parallel_size == 1
    replay = read_replay_requests(shared_data / f"{ARTIFACTS}/vllm_request_timings/requests.jsonl")
    assert replay.arrival_at_s is not None and np.all(np.diff(replay.arrival_at_s) >= 0)
    # bench-1 arrival_time 1777142838.6237123 - bench-0 1777142838.338653.
    assert replay.arrival_at_s[1] == pytest.approx(0.2850593, abs=1e-6)


def test_vllm_log_lines(shared_data: Path) -> None:
    v0 = parse_artifact(shared_data / f"{ARTIFACTS}/logs/vllm_v0_speculative_metrics_lines.txt")
    assert v0.intervals is not None
    # Issue #9539 line: 13311 draft tokens / k=3 = 4437 drafts; 10616 emitted / 4437.
    assert v0.intervals.num_drafts[0] == 4437
    assert v0.intervals.mean_acceptance_length[0] == pytest.approx(10616 / 4437)
    assert v0.intervals.num_accepted_tokens[1] == 32594  # issue #7301 line (another server)
    v1 = parse_artifact(shared_data / f"{ARTIFACTS}/logs/vllm_v1_specdecoding_lines.txt")
    assert v1.intervals is not None and v1.spec_decode is not None
    layouts = v1.spec_decode.layout.split("+")
    assert {"vllm-log-0.8.3", "vllm-log-0.10.2", "vllm-log-pr24127-premerge"} <= set(layouts)
    drafted = v1.intervals.num_draft_tokens.tolist()
    row = drafted.index(975.0)  # the 0.10.2 line: "Accepted: 89 tokens, Drafted: 975 tokens"
    assert v1.intervals.mean_acceptance_length[row] == 2.37
    assert v1.intervals.num_drafts[row] == round(89 / 1.370)  # sum of its 15 per-position rates
    assert v1.intervals.per_position_acceptance_rate is not None
    assert v1.intervals.per_position_acceptance_rate[row, 0] == 0.600
    assert 2.0 in v1.intervals.num_running  # PR #24505 Engine line "Running: 2 reqs"
    offline = parse_artifact(
        shared_data / f"{ARTIFACTS}/logs/vllm_offline_spec_decode_example_output.txt"
    )
    assert offline.intervals is not None and offline.spec_decode is not None
    assert offline.intervals.num_drafts.tolist() == [4687, 36593]  # "num_drafts:" of each block
    # The printed lengths 3.64 and 2.78 are 1 + accepted / drafts of each block.
    np.testing.assert_allclose(
        1 + offline.intervals.num_accepted_tokens / offline.intervals.num_drafts,
        [3.64, 2.78],
        atol=0.005,
    )


def test_prometheus_scrapes(shared_data: Path) -> None:
    synthetic = parse_artifact(
        shared_data / f"{ARTIFACTS}/synthetic/SYNTHETIC_vllm_v1_metrics_exposition.txt"
    )
    spec = synthetic.spec_decode
    assert spec is not None
    # drafts 1000.0, draft tokens 3000.0, accepted 1800.0, per-pos 800/600/400 in the file.
    assert spec.mean_acceptance_length == pytest.approx(1 + 1800 / 1000)
    assert spec.draft_acceptance_rate == pytest.approx(1800 / 3000)
    assert spec.per_position_acceptance_rate == pytest.approx((0.8, 0.6, 0.4))
    assert synthetic.metadata.num_speculative_tokens == 3
    assert synthetic.intervals is not None and synthetic.intervals.num_running[0] == 32.0
    excerpts = parse_runs(
        shared_data / f"{ARTIFACTS}/logs/vllm_prometheus_spec_decode_scrape_excerpts.txt"
    )
    by_model = {run.metadata.model: run for run in excerpts}
    dp8 = by_model["/home/models/Qwen3-0.6B"].spec_decode
    assert dp8 is not None and dp8.num_drafts == 22 + 15 + 29 + 20 + 25 + 24 + 27 + 26  # 8 engines
    qwen = by_model["Qwen/Qwen3.6-35B-A3B-FP8"].spec_decode
    assert qwen is not None and qwen.num_drafts == 6491797  # 6.491797e+06


def test_other_text_artifacts(shared_data: Path) -> None:
    stdout = parse_runs(shared_data / f"{ARTIFACTS}/logs/vllm_bench_serve_stdout_excerpts.txt")
    assert stdout[0].aggregates["completed"] == 1536  # "Successful requests: 1536"
    assert stdout[0].aggregates["mean_itl_ms"] == 24.56  # "Mean ITL (ms): 24.56"
    assert stdout[1].metadata.max_concurrency == 1  # "Maximum request concurrency: 1"
    per_request = parse_artifact(
        shared_data / f"{ARTIFACTS}/logs/vllm_per_request_spec_decode_metrics_response.txt"
    ).spec_decode
    assert per_request is not None and per_request.acceptance_histogram == (39, 1, 0, 3)
    assert per_request.mean_acceptance_length == pytest.approx(1.2325581395348837)
    sglang = parse_artifact(shared_data / f"{ARTIFACTS}/logs/sglang_decode_batch_logs.txt")
    assert sglang.intervals is not None and sglang.intervals.num_intervals == 9  # Decode lines
    assert sglang.intervals.mean_acceptance_length[0] == 1.80  # issue #4417 "accept len: 1.80"
    assert sglang.intervals.kv_cache_usage[6] == 0.43  # PR #30393 "token usage: 0.43"
    specforge = parse_runs(shared_data / f"{ARTIFACTS}/sglang/specforge__dev_result.jsonl")
    first = specforge[0]
    assert first.spec_decode is not None and first.spec_decode.mean_acceptance_length == 4.14
    assert first.metadata.num_speculative_tokens == 7 and first.metadata.settings["topk"] == 10


def test_acceptance_traces(shared_data: Path) -> None:
    gsm8k = parse_artifact(shared_data / f"{TRACES}/combined_gsm8k.jsonl").acceptance
    assert gsm8k is not None and len(gsm8k.request_ids) == 300  # 300 lines
    assert gsm8k.request_ids[0] == "134"  # line 1 "id"
    assert gsm8k.prompt_tokens[0] == 103 and gsm8k.output_tokens[0] == 178  # line 1 list lengths
    assert gsm8k.acc_len["eagle"][0][:6].tolist() == [1, 5, 4, 3, 2, 1]  # line 1 acc_eagle
    # data/README.md: EAGLE at k = 3 gives about 2.25 on ShareGPT and 2.38 on GSM8K.
    assert mean_acceptance_length(gsm8k, "eagle", 3) == pytest.approx(2.38, abs=0.01)
    sharegpt = parse_artifact(shared_data / f"{TRACES}/combined_sharegpt.jsonl").acceptance
    assert sharegpt is not None and len(sharegpt.request_ids) == 310
    assert mean_acceptance_length(sharegpt, "eagle", 3) == pytest.approx(2.25, abs=0.01)
