"""The run folder's ``vllm_bench.json`` speaks ``vllm bench serve --save-result``'s keys.

The percentile block uses the same definitions as ``summary.json`` (TTFT, TPOT per request, ITL
pooled over emissions, linear interpolation), so the two files must agree wherever both report a
figure; the benchmark's key names are checked against the list in ``sim.vllm_bench``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sim.errors import ScenarioError
from sim.model_names import hf_model_id, resolve_model_name
from sim.results import save_result
from sim.run import run_scenario
from sim.scenario import load_scenario, validate_document
from sim.vllm_bench import percentile_word, vllm_bench_result
from specsim.bench_options import BenchOptions, apply_bench_options

#: The flat keys of a 0.33 ``--save-result`` file without ``--save-detailed`` for a text model
#: with the default percentile selection (``ttft,tpot,itl`` at 99).
VLLM_FLAT_KEYS = {
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency", "duration", "completed", "failed",
    "total_input_tokens", "total_output_tokens", "request_throughput", "request_goodput",
    "output_throughput", "total_token_throughput", "max_output_tokens_per_s",
    "max_concurrent_requests", "rtfx",
    *(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl") for s in ("mean", "median", "std", "p99")),
}  # fmt: skip
SPEC_KEYS = {
    "spec_decode_acceptance_rate",
    "spec_decode_acceptance_length",
    "spec_decode_num_drafts",
    "spec_decode_draft_tokens",
    "spec_decode_accepted_tokens",
}


def _run(*overrides: str):
    scenario, base = load_scenario(None, ["workload.num_requests=150", *overrides])
    return run_scenario(scenario, base)


def test_keys_are_the_benchmarks_and_agree_with_the_summary(tmp_path: Path) -> None:
    result = _run()
    save_result(result, tmp_path, write_steps=False)
    document = json.loads((tmp_path / "vllm_bench.json").read_text())
    assert set(document) == VLLM_FLAT_KEYS
    summary = result.summary
    for metric in ("ttft", "tpot", "itl"):
        distribution = summary.latency_ms(metric)
        assert document[f"mean_{metric}_ms"] == pytest.approx(distribution.mean, rel=1e-9)
        assert document[f"median_{metric}_ms"] == pytest.approx(distribution.p50, rel=1e-9)
        assert document[f"p99_{metric}_ms"] == pytest.approx(distribution.p99, rel=1e-9)
    assert document["completed"] == summary.num_completed
    assert document["request_goodput"] is None
    assert document["model_id"] == "meta-llama/Llama-3.1-8B-Instruct"
    # Requests in flight never exceed the requests measured, and the peak bucket of one second
    # holds at least the mean rate's share.
    assert 1 <= document["max_concurrent_requests"] <= document["completed"]
    assert document["max_output_tokens_per_s"] >= document["output_throughput"] * 0.99


def test_std_is_the_population_deviation_of_ttft() -> None:
    result = _run()
    done = ~np.isnan(result.requests["finished_at_s"])
    ttft_ms = (result.requests["first_token_at_s"] - result.requests["arrival_at_s"])[done] * 1e3
    document = vllm_bench_result(result)
    assert document["std_ttft_ms"] == pytest.approx(float(np.std(ttft_ms)), rel=1e-9)


def test_selected_metrics_percentiles_and_speculation() -> None:
    result = _run(
        "speculation.method=eagle3",
        "measurement.percentile_metrics=[e2el]",
        "measurement.metric_percentiles=[50, 99.9]",
        "measurement.goodput={ttft: 500}",
    )
    document = vllm_bench_result(result)
    assert "p99.9_e2el_ms" in document and "p50_e2el_ms" in document
    assert not any(key.endswith("_ttft_ms") for key in document)
    assert set(document) >= SPEC_KEYS
    summary = result.summary
    assert document["spec_decode_acceptance_length"] == pytest.approx(
        summary.mean_acceptance_length
    )
    assert document["spec_decode_acceptance_rate"] == pytest.approx(
        100 * summary.draft_acceptance_rate
    )
    assert document["request_goodput"] == pytest.approx(summary.request_goodput_req_s)


def test_percentile_words_follow_the_benchmark() -> None:
    assert percentile_word(99.0) == "99"
    assert percentile_word(99.9) == "99.9"


def _arrival(**options: object) -> dict:
    document: dict = {"workload": {"num_requests": 100, "arrival": {"rate_per_s": 2.0}}}
    apply_bench_options(document, BenchOptions(**options))  # type: ignore[arg-type]
    validate_document(document, "test")
    return document["workload"]["arrival"]


def test_request_rate_words_map_as_the_benchmark_sends() -> None:
    assert _arrival(request_rate="8") == {"process": "poisson", "rate_per_s": 8.0}
    # burstiness is the gamma shape: cv = 1 / sqrt(shape).
    assert _arrival(request_rate="8", burstiness=4.0)["cv"] == pytest.approx(0.5)
    assert _arrival(request_rate="inf") == {"process": "closed_loop", "concurrency": 100}
    assert _arrival(request_rate="inf", max_concurrency=8) == {
        "process": "closed_loop",
        "concurrency": 8,
    }
    capped = _arrival(request_rate="8", max_concurrency=4)
    assert capped == {"process": "poisson", "rate_per_s": 8.0, "max_concurrency": 4}
    # The scenario's own rate is kept when only the cap is given.
    assert _arrival(max_concurrency=4)["rate_per_s"] == 2.0


@pytest.mark.parametrize("rate", ["0", "-1", "fast", "nan"])
def test_bad_request_rates_name_the_option(rate: str) -> None:
    with pytest.raises(ScenarioError, match="--request-rate"):
        _arrival(request_rate=rate)


def test_random_dataset_fixes_lengths_at_the_benchmarks_defaults() -> None:
    document: dict = {}
    apply_bench_options(document, BenchOptions(dataset_name="random", random_output_len=64))
    assert document["workload"]["prompt_tokens"] == {"distribution": "fixed", "value": 1024}
    assert document["workload"]["output_tokens"] == {"distribution": "fixed", "value": 64}
    apply_bench_options(document, BenchOptions(random_input_len=100, random_range_ratio=0.5))
    assert document["workload"]["prompt_tokens"] == {
        "distribution": "uniform",
        "low": 50,
        "high": 150,
    }


def test_hugging_face_ids_name_catalogue_models() -> None:
    assert resolve_model_name("meta-llama/Llama-3.1-8B-Instruct") == "llama-3.1-8b"
    assert resolve_model_name("META-LLAMA/llama-3.1-8b") == "llama-3.1-8b"
    assert resolve_model_name("Qwen3-8B") == "qwen3-8b"
    assert resolve_model_name("no-such/model") is None
    assert hf_model_id("llama-3.1-8b") == "meta-llama/Llama-3.1-8B-Instruct"
    scenario, _ = load_scenario(None, ["model=mistralai/Mixtral-8x7B-Instruct-v0.1"])
    assert scenario.model == "mixtral-8x7b"


def test_the_file_reads_as_a_vllm_bench_result(tmp_path: Path) -> None:
    # The parser of real `vllm bench serve --save-result` files takes it as one of them, with
    # the same figures: a prediction and a measurement go through the same tools.
    from sim.artifacts import parse_artifact

    result = _run("speculation.method=eagle3")
    save_result(result, tmp_path, write_steps=False)
    parsed = parse_artifact(tmp_path / "vllm_bench.json")
    assert parsed.kind == "vllm_bench_json"
    document = json.loads((tmp_path / "vllm_bench.json").read_text())
    for key in ("completed", "output_throughput", "median_tpot_ms", "p99_itl_ms"):
        assert parsed.aggregates[key] == pytest.approx(document[key])


def test_every_hugging_face_id_resolves_to_its_own_entry() -> None:
    # No id (nor its bare repository name) may point at two catalogue entries.
    from sim.catalogue import model_names
    from sim.model_names import HF_MODEL_IDS

    for name, ids in HF_MODEL_IDS.items():
        assert name in model_names(), name
        for model_id in ids:
            assert resolve_model_name(model_id) == name
            assert resolve_model_name(model_id.upper()) == name
            assert resolve_model_name(model_id.split("/", 1)[1]) == name
