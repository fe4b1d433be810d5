"""Write aggregate-only ``vllm bench serve`` results (0.10-era keys, no per-request arrays) of a
simulated run, so a fit by simulation can be checked against parameters known in advance."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from sim.run import run_scenario
from sim.scenario import validate_document

GPU, MODEL = "h100-sxm", "llama-3.1-8b"
MODEL_ID = "meta-llama/Llama-3.1-8B-Instruct"


def truth_document(
    num_requests: int,
    concurrency: int | None,
    rate_per_s: float | None,
    engine: dict[str, float],
    prompt_tokens: int = 200,
    output_tokens: int = 60,
) -> dict[str, Any]:
    """The scenario of the 'real' run: fixed lengths, closed loop or Poisson arrivals."""
    arrival: dict[str, Any] = (
        {"process": "poisson", "rate_per_s": rate_per_s}
        if rate_per_s is not None
        else {"process": "closed_loop", "concurrency": concurrency or num_requests}
    )
    return {
        "name": "truth",
        "hardware": {"gpu": GPU, "num_gpus": 1},
        "model": MODEL,
        "engine": {"preset": "vllm-v1", **engine},
        "workload": {
            "num_requests": num_requests,
            "arrival": arrival,
            "prompt_tokens": {"distribution": "fixed", "value": prompt_tokens},
            "output_tokens": {"distribution": "fixed", "value": output_tokens},
        },
    }


def bench_result(document: dict[str, Any], concurrency: int | None) -> dict[str, Any]:
    """Simulate ``document`` and return its result in the layout ``vllm bench serve`` saves
    without ``--save-detailed`` (VLLM_FORMATS.md §1.2)."""
    result = run_scenario(validate_document(document, "truth"), Path.cwd())
    s, r = result.summary, result.requests
    rate = document["workload"]["arrival"].get("rate_per_s")
    ttft = (r["first_token_at_s"] - r["arrival_at_s"]) * 1e3
    window = s.measurement_window_s[1] - s.measurement_window_s[0]
    out: dict[str, Any] = {
        "date": "20260101-000000",
        "endpoint_type": "vllm",
        "label": None,
        "model_id": MODEL_ID,
        "tokenizer_id": MODEL_ID,
        "num_prompts": len(ttft),
        "request_rate": rate if rate is not None else "inf",
        "burstiness": 1.0,
        "max_concurrency": concurrency,
        "duration": window,
        "completed": len(ttft),
        "total_input_tokens": int(r["prompt_tokens"].sum()),
        "total_output_tokens": int(r["output_tokens"].sum()),
        "request_throughput": s.request_throughput_req_s,
        "request_goodput": None,
        "output_throughput": s.output_throughput_tok_s,
        "total_token_throughput": s.total_token_throughput_tok_s,
    }
    for metric in ("ttft", "tpot", "itl"):
        block = s.latency_ms(metric)
        out[f"mean_{metric}_ms"] = block.mean
        out[f"median_{metric}_ms"] = block.p50
        out[f"std_{metric}_ms"] = float(np.std(ttft)) if metric == "ttft" else 0.0
        out[f"p99_{metric}_ms"] = block.p99
    return out


def write_result(path: Path, result: dict[str, Any]) -> Path:
    """Write one result object as ``--save-result`` does."""
    path.write_text(json.dumps(result), encoding="utf-8")
    return path
