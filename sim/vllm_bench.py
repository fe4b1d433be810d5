"""A run in the keys ``vllm bench serve --save-result`` writes: the run folder's
``vllm_bench.json``, and ``specsim run --result-format vllm``.

The file holds the benchmark's flat (scalar) keys, so a prediction can be compared with a
measurement by the tools that read the benchmark's files. Key names, units and definitions follow
vLLM 0.33's ``vllm/benchmarks/serve.py`` (``benchmark`` and ``calculate_metrics``; the history of
the keys is in the benchmark's release notes):

* run metadata: ``date``, ``endpoint_type``, ``backend``, ``label``, ``model_id`` and
  ``tokenizer_id`` (the model as the scenario names it: the Hugging Face id the user gave, a
  quantized checkpoint's included; a catalogue name's first id), ``num_prompts``,
  ``request_rate`` (a number, or ``"inf"`` when requests are sent as fast as the concurrency
  allows), ``burstiness`` (the gamma shape, 1 for Poisson:
  ``1 / cv**2``), ``max_concurrency``;
* aggregates: ``duration`` (s), ``completed``, ``failed``, ``total_input_tokens``,
  ``total_output_tokens``, ``request_throughput``, ``request_goodput`` (null without a goodput
  SLO), ``output_throughput``, ``total_token_throughput``, ``max_output_tokens_per_s`` (the
  busiest one-second bucket of emitted tokens), ``max_concurrent_requests`` (most requests in
  flight at once), ``rtfx`` (0.0 for text);
* for each metric ``m`` of ``measurement.percentile_metrics`` (``ttft``, ``tpot``, ``itl``,
  ``e2el``) and each ``P`` of ``measurement.metric_percentiles``: ``mean_m_ms``, ``median_m_ms``,
  ``std_m_ms`` (population standard deviation, ``numpy.std``) and ``pP_m_ms`` (``P`` written as an
  integer when it is one: ``p99_ttft_ms``, ``p99.9_itl_ms``); TPOT per request is
  ``(e2el - ttft) / (output_tokens - 1)`` over requests with more than one output token, ITL is
  pooled over every streamed chunk (one engine step's tokens for a request);
* with speculation: ``spec_decode_acceptance_rate`` (percent), ``spec_decode_acceptance_length``
  (tokens per verify step, bonus token included), ``spec_decode_num_drafts``,
  ``spec_decode_draft_tokens``, ``spec_decode_accepted_tokens``.

The per-request arrays (``ttfts``, ``itls``, ``latencies``…) and the per-position acceptance list
are not flat keys and are not written: ``requests.csv`` holds every request.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np

from sim.metrics import measurement_window, weighted_percentiles
from sim.model_names import hf_model_id
from sim.run import ScenarioResult
from sim.scenario import MeasurementConfig
from sim.step_stats import ItlSample, max_tokens_per_second


def vllm_key(metric: str, stat: str) -> str:
    """The benchmark's key of a specsim statistic: ``ttft``/``ttft_ms`` and ``mean``, ``p50``
    or ``pP`` give ``mean_ttft_ms``, ``median_ttft_ms`` or ``pP_ttft_ms``; ``e2e_latency`` is
    ``e2el``."""
    name = metric.removesuffix("_ms").replace("e2e_latency", "e2el")
    word = "median" if stat == "p50" else stat
    return f"{word}_{name}_ms"


def percentile_word(percentile: float) -> str:
    """``99`` for 99.0 and ``99.9`` for 99.9, as the benchmark writes ``p{P}`` keys."""
    return str(int(percentile)) if int(percentile) == percentile else str(percentile)


def _block(name: str, values_ms: np.ndarray, weights: np.ndarray | None, pcts: list[float]) -> dict:
    """``mean/median/std/pP`` of one metric; 0.0 when there is no sample, as the benchmark
    writes for an empty list (``np.mean(x or 0)``)."""
    if weights is None:
        weights = np.ones(len(values_ms), dtype=np.int64)
    total = int(weights.sum())
    out: dict[str, float] = {}
    if total == 0:
        out = {f"mean_{name}_ms": 0.0, f"median_{name}_ms": 0.0, f"std_{name}_ms": 0.0}
        out.update({f"p{percentile_word(p)}_{name}_ms": 0.0 for p in pcts})
        return out
    mean = float((values_ms * weights).sum() / total)
    variance = float((weights * (values_ms - mean) ** 2).sum() / total)
    median, *rest = weighted_percentiles(values_ms, weights, (50, *pcts))  # type: ignore[arg-type]
    out = {
        f"mean_{name}_ms": mean,
        f"median_{name}_ms": median,
        f"std_{name}_ms": variance**0.5,
    }
    out.update({f"p{percentile_word(p)}_{name}_ms": v for p, v in zip(pcts, rest, strict=True)})
    return out


def _itl_block(sample: ItlSample, pcts: list[float]) -> dict:
    """:func:`_block` of the ITL, streamed: the mean and variance exactly rounded, the
    percentiles by exact selection."""
    total = sample.total()
    if total == 0:
        out = {"mean_itl_ms": 0.0, "median_itl_ms": 0.0, "std_itl_ms": 0.0}
        out.update({f"p{percentile_word(p)}_itl_ms": 0.0 for p in pcts})
        return out
    mean = sample.sum_ms() / total
    variance = sample.sum_ms(shift_ms=mean, power=2) / total
    median, *rest = sample.percentiles_ms(total, (50.0, *pcts))
    out = {"mean_itl_ms": mean, "median_itl_ms": median, "std_itl_ms": variance**0.5}
    out.update({f"p{percentile_word(p)}_itl_ms": v for p, v in zip(pcts, rest, strict=True)})
    return out


def _arrival_keys(workload: dict[str, Any], arrival_at_s: np.ndarray) -> dict[str, Any]:
    """``request_rate``, ``burstiness`` and ``max_concurrency`` of the workload's arrivals."""
    arrival = workload.get("arrival") or {}
    process = arrival.get("process", "poisson")
    if process == "closed_loop":
        return {"request_rate": "inf", "burstiness": 1.0, "max_concurrency": arrival["concurrency"]}
    if process == "trace":
        # A replayed trace has no configured rate: its mean rate over the recorded arrivals.
        span = float(np.nanmax(arrival_at_s) - np.nanmin(arrival_at_s)) if len(arrival_at_s) else 0
        rate: float | str = (len(arrival_at_s) - 1) / span if span > 0 else "inf"
        return {"request_rate": rate, "burstiness": 1.0, "max_concurrency": None}
    cv = float(arrival.get("cv", 1.0))
    return {
        "request_rate": float(arrival["rate_per_s"]),
        "burstiness": 1.0 / cv**2,
        "max_concurrency": arrival.get("max_concurrency"),
    }


def _peak_in_flight(start_s: np.ndarray, end_s: np.ndarray) -> int:
    """Most intervals ``[start, end)`` open at once (a sweep over the sorted endpoints)."""
    if len(start_s) == 0:
        return 0
    times = np.concatenate([start_s, end_s])
    steps = np.concatenate([np.ones(len(start_s)), -np.ones(len(end_s))])
    order = np.lexsort((steps, times))  # at equal times a finish closes before a start opens
    return int(np.cumsum(steps[order]).max())


def vllm_bench_result(result: ScenarioResult, label: str | None = None) -> dict[str, Any]:
    """The run as the flat keys of a ``vllm bench serve --save-result`` file (module docstring)."""
    resolved = result.resolved_scenario
    measurement = MeasurementConfig.model_validate(resolved.get("measurement") or {})
    requests, summary = result.requests, result.summary
    window = measurement_window(
        requests["arrival_at_s"],
        requests["finished_at_s"],
        measurement.warmup_requests,
        measurement.trim_fractions,
    )
    done = window.measured
    arrival = requests["arrival_at_s"][done]
    ttft_s = requests["first_token_at_s"][done] - arrival
    e2e_s = requests["finished_at_s"][done] - arrival
    out_tokens = requests["output_tokens"][done]
    multi = out_tokens > 1
    tpot_s = (e2e_s[multi] - ttft_s[multi]) / (out_tokens[multi] - 1)
    start, end = window.start_at_s, window.end_at_s
    steps = result.step_source()
    irregular, irregular_at = result.irregular_itl
    itl = ItlSample(steps, start, end, irregular, irregular_at)
    # The id the server served, as vLLM's bench records it: the scenario's model as the user
    # wrote it (a quantized checkpoint's id stays that id); a catalogue name becomes its id.
    model = resolved.get("model")
    model_id = hf_model_id(model) if isinstance(model, str) else str((model or {}).get("name"))
    goodput = summary.request_goodput_req_s if measurement.goodput else None
    document: dict[str, Any] = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "specsim",
        "backend": "specsim",
        "label": label if label is not None else summary.scenario,
        "model_id": model_id,
        "tokenizer_id": model_id,
        "num_prompts": len(requests["arrival_at_s"]),
        **_arrival_keys(resolved.get("workload") or {}, requests["arrival_at_s"]),
        "duration": window.duration_s if done.any() else 0.0,
        "completed": int(done.sum()),
        "failed": int((window.kept & ~done).sum()),
        "total_input_tokens": int(requests["prompt_tokens"][done].sum()),
        "total_output_tokens": int(out_tokens.sum()),
        "request_throughput": summary.request_throughput_req_s,
        "request_goodput": goodput,
        "output_throughput": summary.output_throughput_tok_s,
        "total_token_throughput": summary.total_token_throughput_tok_s,
        # Emitted tokens land at each step's end; the benchmark buckets token times by second.
        "max_output_tokens_per_s": max_tokens_per_second(steps, start, end),
        "max_concurrent_requests": _peak_in_flight(arrival, requests["finished_at_s"][done]),
        "rtfx": 0.0,
    }
    samples = {"ttft": ttft_s, "tpot": tpot_s, "e2el": e2e_s}
    pcts = list(measurement.metric_percentiles)
    for name in measurement.percentile_metrics:
        if name == "itl":
            document.update(_itl_block(itl, pcts))
        else:
            document.update(_block(name, np.asarray(samples[name]) * 1e3, None, pcts))
    if summary.method != "none":
        num_drafts = int(requests["num_decode_steps"][done].sum())
        drafted = int(requests["num_drafted"][done].sum())
        accepted = int(requests["num_accepted"][done].sum())
        document.update(
            {
                "spec_decode_acceptance_rate": 100.0 * accepted / drafted if drafted else None,
                "spec_decode_acceptance_length": 1.0 + accepted / num_drafts
                if num_drafts
                else None,
                "spec_decode_num_drafts": num_drafts,
                "spec_decode_draft_tokens": drafted,
                "spec_decode_accepted_tokens": accepted,
            }
        )
    return document
