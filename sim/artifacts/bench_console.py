"""The console report of ``vllm bench serve`` / ``benchmark_serving.py`` (captured stdout).

The report is a fixed-width table of ``"{label:<40} {value:<10}"`` rows under a
``Serving Benchmark Result`` banner (VLLM_FORMATS.md §1.4). Each banner starts a run. Row labels map
to the result-JSON key names (``Mean TTFT (ms)`` → ``mean_ttft_ms``); the ``Speculative Decoding``
section (0.14+) gives the acceptance rate and per-position rates in percent, turned into fractions.
A row whose value was cut off is skipped. The lines the benchmark prints before its run
(``Traffic request rate: 4.0`` or ``inf``, ``Burstiness factor: 1.0 (Poisson process)``,
``Maximum request concurrency: 32`` or ``None``; ``benchmark_serving.py`` and
``vllm/benchmarks/serve.py``) belong to the next report: they say how to rebuild its arrivals.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from sim.artifacts.reading import Source, failure, read_source
from sim.artifacts.schema import ParsedArtifact, RunMetadata, SpecDecodeSummary

KIND = "vllm_bench_stdout"

_BANNER = "Serving Benchmark Result"
_ROW = re.compile(r"^\s*([A-Za-z][^:]*?):\s*(\S+)?\s*$")
_PERCENTILE = re.compile(r"^(Mean|Median|Std|P\d+(?:\.\d+)?) (TTFT|TPOT|ITL|E2EL) \(ms\)$")
_POSITION = re.compile(r"^Position (\d+)$")
_END = re.compile(r"^\s*=+\s*$")
_PRELUDE = {
    "request_rate": re.compile(r"^\s*Traffic request rate:\s*([^\s]+)"),
    "burstiness": re.compile(r"^\s*Burstiness factor:\s*([^\s]+)"),
    "max_concurrency": re.compile(r"^\s*Maximum request concurrency:\s*([^\s]+)"),
}
_KEYS = {
    "Successful requests": "completed",
    "Failed requests": "failed",
    "Maximum request concurrency": "max_concurrency",
    "Benchmark duration (s)": "duration",
    "Total input tokens": "total_input_tokens",
    "Total generated tokens": "total_output_tokens",
    "Request throughput (req/s)": "request_throughput",
    "Request goodput (req/s)": "request_goodput",
    "Output token throughput (tok/s)": "output_throughput",
    "Peak output token throughput (tok/s)": "max_output_tokens_per_s",
    "Peak concurrent requests": "max_concurrent_requests",
    "Total token throughput (tok/s)": "total_token_throughput",
    "Total Token throughput (tok/s)": "total_token_throughput",
    "Acceptance rate (%)": "spec_decode_acceptance_rate",
    "Acceptance length": "spec_decode_acceptance_length",
    "Drafts": "spec_decode_num_drafts",
    "Draft tokens": "spec_decode_draft_tokens",
    "Accepted tokens": "spec_decode_accepted_tokens",
}


def parse_bench_console(path: Path) -> tuple[ParsedArtifact, ...]:
    """Parse every ``Serving Benchmark Result`` report in a captured stdout into one run each.

    Raise CalibrationError if the file has no report or a known row holds a non-number.
    """
    source = read_source(path)
    runs: list[tuple[dict[str, float], dict[int, float]]] = []
    pending: dict[str, float] = {}
    inside = False
    for number, line in enumerate(source.text.splitlines(), start=1):
        if _BANNER in line:
            runs.append((pending, {}))
            pending, inside = {}, True
            continue
        if _END.match(line):
            inside = False
            continue
        if not inside:
            _read_prelude(line, pending)
            continue
        match = _ROW.match(line)
        if not runs or match is None or match.group(2) is None or line.lstrip().startswith("#"):
            continue
        label, text = match.group(1).strip(), match.group(2)
        key = _key(label)
        position = _POSITION.match(label)
        if key is None and position is None:
            continue
        value = _number(text, source, label, number)
        if position is not None:
            runs[-1][1][int(position.group(1))] = value / 100.0
        elif key is not None:
            runs[-1][0][key] = value
    if not runs:
        raise failure(source, f"a '{_BANNER}' report; found none")
    return tuple(_run(source, aggregates, positions) for aggregates, positions in runs)


def _read_prelude(line: str, pending: dict[str, float]) -> None:
    """Keep the rate, burstiness and concurrency printed before a run (``None`` is no cap)."""
    for key, pattern in _PRELUDE.items():
        match = pattern.match(line)
        if match is None:
            continue
        text = match.group(1).rstrip(".")
        try:
            pending[key] = float(text)
        except ValueError:
            pending.pop(key, None)


def _key(label: str) -> str | None:
    if label in _KEYS:
        return _KEYS[label]
    return percentile_key(label)


def percentile_key(label: str) -> str | None:
    """Map a report label such as ``P99 TTFT (ms)`` to its result-JSON key (``p99_ttft_ms``)."""
    match = _PERCENTILE.match(label)
    if match is None:
        return None
    stat = match.group(1).lower()
    return f"{stat}_{match.group(2).lower()}_ms"


def _number(text: str, source: Source, label: str, line: int) -> float:
    try:
        return float(text)
    except ValueError:
        raise failure(source, f"a number after '{label}:'", line) from None


def _run(
    source: Source, aggregates: dict[str, float], positions: dict[int, float]
) -> ParsedArtifact:
    spec_keys = [k for k in aggregates if k.startswith("spec_decode_")]
    rates = tuple(positions[p] for p in sorted(positions)) if positions else None
    spec = None
    if spec_keys or rates:
        percent = aggregates.get("spec_decode_acceptance_rate")

        def count(key: str) -> int | None:
            return round(aggregates[key]) if key in aggregates else None

        spec = SpecDecodeSummary(
            layout="vllm-bench-stdout-0.14",
            num_drafts=count("spec_decode_num_drafts"),
            num_draft_tokens=count("spec_decode_draft_tokens"),
            num_accepted_tokens=count("spec_decode_accepted_tokens"),
            mean_acceptance_length=aggregates.get("spec_decode_acceptance_length"),
            draft_acceptance_rate=None if percent is None else percent / 100.0,
            per_position_acceptance_rate=rates,
        )
    concurrency = aggregates.get("max_concurrency")
    rate = aggregates.get("request_rate")
    settings: dict[str, str | float] = {}
    if rate is not None and not math.isfinite(rate):
        settings["request_rate"] = "inf"
    if "burstiness" in aggregates:
        settings["burstiness"] = aggregates["burstiness"]
    metadata = RunMetadata(
        source_path=str(source.path),
        source_sha256=source.sha256,
        engine="vllm",
        engine_era="vllm>=0.11 (Peak rows)" if "max_concurrent_requests" in aggregates else None,
        num_speculative_tokens=len(rates) if rates else None,
        max_concurrency=None if concurrency is None else round(concurrency),
        request_rate_per_s=rate if rate is not None and math.isfinite(rate) and rate > 0 else None,
        settings=settings,
    )
    return ParsedArtifact(kind=KIND, metadata=metadata, spec_decode=spec, aggregates=aggregates)
