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
* the steady window (``measurement.window: steady``, off by default) drops a share of requests
  at each end by arrival order and measures what happens between the first kept arrival and the
  first dropped one at the end: the node is loaded throughout, warm-up and drain excluded;
  throughput counts what the node served inside it (finishes, emitted tokens);
* goodput (``measurement.goodput``) is ``vllm bench serve``'s: a completed request is good when
  its TTFT, TPOT and end-to-end latency are each at most their bound (TPOT counts as 0 for a
  one-token output), and ``request_goodput_req_s`` = good requests / window length
  (vllm-project/vllm, ``vllm/benchmarks/serve.py``, ``calculate_metrics``, commit 009e6d4a), in
  the steady window the served request rate times the share of measured requests that are good;
* percentiles interpolate linearly between order statistics (``numpy.percentile``'s default, as
  the benchmark uses).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from sim.errors import ScenarioError
from sim.step_stats import ItlSample, StepSource, as_source, step_totals
from sim.summary import DistributionMs, Summary

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


def distribution_ms(values_s: FloatArray) -> DistributionMs:
    """Mean and percentiles of a sample in seconds, reported in milliseconds."""
    if len(values_s) == 0:
        return DistributionMs.empty()
    ms = values_s * 1e3
    p50, p90, p99 = (float(v) for v in np.percentile(ms, PERCENTILES))
    return DistributionMs(float(ms.mean()), p50, p90, p99)


def itl_distribution_ms(sample: ItlSample) -> DistributionMs:
    """As :func:`distribution_ms` for the streamed ITL sample, a multiset of step durations
    weighted by their regular gaps: the mean exactly rounded, the percentiles by exact selection
    (:mod:`sim.step_stats`)."""
    total = sample.total()
    if total == 0:
        return DistributionMs.empty()
    p50, p90, p99 = sample.percentiles_ms(total, PERCENTILES)
    return DistributionMs(sample.sum_ms() / total, p50, p90, p99)


@dataclass(frozen=True)
class Window:
    """The measurement window: its bounds, the requests kept (finished or not) and measured."""

    start_at_s: float
    end_at_s: float
    kept: NDArray[np.bool_]
    measured: NDArray[np.bool_]
    steady: bool

    @property
    def duration_s(self) -> float:
        return max(self.end_at_s - self.start_at_s, 1e-12)


def measurement_window(
    arrival_at_s: FloatArray,
    finished_at_s: FloatArray,
    warmup_requests: int,
    trim_fractions: tuple[float, float] = (0.0, 0.0),
) -> Window:
    """The requests measured and the window they are measured in.

    Full window (both fractions 0): requests with index >= ``warmup_requests`` that finished,
    from the first one's arrival to the last one's finish. Steady window: requests are ranked by
    arrival; the first ``max(warmup_requests, round(f_start·n))`` and the last ``round(f_end·n)``
    are dropped; the window runs from the first kept arrival to the first dropped arrival at the
    end (the last arrival when none is dropped), and the kept requests that finished are measured.
    Raise ValueError if a fraction is outside [0, 0.5); ScenarioError if the steady window has
    no length (every kept request arrives at one instant: one request, or one closed-loop wave).
    """
    f_start, f_end = trim_fractions
    if not (0.0 <= f_start < 0.5 and 0.0 <= f_end < 0.5):
        raise ValueError(f"trim fractions must be in [0, 0.5), got {trim_fractions}")
    n = len(arrival_at_s)
    finished = ~np.isnan(finished_at_s)
    if f_start == 0.0 and f_end == 0.0:
        kept = np.arange(n) >= warmup_requests
        done = kept & finished
        if not done.any():
            return Window(0.0, 0.0, kept, done, False)
        return Window(
            float(arrival_at_s[done].min()), float(finished_at_s[done].max()), kept, done, False
        )
    order = np.argsort(arrival_at_s, kind="stable")
    first = max(warmup_requests, round(f_start * n))
    stop = n - round(f_end * n)
    kept = np.zeros(n, dtype=bool)
    if first >= stop:
        return Window(0.0, 0.0, kept, kept, True)
    kept[order[first:stop]] = True
    start = float(arrival_at_s[order[first]])
    end = float(arrival_at_s[order[stop]] if stop < n else arrival_at_s[order[n - 1]])
    if end <= start:
        raise ScenarioError(
            f"measurement.window: steady: the {stop - first} request(s) it keeps of {n} all "
            f"arrive at {start:g} s, so the window has no length to measure rates over; run "
            "more requests, lower warmup_fraction/cooldown_fraction, or use window: full"
        )
    return Window(start, end, kept, kept & finished, True)


def goodput(
    ttft_s: FloatArray, tpot_s: FloatArray, e2e_s: FloatArray, bounds_ms: dict[str, float]
) -> NDArray[np.bool_]:
    """Which requests are good: each bounded metric at most its bound (``vllm bench serve``).

    ``tpot_s`` is 0 for one-token outputs, as the benchmark counts them. Raise ValueError if a
    key is not ``ttft``, ``tpot`` or ``e2el``.
    """
    by_name = {"ttft": ttft_s, "tpot": tpot_s, "e2el": e2e_s}
    good = np.ones(len(ttft_s), dtype=bool)
    for name, bound_ms in bounds_ms.items():
        if name not in by_name:
            raise ValueError(f"unknown goodput metric {name!r}")
        good &= by_name[name] <= bound_ms / 1e3
    return good


def summarize(
    requests: dict[str, np.ndarray],
    steps: Mapping[str, np.ndarray] | StepSource,
    irregular_itl_s: FloatArray,
    irregular_itl_at_s: FloatArray,
    warmup_requests: int,
    num_kv_blocks: int,
    *,
    scenario: str,
    method: str,
    seed: int,
    prefix_caching: bool = False,
    trim_fractions: tuple[float, float] = (0.0, 0.0),
    goodput_ms: dict[str, float] | None = None,
) -> Summary:
    """The run's headline metrics from its records, named by ``scenario``, ``method``, ``seed``.

    Acceptance figures count drafts when ``method`` is not ``"none"``.
    ``prefix_cache_hit_rate`` is None when prefix caching is off. The steady window (non-zero
    ``trim_fractions``) adds ``measurement_window``, ``offered_rate_req_s`` and
    ``num_arrivals_in_window``; ``goodput_ms`` adds ``request_goodput_req_s``,
    ``num_good_requests`` and ``good_request_fraction``. The run's wall time and version are
    the caller's to add. Raise ValueError if a trim fraction or a goodput key is invalid.
    """
    speculative = method != "none"
    window = measurement_window(
        requests["arrival_at_s"], requests["finished_at_s"], warmup_requests, trim_fractions
    )
    done = window.measured
    arrival = requests["arrival_at_s"][done]
    first = requests["first_token_at_s"][done]
    finish = requests["finished_at_s"][done]
    out_tokens = requests["output_tokens"][done]
    prompt_tokens = requests["prompt_tokens"][done]
    ttft = first - arrival
    e2e = finish - arrival
    multi = out_tokens > 1
    tpot = (e2e[multi] - ttft[multi]) / (out_tokens[multi] - 1)
    window_start, window_end, duration = window.start_at_s, window.end_at_s, window.duration_s

    source = as_source(steps)
    totals = step_totals(source, window_start, window_end, served=window.steady)
    itl = ItlSample(source, window_start, window_end, irregular_itl_s, irregular_itl_at_s)
    if window.steady:
        # What the node served inside the window, whoever the work belonged to.
        all_finish = requests["finished_at_s"]
        served = int(((all_finish >= window_start) & (all_finish < window_end)).sum())
        served_out = float(totals.ended_emitted_tokens)
        served_total = served_out + float(totals.ended_prefill_tokens)
    else:
        served = int(done.sum())
        served_out = float(out_tokens.sum())
        served_total = float(out_tokens.sum() + prompt_tokens.sum())

    decode_steps = requests["num_decode_steps"][done].sum()
    drafted = requests["num_drafted"][done].sum()
    accepted = requests["num_accepted"][done].sum()
    # Integer sums are exact, so sum / count is numpy's mean to the last bit.
    window_steps = totals.num_window_steps
    summary = Summary(
        scenario=scenario,
        method=method,
        seed=seed,
        num_requests=int(window.kept.sum()),
        num_completed=int(done.sum()),
        sim_duration_s=totals.last_end_s,
        measurement_window_s=(window_start, window_end),
        num_steps=totals.num_steps,
        output_throughput_tok_s=served_out / duration,
        request_throughput_req_s=served / duration,
        total_token_throughput_tok_s=served_total / duration,
        ttft_ms=distribution_ms(ttft),
        tpot_ms=distribution_ms(tpot),
        itl_ms=itl_distribution_ms(itl),
        e2e_latency_ms=distribution_ms(e2e),
        mean_acceptance_length=float(1.0 + accepted / decode_steps)
        if speculative and decode_steps > 0
        else 1.0,
        draft_acceptance_rate=float(accepted / drafted) if speculative and drafted > 0 else None,
        mean_batch_size=totals.window_num_seqs / window_steps if window_steps else 0.0,
        mean_tokens_per_step=totals.window_num_tokens / window_steps if window_steps else 0.0,
        kv_cache_peak_usage=totals.kv_blocks_peak / num_kv_blocks if totals.num_steps else 0.0,
        num_preemptions=int(requests["num_preemptions"].sum()),
        # vLLM's vllm:prefix_cache_hits / vllm:prefix_cache_queries, counted once per request.
        prefix_cache_hit_rate=float(requests["num_cached_tokens"][done].sum() / prompt_tokens.sum())
        if prefix_caching and prompt_tokens.sum() > 0
        else None,
    )
    if window.steady:
        arrivals = requests["arrival_at_s"]
        num_arrivals = int(((arrivals >= window_start) & (arrivals < window_end)).sum())
        summary = replace(
            summary,
            measurement_window="steady",
            num_arrivals_in_window=num_arrivals,
            offered_rate_req_s=num_arrivals / duration,
        )
    if goodput_ms:
        all_tpot = np.zeros(len(ttft))
        all_tpot[multi] = tpot
        good = goodput(ttft, all_tpot, e2e, goodput_ms)
        fraction = int(good.sum()) / len(good) if len(good) else None
        summary = replace(
            summary,
            goodput_ms=dict(goodput_ms),
            num_good_requests=int(good.sum()),
            good_request_fraction=fraction,
            # vLLM's good requests / duration; in the steady window, the served rate times the
            # measured share of good requests (the two agree in the full window).
            request_goodput_req_s=summary.request_throughput_req_s * fraction
            if fraction is not None
            else 0.0,
        )
    return summary
