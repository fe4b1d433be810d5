"""Rebuild a benchmark run from its aggregate-only result, for a fit by simulation.

What most users keep of a ``vllm bench serve`` run is its summary: the result JSON without
``--save-detailed`` (no per-request arrays), its console report, or a row of the nightly results
table. Such a run is rebuilt as a scenario from what the file records (VLLM_FORMATS.md §1.2):

* requests: ``num_prompts`` (else ``completed`` + ``failed``); an open loop is simulated whole
  (up to :data:`MAX_SIMULATED_REQUESTS`), a closed loop of N clients for at least
  :data:`MAX_CLOSED_LOOP_REQUESTS` requests or 4·N (its steady state); a cut is noted;
* arrivals: ``request_rate`` with ``burstiness`` b as gamma gaps of variation ``1/sqrt(b)``
  (Poisson at b = 1); an unlimited rate with ``max_concurrency`` N is N closed-loop clients, and
  without a cap every request at once;
* lengths: every request at the run's mean prompt and output length, ``total_input_tokens`` and
  ``total_output_tokens`` over ``completed`` (or the token over the request throughputs): an
  aggregate keeps no length distribution, which is why p99 statistics are weighted loosely.

The statistics fitted against are the reported mean, median and p99 TTFT, TPOT and ITL, and the
output and request throughputs of a closed loop with fewer clients than requests; an open loop's
throughput (set by its arrival draws and its longest requests, which the file does not keep) is
only compared (:mod:`calibration.fit_simulation`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from calibration.fit_simulation import Experiment
from sim.artifacts.schema import ParsedArtifact
from sim.errors import CalibrationError

#: Cap on requests simulated per rebuilt run (each evaluation reruns every run of the fit). An
#: open loop is simulated whole up to this: when it overloads the engine its queue, and so its
#: TTFT, grows with the number of requests.
MAX_SIMULATED_REQUESTS = 2000
#: A closed loop reaches its steady state within a few rounds of its clients: at least this many
#: requests, or four per client, are simulated.
MAX_CLOSED_LOOP_REQUESTS = 400
AGGREGATE_KINDS = (
    "vllm_bench_json",
    "vllm_bench_stdout",
    "vllm_nightly_aggregate",
    "sglang_bench_jsonl",
)
_STAT_KEYS = {"mean": "mean", "median": "p50", "p99": "p99"}
_THROUGHPUT_KEYS = ("output_throughput", "request_throughput")


def measured_statistics(artifact: ParsedArtifact) -> dict[str, float]:
    """The fit statistics the artifact reports (ms for latencies), positive and finite only."""
    a = artifact.aggregates
    out: dict[str, float] = {}
    for metric in ("ttft", "tpot", "itl"):
        for key, stat in _STAT_KEYS.items():
            value = a.get(f"{key}_{metric}_ms")
            if value is not None and math.isfinite(value) and value > 0:
                out[f"{metric}_{stat}"] = float(value)
    for key in _THROUGHPUT_KEYS:
        value = a.get(key)
        if value is not None and math.isfinite(value) and value > 0:
            out[key] = float(value)
    return out


def is_aggregate_only(artifact: ParsedArtifact) -> bool:
    """Whether the artifact is a benchmark summary without per-request latencies."""
    requests = artifact.requests
    has_requests = requests is not None and requests.ttft_s is not None
    return artifact.kind in AGGREGATE_KINDS and not has_requests


def _mean_lengths(artifact: ParsedArtifact, label: str) -> tuple[float, float, float]:
    """(completed requests, mean prompt tokens, mean output tokens)."""
    a = artifact.aggregates
    completed = a.get("completed")
    if completed is not None and completed > 0 and a.get("total_output_tokens"):
        prompt = a.get("total_input_tokens", float("nan")) / completed
        return completed, prompt, a["total_output_tokens"] / completed
    rate, out_rate, total = (
        a.get("request_throughput"),
        a.get("output_throughput"),
        a.get("total_token_throughput"),
    )
    if rate and out_rate and total:
        count = a.get("num_prompts") or a.get("completed") or 0.0
        return count, (total - out_rate) / rate, out_rate / rate
    if completed is not None and completed <= 0:
        raise CalibrationError(f"{label}: the run completed no request; nothing to fit against")
    raise CalibrationError(
        f"{label}: expected total_input_tokens, total_output_tokens and completed (or the token "
        "and request throughputs) to rebuild the run's lengths; the file has none"
    )


def _arrival(
    artifact: ParsedArtifact, label: str, num_requests: int
) -> tuple[dict[str, Any], list[str]]:
    meta = artifact.metadata
    notes: list[str] = []
    rate = meta.request_rate_per_s
    concurrency = meta.max_concurrency
    recorded = str(meta.settings.get("request_rate", meta.settings.get("test_name", "")))
    unlimited = "inf" in recorded.lower() or artifact.aggregates.get("request_rate") == math.inf
    if rate is not None:
        burstiness = meta.settings.get("burstiness")
        if concurrency is not None and concurrency < num_requests:
            notes.append(
                f"max_concurrency {concurrency} at a finite rate: the client cap is not simulated "
                "(open-loop arrivals at the recorded rate)"
            )
        if isinstance(burstiness, int | float) and burstiness > 0 and burstiness != 1:
            cv = 1.0 / math.sqrt(float(burstiness))
            return {"process": "gamma", "rate_per_s": rate, "cv": cv}, notes
        return {"process": "poisson", "rate_per_s": rate}, notes
    if concurrency is not None:
        if not unlimited:
            notes.append("no request rate recorded; read as unlimited (a concurrency sweep)")
        return {"process": "closed_loop", "concurrency": min(concurrency, num_requests)}, notes
    if unlimited:
        return {"process": "closed_loop", "concurrency": num_requests}, notes
    raise CalibrationError(
        f"{label}: the file records neither the request rate nor the maximum concurrency, so the "
        "run's arrivals cannot be rebuilt"
    )


def aggregate_experiment(
    artifact: ParsedArtifact, label: str, gpu: str, model: str, tp: int, preset: str = "vllm-v1"
) -> Experiment:
    """The scenario that rebuilds an aggregate-only run, with the statistics it reported.

    Raise CalibrationError naming ``label`` if the run reports no statistic to fit against, is a
    speculative run (its drafting setup is not recorded), or lacks its lengths or arrivals.
    """
    measured = measured_statistics(artifact)
    if not measured:
        raise CalibrationError(
            f"{label}: nothing to fit against: no mean/median/p99 TTFT, TPOT or ITL and no "
            "throughput in the file"
        )
    if artifact.spec_decode is not None:
        raise CalibrationError(
            f"{label}: a speculative run: its drafting method and draft model are not recorded "
            "in an aggregate file, so it cannot be rebuilt for the step-cost fit (its acceptance "
            "counters are still fitted)"
        )
    completed, prompt, output = _mean_lengths(artifact, label)
    a = artifact.aggregates
    total = a.get("num_prompts") or (completed + (a.get("failed") or 0.0))
    if not total or not math.isfinite(prompt) or prompt < 1 or output < 1:
        raise CalibrationError(
            f"{label}: cannot rebuild the run: {total:g} requests, mean prompt {prompt:.4g} and "
            f"output {output:.4g} tokens"
        )
    num_requests = round(total)
    arrival, notes = _arrival(artifact, label, num_requests)
    simulated = min(num_requests, MAX_SIMULATED_REQUESTS)
    if arrival["process"] == "closed_loop" and arrival["concurrency"] < num_requests:
        simulated = min(num_requests, max(MAX_CLOSED_LOOP_REQUESTS, 4 * arrival["concurrency"]))
    if simulated < num_requests:
        notes.append(f"{simulated} of the run's {num_requests} requests simulated")
    if arrival["process"] == "closed_loop":
        arrival["concurrency"] = min(arrival["concurrency"], simulated)
    if output < 1.5:
        for stat in list(measured):
            if stat.startswith(("tpot", "itl")):
                del measured[stat]
    reported: dict[str, float] = {}
    if arrival["process"] != "closed_loop" or arrival["concurrency"] >= simulated:
        # Open loop or all at once: the duration is set by the arrivals drawn and the longest
        # requests, which an aggregate does not record; compared, not fitted.
        reported = {k: measured.pop(k) for k in _THROUGHPUT_KEYS if k in measured}
    if not measured:
        raise CalibrationError(
            f"{label}: nothing to fit against: only throughput is reported, and an open-loop "
            "run's throughput is set by its arrivals, not by the step cost"
        )
    notes.append(
        f"lengths fixed at the run's means: {prompt:.1f} prompt and {output:.1f} output tokens"
    )
    document = {
        "name": f"rebuilt-{Path(label).stem}",
        "hardware": {"gpu": gpu, "num_gpus": tp},
        "model": model,
        "engine": {"preset": preset},
        "workload": {
            "num_requests": simulated,
            "arrival": arrival,
            "prompt_tokens": {"distribution": "fixed", "value": max(1, round(prompt))},
            "output_tokens": {"distribution": "fixed", "value": max(1, round(output))},
        },
    }
    return Experiment(label, document, measured, tuple(notes), reported)


def check_same_node(targets: Sequence[tuple[str, ParsedArtifact]], resolve_model: Any) -> None:
    """Refuse to pool runs that state different models, GPUs or TP degrees.

    ``resolve_model`` maps a recorded model id to its catalogue name (or None).
    Raise CalibrationError naming the two files and the values that differ.
    """
    seen: dict[str, tuple[str, str]] = {}
    for label, artifact in targets:
        meta = artifact.metadata
        stated = {
            "model": resolve_model(meta.model) or meta.model,
            "GPU": meta.gpu,
            "TP": None if meta.tensor_parallel_size is None else str(meta.tensor_parallel_size),
        }
        for what, value in stated.items():
            if value is None:
                continue
            if what in seen and seen[what][1] != value:
                first_label, first_value = seen[what]
                raise CalibrationError(
                    f"{label}: {what} {value!r} differs from {first_label}'s {first_value!r}: "
                    "runs of different nodes cannot make one fit; calibrate them separately"
                )
            seen.setdefault(what, (label, str(value)))
