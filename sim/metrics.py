"""From flat request and step records to the summary, with vLLM's benchmark definitions.

Definitions (``docs/metrics.md`` has the glossary):

* TTFT = first token time − arrival; end-to-end latency = finish − arrival;
* TPOT = (e2e − TTFT) / (output_tokens − 1), over requests with more than one output token
  (``vllm bench serve``);
* ITL = the gap between two consecutive emissions of one request; with speculation one emission
  carries several tokens, as one streamed chunk does in the benchmark;
* the measurement window runs from the first measured request's arrival to the last measured
  request's finish; requests before ``measurement.warmup_requests`` are excluded from latency and
  throughput, and ITL samples come from steps that start inside the window;
* percentiles interpolate linearly between order statistics (``numpy.percentile``'s default, as
  the benchmark uses).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
PERCENTILES = (50, 90, 99)


def weighted_percentiles(
    values: FloatArray, weights: NDArray[np.integer], qs: tuple[int, ...]
) -> list[float]:
    """Percentiles of the multiset where ``values[i]`` occurs ``weights[i]`` times.

    Equal to ``numpy.percentile`` of the expanded array (linear interpolation), without
    building it.
    """
    keep = weights > 0
    values, weights = values[keep], weights[keep].astype(np.int64)
    if len(values) == 0:
        return [float("nan")] * len(qs)
    order = np.argsort(values, kind="stable")
    values, weights = values[order], weights[order]
    cum = np.cumsum(weights)  # cum[i]-1 is the last expanded index holding values[i]
    n = int(cum[-1])
    out = []
    for q in qs:
        position = (n - 1) * q / 100.0
        lo = int(np.floor(position))
        hi = min(lo + 1, n - 1)
        v_lo = values[np.searchsorted(cum, lo, side="right")]
        v_hi = values[np.searchsorted(cum, hi, side="right")]
        out.append(float(v_lo + (v_hi - v_lo) * (position - lo)))
    return out


def distribution_ms(values_s: FloatArray) -> dict[str, float | None]:
    """Mean and percentiles of a sample in seconds, reported in milliseconds."""
    if len(values_s) == 0:
        return {"mean": None, **{f"p{q}": None for q in PERCENTILES}}
    ms = values_s * 1e3
    pct = np.percentile(ms, PERCENTILES)
    return {
        "mean": float(ms.mean()),
        **{f"p{q}": float(v) for q, v in zip(PERCENTILES, pct, strict=True)},
    }


def weighted_distribution_ms(
    values_s: FloatArray, weights: NDArray[np.integer]
) -> dict[str, float | None]:
    """As :func:`distribution_ms` for a weighted sample."""
    total = int(weights.sum())
    if total == 0:
        return {"mean": None, **{f"p{q}": None for q in PERCENTILES}}
    ms = values_s * 1e3
    pct = weighted_percentiles(ms, weights, PERCENTILES)
    mean = float((ms * weights).sum() / total)
    return {"mean": mean, **{f"p{q}": v for q, v in zip(PERCENTILES, pct, strict=True)}}


def summarize(
    requests: dict[str, np.ndarray],
    steps: dict[str, np.ndarray],
    irregular_itl_s: FloatArray,
    irregular_itl_at_s: FloatArray,
    warmup_requests: int,
    num_kv_blocks: int,
    speculative: bool,
    prefix_caching: bool = False,
) -> dict[str, Any]:
    """The run's headline metrics from its records (keys of the public ``summary.json``).

    ``prefix_cache_hit_rate`` is None when prefix caching is off.
    """
    n = len(requests["prompt_tokens"])
    measured = np.arange(n) >= warmup_requests
    done = measured & ~np.isnan(requests["finished_at_s"])
    arrival = requests["arrival_at_s"][done]
    first = requests["first_token_at_s"][done]
    finish = requests["finished_at_s"][done]
    out_tokens = requests["output_tokens"][done]
    prompt_tokens = requests["prompt_tokens"][done]
    ttft = first - arrival
    e2e = finish - arrival
    multi = out_tokens > 1
    tpot = (e2e[multi] - ttft[multi]) / (out_tokens[multi] - 1)

    if done.any():
        window_start, window_end = float(arrival.min()), float(finish.max())
    else:
        window_start = window_end = 0.0
    duration = max(window_end - window_start, 1e-12)

    start = steps["start_at_s"]
    in_window = (start >= window_start) & (start < window_end)
    itl_values = np.concatenate(
        [
            steps["duration_s"][in_window],
            irregular_itl_s[
                (irregular_itl_at_s >= window_start) & (irregular_itl_at_s <= window_end)
            ],
        ]
    )
    itl_weights = np.concatenate(
        [
            steps["num_regular_itl"][in_window].astype(np.int64),
            np.ones(
                int(
                    (
                        (irregular_itl_at_s >= window_start) & (irregular_itl_at_s <= window_end)
                    ).sum()
                ),
                dtype=np.int64,
            ),
        ]
    )

    decode_steps = requests["num_decode_steps"][done].sum()
    drafted = requests["num_drafted"][done].sum()
    accepted = requests["num_accepted"][done].sum()
    num_seqs = steps["num_seqs"][in_window]
    tokens = steps["num_tokens"][in_window]
    last_end = float(start[-1] + steps["duration_s"][-1]) if len(start) else 0.0
    return {
        "num_requests": int(measured.sum()),
        "num_completed": int(done.sum()),
        "sim_duration_s": last_end,
        "measurement_window_s": [window_start, window_end],
        "num_steps": len(start),
        "output_throughput_tok_s": float(out_tokens.sum() / duration),
        "request_throughput_req_s": float(done.sum() / duration),
        "total_token_throughput_tok_s": float((out_tokens.sum() + prompt_tokens.sum()) / duration),
        "ttft_ms": distribution_ms(ttft),
        "tpot_ms": distribution_ms(tpot),
        "itl_ms": weighted_distribution_ms(itl_values, itl_weights),
        "e2e_latency_ms": distribution_ms(e2e),
        "mean_acceptance_length": float(1.0 + accepted / decode_steps)
        if speculative and decode_steps > 0
        else 1.0,
        "draft_acceptance_rate": float(accepted / drafted) if speculative and drafted > 0 else None,
        "mean_batch_size": float(num_seqs.mean()) if len(num_seqs) else 0.0,
        "mean_tokens_per_step": float(tokens.mean()) if len(tokens) else 0.0,
        "kv_cache_peak_usage": float(steps["kv_blocks_used"].max() / num_kv_blocks)
        if len(start)
        else 0.0,
        "num_preemptions": int(requests["num_preemptions"].sum()),
        # vLLM's vllm:prefix_cache_hits / vllm:prefix_cache_queries, counted once per request.
        "prefix_cache_hit_rate": float(
            requests["num_cached_tokens"][done].sum() / prompt_tokens.sum()
        )
        if prefix_caching and prompt_tokens.sum() > 0
        else None,
    }
