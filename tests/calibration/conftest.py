"""Fixtures of the parser tests: the real-data folder and a small inline sample of each kind."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # let `pytest` run without installing the package
    sys.path.insert(0, str(REPO_ROOT))

SHARED_DATA = REPO_ROOT / ".." / "shared" / "data"

# One small, valid sample per artifact kind, written in each format's real layout.
SAMPLES: dict[str, str] = {
    "vllm_bench_json": (
        '{"date": "20260101-000000", "backend": "vllm", "model_id": "m", "num_prompts": 3, '
        '"request_rate": "inf", "burstiness": 1.0, "max_concurrency": null, "duration": 2.0, '
        '"completed": 2, "failed": 1, "request_goodput": null, "input_lens": [10, 20, 30], '
        '"output_lens": [4, 0, 3], "ttfts": [0.1, 0.0, 0.2], "itls": [[0.01, 0.02], [], [0.03]], '
        '"start_times": [1000.5, 1000.0, 1001.0], "errors": ["", "boom", ""], '
        '"spec_decode_acceptance_rate": 50.0, "spec_decode_acceptance_length": 2.5, '
        '"spec_decode_num_drafts": 10, "spec_decode_draft_tokens": 30, '
        '"spec_decode_accepted_tokens": 15, '
        '"spec_decode_per_position_acceptance_rates": [0.7, 0.5, 0.3]}\n'
    ),
    "vllm_bench_stdout": (
        "============ Serving Benchmark Result ============\n"
        "Successful requests:                     16\n"
        "Benchmark duration (s):                  38.06\n"
        "Mean TTFT (ms):                          330.66\n"
        "---------------Speculative Decoding---------------\n"
        "Acceptance rate (%):                     40.00\n"
        "Acceptance length:                       2.20\n"
        "Per-position acceptance (%):\n"
        "  Position 0:                            60.00\n"
        "  Position 1:                            40.00\n"
        "==================================================\n"
    ),
    "vllm_nightly_aggregate": (
        '[{"Test name": "tp2_pp1_qps_inf", "GPU": "H100", "# of req.": 10, '
        '"Tput (req/s)": 1.5, "Mean TTFT (ms)": 12.5}]'
    ),
    "vllm_log": (
        "INFO 05-01 14:24:40 [loggers.py:123] Engine 000: Avg prompt throughput: 5.1 tokens/s, "
        "Avg generation throughput: 12.2 tokens/s, Running: 2 reqs, Waiting: 1 reqs, "
        "GPU KV cache usage: 40.0%, Prefix cache hit rate: 0.0%\n"
        "INFO 05-01 14:24:40 [metrics.py:101] SpecDecoding metrics: Mean acceptance length: 2.00, "
        "Accepted throughput: 2.00 tokens/s, Drafted throughput: 6.00 tokens/s, Accepted: 20 "
        "tokens, Drafted: 60 tokens, Per-position acceptance rate: 0.600, 0.300, 0.100, "
        "Avg Draft acceptance rate: 33.3%\n"
        "INFO 05-01 14:24:41 [loggers.py:200] Engine 000: Iteration(7): 1 context requests, "
        "512 context tokens, 3 generation requests, 12 generation tokens, iteration elapsed time: "
        "15.50 ms, GPU KV cache usage: 41.0%\n"
    ),
    "prometheus": (
        "# TYPE vllm:spec_decode_num_drafts_total counter\n"
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0\n'
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 50.0\n'
        'vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e+09\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 120.0\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 300.0\n'
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 300.0\n'
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 150.0\n'
        'vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.8e+09\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 420.0\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 900.0\n'
        'vllm:num_requests_running{engine="0",model_name="m"} 5.0\n'
    ),
    "vllm_per_request_spec_metrics": (
        '{"metrics": {"speculative_decoding": {"num_spec_steps": 4, "num_draft_tokens": 8, '
        '"num_accepted_draft_tokens": 3, "acceptance_histogram": [2, 1, 1], '
        '"num_spec_tokens": 2}}}\n'
    ),
    "vllm_request_timings": (
        '{"request_id": "a", "input_toks": 5, "output_toks": 7, "arrival_time": 100.5, '
        '"queued_ts": 10.0, "first_token_ts": 10.25, "last_token_ts": 11.0}\n'
        '{"request_id": "b", "input_toks": 6, "output_toks": 2, "arrival_time": 100.0, '
        '"queued_ts": 9.5, "first_token_ts": 9.75, "last_token_ts": 10.0}\n'
    ),
    "sglang_log": (
        "[2025-10-22 10:27:57 TP0] Decode batch. #running-req: 1, #token: 108, token usage: 0.25, "
        "accept len: 2.00, accept rate: 0.50, cuda graph: True, gen throughput (token/s): 10.00, "
        "#queue-req: 2, \n"
        "[2025-10-22 10:27:57 TP1] Decode batch. #running-req: 1, #token: 108, token usage: 0.25, "
        "accept len: 9.00, accept rate: 0.50, cuda graph: True, gen throughput (token/s): 10.00, "
        "#queue-req: 2, \n"
        "[2025-10-22 10:27:59 TP0] Decode batch. #running-req: 3, #token: 208, token usage: 0.50, "
        "accept len: 3.00, accept rate: 0.70, cuda graph: True, gen throughput (token/s): 20.00, "
        "#queue-req: 0, \n"
    ),
    "sglang_bench_jsonl": (
        '{"backend": "sglang", "dataset_name": "sharegpt", "request_rate": "trace", '
        '"max_concurrency": 8, "duration": 5.0, "completed": 2, "mean_e2e_latency_ms": 100.0, '
        '"total_throughput": 50.0, "accept_length": 2.7, "input_lens": [3, 4], '
        '"output_lens": [5, 6], "ttfts": [0.1, 0.2], "itls": [[0.01], [0.02]], '
        '"errors": ["", ""]}\n'
    ),
    "specforge_jsonl": (
        '{"batch_size": 8, "steps": 3, "topk": 1, "num_draft_tokens": 4, "acc_length": 2.46, '
        '"duration": 31.09, "throughput": 1754.67, "completion_tokens": 54547, '
        '"benchmark": "mtbench"}\n'
    ),
    "acceptance_traces": (
        '{"id": "1", "prompt_token_ids": [1, 2, 3], "generated_token_ids": [4, 5, 6, 7, 8], '
        '"acc_eagle": {"acc_len": [3, 2, 1, 2, 1]}, "acc_ngram": {"acc_len": [1, 1, 1, 1, 1]}}\n'
    ),
}


def write_artifact(folder: Path, kind: str, text: str) -> Path:
    """Write ``text`` as an artifact of ``kind`` under ``folder`` and return the path to parse."""
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "vllm_request_timings":
        (folder / "requests.jsonl").write_text(text, encoding="utf-8")
        (folder / "timeseries.csv").write_text(
            "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n1.0,5,6,2,1,25.0\n",
            encoding="utf-8",
        )
        return folder / "requests.jsonl"
    path = folder / f"{kind}.txt"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real-data folder beside the checkout; tests using it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present beside the checkout")
    return SHARED_DATA


@pytest.fixture(scope="session")
def samples() -> dict[str, str]:
    """The inline sample of every artifact kind."""
    return dict(SAMPLES)


@pytest.fixture(scope="session")
def write() -> Callable[[Path, str, str], Path]:
    """The helper that writes a sample to disk in the layout its parser expects."""
    return write_artifact
