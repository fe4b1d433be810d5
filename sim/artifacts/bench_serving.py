"""Result JSON of vLLM's serving benchmark, ``benchmark_serving.py`` (2023-2025) and ``vllm bench
serve``.

A file holds one result object, or several appended as JSON Lines (``--append-result``); each
object is one run. Every per-request array is optional (``--save-detailed`` drops them from 0.9.2
on). Quirks handled, by era (VLLM_FORMATS.md §1.3):

* ``request_goodput:`` with a trailing colon (≈0.6.4-0.9.0) is read as ``request_goodput``;
* ``request_rate`` may be the string ``"inf"`` or the literal ``Infinity``: an unlimited rate
  (None);
* ``start_times`` (0.15+) are ``time.perf_counter()`` stamps with an arbitrary epoch: rebased to the
  earliest, minus the client queue time when ``queue_times`` (0.30+) is present;
* failed requests carry ``ttft = 0``, ``output_len = 0`` and a non-empty ``errors[i]``: their TTFT
  and end-to-end latency become NaN;
* ≈v0.4-0.6 files swap ``mean_e2el_ms`` and ``median_e2el_ms`` (``np.median``/``np.mean`` swapped in
  the script); the swap is undone, checked against the per-request arrays when they allow it;
* the ``spec_decode_*`` block (0.14+) gives the acceptance rate in percent (turned into a fraction)
  and per-position rates as fractions.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sim.artifacts.reading import (
    Source,
    as_count,
    as_float,
    count_array,
    failure,
    float_array,
    float_lists,
    json_objects,
    optional_float,
    rate_per_s,
    read_source,
    same_lengths,
    string_list,
)
from sim.artifacts.schema import ParsedArtifact, RequestTable, RunMetadata, SpecDecodeSummary

KIND = "vllm_bench_json"

# First inspected vLLM release whose result JSON carries the key (VLLM_FORMATS.md §1.3).
_KEY_INTRODUCED_IN: tuple[tuple[str, str], ...] = (
    ("server_queue_times", "0.33"),
    ("latencies", "0.30"),
    ("queue_times", "0.30"),
    ("probe_completed", "0.27"),
    ("rtfx", "0.17"),
    ("start_times", "0.15"),
    ("spec_decode_acceptance_length", "0.14"),
    ("failed", "0.12"),
    ("max_output_tokens_per_s", "0.11"),
    ("request_goodput", "0.9.2"),
    ("burstiness", "0.6.4"),
)
# User --metadata keys we understand when present (the JSON does not save sampling parameters).
_METADATA_ALIASES = {
    "temperature": ("temperature",),
    "tensor_parallel_size": ("tensor_parallel_size", "tp", "tp_size"),
    "gpu": ("gpu", "gpu_type", "hardware"),
    "method": ("speculative_method", "spec_method", "method"),
    "num_speculative_tokens": ("num_speculative_tokens", "num_spec_tokens", "k"),
}


def parse_bench_serving_json(path: Path) -> tuple[ParsedArtifact, ...]:
    """Parse a vLLM benchmark result file into one ParsedArtifact per result object.

    Raise CalibrationError if the file is not JSON, or an object is not a vLLM benchmark result.
    """
    source = read_source(path)
    sidecar = _read_commands_sidecar(Path(path))
    return tuple(_parse_run(source, line, result, sidecar) for line, result in json_objects(source))


def _parse_run(
    source: Source, line: int, result: dict[str, object], sidecar: dict[str, str]
) -> ParsedArtifact:
    if not any(key in result for key in ("completed", "duration", "request_throughput")):
        raise failure(
            source, "a vLLM benchmark result object with 'completed' and 'duration' keys", line
        )
    notes: list[str] = []
    requests = request_table_from_arrays(result, source, line, notes)
    aggregates = _aggregates(result)
    era = _era(result)
    _undo_e2el_swap(aggregates, requests, era, notes)
    spec = _spec_decode_summary(result, source, line)
    if "request_goodput:" in result:
        notes.append("read key 'request_goodput:' (typo of its era) as request_goodput")
    return ParsedArtifact(
        kind=KIND,
        metadata=_metadata(result, source, line, era, spec, sidecar),
        requests=requests,
        spec_decode=spec,
        aggregates=aggregates,
        notes=tuple(notes),
    )


def request_table_from_arrays(
    result: dict[str, object], source: Source, line: int, notes: list[str]
) -> RequestTable | None:
    """Build the per-request table from a benchmark result's parallel arrays, or None without any.

    Shared by the vLLM and SGLang benchmark parsers, whose array names agree. Raise CalibrationError
    if an array is malformed or the arrays differ in length.
    """
    columns: dict[str, object] = {}
    if "input_lens" in result:
        columns["prompt_tokens"] = count_array(result["input_lens"], source, "input_lens", line)
    if "output_lens" in result:
        columns["output_tokens"] = count_array(result["output_lens"], source, "output_lens", line)
    for key, name in (("ttfts", "ttft_s"), ("latencies", "e2e_s"), ("start_times", "start")):
        if key in result:
            columns[name] = float_array(result[key], source, key, line)
    if "queue_times" in result:
        columns["queue"] = float_array(result["queue_times"], source, "queue_times", line)
    if "itls" in result:
        columns["itls_s"] = float_lists(result["itls"], source, "itls", line)
    if "errors" in result:
        columns["errors"] = string_list(result["errors"], source, "errors", line)
    if not columns:
        return None
    num_requests = same_lengths(columns, source, line)  # type: ignore[arg-type]
    errors = columns.get("errors")
    failed = np.zeros(num_requests, dtype=bool)
    if isinstance(errors, tuple):
        failed = np.array([e is not None for e in errors], dtype=np.bool_)
    ttft = columns.get("ttft_s")
    if isinstance(ttft, np.ndarray):
        ttft[failed] = np.nan
    e2e = columns.get("e2e_s")
    itls = columns.get("itls_s")
    if isinstance(e2e, np.ndarray):
        e2e[failed] = np.nan
    elif isinstance(ttft, np.ndarray) and isinstance(itls, tuple):
        # Before 0.30 the latency was not saved; the last chunk arrives at TTFT + sum(ITL), which
        # is the end-to-end latency up to the final (choice-less) usage chunk.
        e2e = ttft + np.fromiter((g.sum() for g in itls), dtype=np.float64, count=num_requests)
        notes.append("e2e_s derived per request as ttft + sum(itls)")
    arrival = _arrival_at_s(columns.get("start"), columns.get("queue"), notes)
    return RequestTable(
        num_requests=num_requests,
        arrival_at_s=arrival,
        prompt_tokens=columns.get("prompt_tokens"),  # type: ignore[arg-type]
        output_tokens=columns.get("output_tokens"),  # type: ignore[arg-type]
        ttft_s=ttft,  # type: ignore[arg-type]
        itls_s=itls,  # type: ignore[arg-type]
        e2e_s=e2e,  # type: ignore[arg-type]
        errors=errors,  # type: ignore[arg-type]
    )


def _arrival_at_s(start: object, queue: object, notes: list[str]) -> np.ndarray | None:
    if not isinstance(start, np.ndarray) or not np.any(np.isfinite(start)):
        return None
    # start_times are perf_counter() at send; with a concurrency cap the request "arrived" when it
    # started waiting for the client semaphore, queue_times earlier.
    arrival = start - queue if isinstance(queue, np.ndarray) else start.copy()
    notes.append(
        "arrival_at_s = start_times - queue_times, rebased to the earliest"
        if isinstance(queue, np.ndarray)
        else "arrival_at_s = start_times (perf-counter) rebased to the earliest"
    )
    return arrival - np.nanmin(arrival)


def _aggregates(result: dict[str, object]) -> dict[str, float]:
    aggregates: dict[str, float] = {}
    for key, value in result.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            aggregates[key.rstrip(":")] = float(value)
    return aggregates


def _era(result: dict[str, object]) -> str:
    if "request_goodput:" in result:
        return "vllm 0.6.4-0.9.0 (request_goodput: typo)"
    if "burstiness" not in result:
        return "vllm benchmark_serving.py ~0.4-0.6 (2024)"
    for key, release in _KEY_INTRODUCED_IN:
        if key in result:
            return f"vllm>={release}"
    return "vllm>=0.6.4"


def _undo_e2el_swap(
    aggregates: dict[str, float], requests: RequestTable | None, era: str, notes: list[str]
) -> None:
    if "mean_e2el_ms" not in aggregates or "median_e2el_ms" not in aggregates:
        return
    stored_mean, stored_median = aggregates["mean_e2el_ms"], aggregates["median_e2el_ms"]
    swapped = "~0.4-0.6" in era
    if requests is not None and requests.e2e_s is not None:
        e2e_ms = requests.e2e_s[np.isfinite(requests.e2e_s)] * 1000.0
        if e2e_ms.size:
            mean, median = float(e2e_ms.mean()), float(np.median(e2e_ms))
            as_is = abs(stored_mean - mean) + abs(stored_median - median)
            crossed = abs(stored_mean - median) + abs(stored_median - mean)
            swapped = crossed < as_is
    if swapped:
        aggregates["mean_e2el_ms"], aggregates["median_e2el_ms"] = stored_median, stored_mean
        notes.append("mean_e2el_ms and median_e2el_ms were swapped in the file; swapped back")


def _spec_decode_summary(
    result: dict[str, object], source: Source, line: int
) -> SpecDecodeSummary | None:
    if not any(key.startswith("spec_decode_") for key in result):
        return None

    def count(key: str) -> int | None:
        value = result.get(key)
        return None if value is None else as_count(value, source, key, line)

    rate_percent = optional_float(
        result.get("spec_decode_acceptance_rate"), source, "spec_decode_acceptance_rate", line
    )
    per_position = result.get("spec_decode_per_position_acceptance_rates")
    rates = (
        None
        if per_position is None
        else tuple(float(r) for r in float_array(per_position, source, "per-position rates", line))
    )
    return SpecDecodeSummary(
        layout="vllm-bench-json-0.14",
        num_drafts=count("spec_decode_num_drafts"),
        num_draft_tokens=count("spec_decode_draft_tokens"),
        num_accepted_tokens=count("spec_decode_accepted_tokens"),
        mean_acceptance_length=optional_float(
            result.get("spec_decode_acceptance_length"), source, "spec_decode_acceptance_length"
        ),
        draft_acceptance_rate=None if rate_percent is None else rate_percent / 100.0,
        per_position_acceptance_rate=rates,
    )


def _metadata(
    result: dict[str, object],
    source: Source,
    line: int,
    era: str,
    spec: SpecDecodeSummary | None,
    sidecar: dict[str, str],
) -> RunMetadata:
    known: dict[str, object] = {}
    for field, aliases in _METADATA_ALIASES.items():
        for alias in aliases:
            if result.get(alias) is not None:
                known[field] = result[alias]
                break
    num_spec = known.get("num_speculative_tokens")
    if num_spec is None and spec is not None and spec.per_position_acceptance_rate:
        num_spec = len(spec.per_position_acceptance_rate)
    tp = known.get("tensor_parallel_size")
    concurrency = result.get("max_concurrency")
    settings = {
        key: value
        for key, value in result.items()
        if isinstance(value, str | bool) or (key in ("label", "burstiness") and value is not None)
    }
    settings.update({f"sidecar.{key}": value for key, value in sidecar.items()})
    temperature = known.get("temperature")
    return RunMetadata(
        source_path=str(source.path),
        source_sha256=source.sha256,
        engine="vllm",
        engine_era=era,
        method=str(known["method"]) if "method" in known else None,
        num_speculative_tokens=None
        if num_spec is None
        else as_count(num_spec, source, "num_speculative_tokens", line),
        temperature=None
        if temperature is None
        else as_float(temperature, source, "temperature", line),
        model=str(result.get("model_id") or result.get("tokenizer_id") or "") or None,
        tensor_parallel_size=None
        if tp is None
        else as_count(tp, source, "tensor_parallel_size", line),
        gpu=str(known.get("gpu") or sidecar.get("gpu_type") or "") or None,
        request_rate_per_s=rate_per_s(result.get("request_rate"), source, "request_rate", line),
        max_concurrency=None
        if concurrency is None
        else as_count(concurrency, source, "max_concurrency", line),
        settings=settings,  # type: ignore[arg-type]
    )


def _read_commands_sidecar(path: Path) -> dict[str, str]:
    """Read the nightly-benchmark ``<name>.commands`` file beside a result, if there is one.

    The sidecar is optional context (GPU type, client command); an unreadable one is ignored.
    """
    sidecar = path.with_suffix(".commands")
    try:
        data = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, str)}
