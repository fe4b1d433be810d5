"""Prometheus text-exposition scrapes of a vLLM (or SGLang) ``/metrics`` endpoint.

One file may hold one scrape or several concatenated; a new scrape starts where a series (name and
labels) repeats. Several files are read in the order given. Rows of a Prometheus query-result table
(``series | value``) are accepted as samples too. Counters are summed over the ``engine`` label
(data-parallel ranks, vLLM PR #24049) and differenced between consecutive scrapes, a counter that
went down being a restart (Prometheus ``rate()`` semantics); a single scrape gives one interval that
counts from server start. ``*_created`` series (creation timestamps) are ignored. Series of several
served models make one run per model.

vLLM V0 spec-decode counters are refused: V0 incremented them by the cumulative value at every log
interval (sum-of-sums bug, vLLM PR #15415, never merged), so neither their values nor their
differences mean anything.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.artifacts.reading import Source, failure, read_source
from sim.artifacts.schema import ParsedArtifact, RunMetadata
from sim.artifacts.tables import IntervalRow, interval_table, spec_summary_from_intervals

KIND = "prometheus"

_SAMPLE = re.compile(
    r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(?:\|\s*)?(\S+)(?:\s+(-?\d{1,18}))?\s*$"
)
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_V0_SPEC_SERIES = (
    "vllm:spec_decode_draft_acceptance_rate",
    "vllm:spec_decode_efficiency",
    "vllm:spec_decode_num_emitted_tokens_total",
)
_COUNTERS = {
    "num_drafts": "vllm:spec_decode_num_drafts_total",
    "num_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "num_accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}
_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
_GAUGES_SUMMED: dict[str, tuple[str, ...]] = {
    "num_running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "num_waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
}
_GAUGES_AVERAGED: dict[str, tuple[str, ...]] = {
    "kv_cache_usage": (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "sglang:token_usage",
    ),
    "mean_acceptance_length": ("sglang:spec_accept_length",),
}

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True)
class Scrape:
    """One scrape: value per series (name, sorted labels) and its time in ms, if stamped."""

    values: dict[SeriesKey, float]
    timestamp_ms: float | None


def parse_exposition(source: Source) -> list[Scrape]:
    """Return the scrapes in a text-exposition file, in file order.

    Raise CalibrationError naming the line of the first line that is neither a comment, blank, nor a
    sample ``name{label="value",…} number [timestamp]``.
    """
    scrapes: list[Scrape] = []
    values: dict[SeriesKey, float] = {}
    stamp: float | None = None
    for number, raw in enumerate(source.text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise failure(source, 'a Prometheus sample line: name{label="value"} number', number)
        name, label_text, value_text, timestamp = match.groups()
        key = (name, _labels(label_text or "", source, number))
        try:
            value = float(value_text)
        except ValueError:
            raise failure(source, f"a number as the value of {name}", number) from None
        if key in values:
            scrapes.append(Scrape(values, stamp))
            values, stamp = {}, None
        values[key] = value
        if timestamp is not None:
            stamp = max(stamp or float("-inf"), float(timestamp))
    if values:
        scrapes.append(Scrape(values, stamp))
    if not scrapes:
        raise failure(source, "at least one Prometheus sample line; found none")
    return scrapes


def _labels(text: str, source: Source, number: int) -> tuple[tuple[str, str], ...]:
    labels: list[tuple[str, str]] = []
    position = 0
    text = text.strip()
    while position < len(text):
        match = _LABEL.match(text, position)
        if match is None or match.end() == position:
            raise failure(source, 'labels of the form {name="value",…}', number)
        labels.append((match.group(1), match.group(2)))
        position = match.end()
    return tuple(sorted(labels))


def parse_prometheus(path: Path) -> tuple[ParsedArtifact, ...]:
    """Parse one exposition file (one or several scrapes) into one ParsedArtifact per served model.

    Raise CalibrationError if the file is not text exposition or holds vLLM V0 spec-decode counters.
    """
    return parse_prometheus_scrapes([path])


def parse_prometheus_scrapes(
    paths: Sequence[Path], strict: bool = False
) -> tuple[ParsedArtifact, ...]:
    """Parse scrapes from several files, taken in the given order, as one time series.

    With ``strict`` (scrapes taken before and after one run) a counter may not go down between
    consecutive scrapes: that would be a server restart in between, and the difference would
    count a different server.
    Raise CalibrationError if any file is not text exposition, holds vLLM V0 spec-decode
    counters, or (strict) a counter decreases, naming the later file and the metric.
    """
    if not paths:
        raise failure(Path("<no files>"), "at least one Prometheus scrape file")
    sources = [read_source(Path(p)) for p in paths]
    owned = [(source, scrape) for source in sources for scrape in parse_exposition(source)]
    scrapes = [scrape for _, scrape in owned]
    if strict:
        _check_non_decreasing(owned)
    source = sources[0]
    for scrape in scrapes:
        v0_names = sorted({name for name, _ in scrape.values if name in _V0_SPEC_SERIES})
        if v0_names:
            raise failure(
                source,
                f"vLLM V1 spec-decode counters, found V0 series {v0_names}: V0 added the "
                "cumulative count at every log interval (sum-of-sums bug, vLLM PR #15415), so "
                "these counters cannot be used; use the V0 'Speculative metrics' log lines",
            )
    models = sorted(
        {dict(labels).get("model_name", "") for scrape in scrapes for _, labels in scrape.values}
    )
    return tuple(_run(sources, scrapes, model, len(models) > 1) for model in models)


def _check_non_decreasing(owned: Sequence[tuple[Source, Scrape]]) -> None:
    for (before_source, before), (source, after) in itertools.pairwise(owned):
        for key, value in after.values.items():
            name, labels = key
            if not name.endswith("_total") or key not in before.values:
                continue
            if value < before.values[key]:
                label_text = ",".join(f'{k}="{v}"' for k, v in labels)
                raise failure(
                    source,
                    f"counter {name}{{{label_text}}} not to decrease after {before_source.path} "
                    f"({before.values[key]:g} there, {value:g} here): the server restarted "
                    "between the scrapes, so their difference counts two servers",
                )


def _sum(scrape: Scrape, model: str, names: Sequence[str], mean: bool = False) -> float | None:
    for name in names:
        found = [
            value
            for (series, labels), value in scrape.values.items()
            if series == name and dict(labels).get("model_name", "") == model
        ]
        if found:
            return float(np.mean(found)) if mean else float(sum(found))
    return None


def _per_position(scrape: Scrape, model: str) -> dict[int, float]:
    counts: dict[int, float] = {}
    for (series, labels), value in scrape.values.items():
        label_map = dict(labels)
        if series != _PER_POS or label_map.get("model_name", "") != model:
            continue
        position = label_map.get("position", "")
        if position.isdigit() and len(position) < 6:
            counts[int(position)] = counts.get(int(position), 0.0) + value
    return counts


def _difference(current: float | None, previous: float | None) -> float | None:
    if current is None or previous is None or current < previous:
        return current  # first scrape, or a counter reset: counts since the restart
    return current - previous


def _run(sources: list[Source], scrapes: list[Scrape], model: str, split: bool) -> ParsedArtifact:
    rows: list[IntervalRow] = []
    first_ms = next((s.timestamp_ms for s in scrapes if s.timestamp_ms is not None), None)
    pairs = list(zip([None, *scrapes[:-1]], scrapes, strict=True))
    for previous, scrape in pairs if len(scrapes) == 1 else pairs[1:]:
        row: IntervalRow = {"at_s": None}
        if scrape.timestamp_ms is not None and first_ms is not None:
            row["at_s"] = (scrape.timestamp_ms - first_ms) / 1000.0
        for column, name in _COUNTERS.items():
            before = None if previous is None else _sum(previous, model, [name])
            row[column] = _difference(_sum(scrape, model, [name]), before)
        now, before_pos = _per_position(scrape, model), {}
        if previous is not None:
            before_pos = _per_position(previous, model)
        if now:
            row["per_pos_counts"] = [
                _difference(now.get(p, np.nan), before_pos.get(p)) for p in range(max(now) + 1)
            ]
        for column, names in _GAUGES_SUMMED.items():
            row[column] = _sum(scrape, model, names)
        for column, names in _GAUGES_AVERAGED.items():
            row[column] = _sum(scrape, model, names, mean=True)
        rows.append(row)
    table = interval_table(rows)
    notes = ["counters summed over the engine label; *_created series ignored"]
    if len(scrapes) == 1:
        notes.append("single scrape: counters count from server start")
    if split:
        notes.append(f"file holds several models; this run keeps model_name={model!r}")
    labels: dict[str, str] = {
        f"cache_config.{k}": v
        for (name, label_set), _ in scrapes[-1].values.items()
        if name == "vllm:cache_config_info"
        for k, v in label_set
    }
    engines = any("engine" in dict(ls) for s in scrapes for _, ls in s.values)
    positions = _per_position(scrapes[-1], model)
    metadata = RunMetadata(
        source_path=";".join(str(s.path) for s in sources),
        source_sha256=";".join(s.sha256 for s in sources),
        engine="sglang" if _sum(scrapes[-1], model, ["sglang:num_running_reqs"]) else "vllm",
        engine_era="vllm V1 (engine label)" if engines else None,
        model=model or None,
        num_speculative_tokens=max(positions) + 1 if positions else None,
        settings=labels,
    )
    aggregates = {
        name: value
        for name, value in _last_scrape_sums(scrapes[-1], model).items()
        if not name.endswith(("_bucket", "_created"))
    }
    return ParsedArtifact(
        kind=KIND,
        metadata=metadata,
        intervals=table,
        spec_decode=spec_summary_from_intervals(table, "vllm-prometheus-v1"),
        aggregates=aggregates,
        notes=tuple(notes),
    )


def _last_scrape_sums(scrape: Scrape, model: str) -> dict[str, float]:
    sums: dict[str, float] = {}
    for (name, labels), value in scrape.values.items():
        if dict(labels).get("model_name", "") == model:
            sums[name] = sums.get(name, 0.0) + value
    return sums
