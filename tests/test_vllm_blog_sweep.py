"""The vLLM blog's draft-model rate sweep (2024-10-17: Llama-3-70B on four H100s, Qwama-0.5B
drafting k = 4, ShareGPT, 1-10 requests/s) runs from what the project ships: the ShareGPT length
table vLLM's benchmark sampler gives with the Llama-3 tokenizer, the Qwama-0.5B draft in the
catalogue, and an acceptance fitted on the 1 request/s row alone."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from sim.catalogue import get_model
from sim.validation import build_scenario, load_points
from sim.validation.scenarios import LENGTH_TABLES, inexpressible_reason, length_table_path
from sim.workload import EmpiricalLengthConfig

REPO_ROOT = Path(__file__).resolve().parents[1]
SOURCE_RUN = (
    REPO_ROOT
    / ".."
    / "shared"
    / "data"
    / "vllm-artifacts"
    / "vllm_benchmark_serving_json"
    / "llm-k8s__tp8_pp1_sharegpt_qps_04.json"
)
SWEEP = "vllm-blog-2410-llama-3-70b-draft-qwama-0.5b-k4-qps"
TABLE = "sharegpt-vllm-bench-llama3"


def _table() -> dict:
    return json.loads(length_table_path(TABLE).read_text(encoding="utf-8"))


def _sweep() -> list:
    return sorted(
        (p for p in load_points() if p.point_id.startswith(SWEEP)),
        key=lambda p: p.rate_per_s or 0.0,
    )


def test_the_length_table_reproduces_the_totals_its_source_printed() -> None:
    table = _table()
    stats = table["statistics"]
    prompts, outputs = table["prompt_tokens"], table["output_tokens"]
    # benchmark_serving.py printed 200 requests, 42,659 prompt and 42,449 generated tokens.
    assert len(prompts) == len(outputs) == stats["num_requests"] == 200
    assert sum(prompts) == stats["total_prompt_tokens"] == 42659
    assert sum(outputs) == stats["total_output_tokens"] == 42449


def test_the_length_table_obeys_the_sampler_rules_it_came_from() -> None:
    # vLLM's ShareGPT sampler keeps prompts of 4-1,024 tokens whose reply leaves prompt + reply
    # within 2,048; a generated answer stops at the reply's length or earlier, so the same bound
    # holds for prompt + generated tokens, and every request wrote at least one token.
    prompts = np.asarray(_table()["prompt_tokens"])
    outputs = np.asarray(_table()["output_tokens"])
    assert prompts.min() >= 4 and prompts.max() <= 1024
    assert outputs.min() >= 1 and (prompts + outputs).max() <= 2048


@pytest.mark.skipif(
    not SOURCE_RUN.is_file(), reason="the source run file is not beside the checkout"
)
def test_the_length_table_is_the_source_runs_requests_in_order() -> None:
    run = json.loads(SOURCE_RUN.read_text(encoding="utf-8"))
    table = _table()
    assert table["prompt_tokens"] == run["input_lens"]
    assert table["output_tokens"] == run["output_lens"]
    assert run["num_prompts"] == 200 and run["tokenizer_id"].startswith("meta-llama/Llama-3")


def test_the_draft_sweep_is_expressible_with_the_shipped_data() -> None:
    sweep = _sweep()
    assert [p.rate_per_s for p in sweep] == [1, 2, 4, 8, 10]
    for point in sweep:
        assert inexpressible_reason(point) == "", point.point_id
        assert point.lengths in LENGTH_TABLES
        scenario = build_scenario(point)
        assert scenario.speculation.draft_model == "qwama-0.5b"
        for lengths in (scenario.workload.prompt_tokens, scenario.workload.output_tokens):
            assert isinstance(lengths, EmpiricalLengthConfig)
            assert Path(lengths.path) == length_table_path(TABLE)
        # The baseline arm is the same workload without a draft or its acceptance.
        baseline = build_scenario(point, method="none")
        assert baseline.speculation.draft_model is None
        assert baseline.workload == scenario.workload


def test_only_the_lowest_rate_was_fitted() -> None:
    fitted = [p.rate_per_s for p in _sweep() if p.is_fitted]
    assert fitted == [1]


def test_qwama_is_qwen2_half_b_with_the_llama3_vocabulary() -> None:
    # Tied embeddings: swapping Qwen2's 151,936-token vocabulary for Llama-3's 128,256 removes
    # one (151,936 - 128,256) x 896 matrix from Qwen2-0.5B's 494,032,768 parameters.
    qwama, qwen = get_model("qwama-0.5b"), get_model("qwen2.5-0.5b")
    target = get_model("llama-3.1-70b")
    assert qwama.spec.vocab_size == target.spec.vocab_size == 128256
    assert qwen.weight_bytes / 2 == 494_032_768
    assert qwama.weight_bytes / 2 == 494_032_768 - (151936 - 128256) * 896


def test_the_shipped_profile_is_what_the_fit_wrote() -> None:
    sys.path.insert(0, str(REPO_ROOT))
    from sim.acceptance.shipped_data import load_profile_document
    from tools.fit_blog_draft_acceptance import FIT_POINT, PROFILE_KEY, profile_entry

    (entry,) = load_profile_document()["profiles"][PROFILE_KEY]
    assert entry == profile_entry()
    low, high = entry["fit_interval"]
    assert low <= entry["conditional_rates"][0] <= high
    assert entry["rows"] == [{"point_id": FIT_POINT}]
    assert {p.acceptance_profile for p in _sweep()} == {PROFILE_KEY}
