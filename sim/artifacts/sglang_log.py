"""SGLang scheduler ``Decode batch`` log lines, one interval per line (every
``--decode-log-interval`` steps, default 40).

Three layouts are read (VLLM_FORMATS.md §6): ``Decode batch. #running-req: …, accept len: …, ``
(early 2025), the same with ``accept rate`` and ``cuda graph`` (late 2025), and ``Decode batch, …``
(2026, with optional PD-disaggregation fields). ``accept len`` counts accepted drafts plus the bonus
token per verify forward over the window, the same definition as vLLM's mean acceptance length.
``token usage`` is the KV-pool fraction. Only tensor-parallel rank 0 is read, since every rank logs
the same batch. ``Prefill batch`` lines carry no decode statistics and are skipped.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from sim.artifacts.reading import Source, failure, read_source
from sim.artifacts.schema import ParsedArtifact, RunMetadata
from sim.artifacts.spec_decoding_metrics import number
from sim.artifacts.tables import IntervalRow, interval_table, spec_summary_from_intervals

KIND = "sglang_log"

_DECODE = re.compile(r"Decode batch([.,])\s*(.*)$")
_STAMP = re.compile(r"^\[(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)([^\]]*)\]")
_RANK = re.compile(r"\bTP(\d+)\b")
_FIELDS = {
    "num_running": "#running-req",
    "num_waiting": "#queue-req",
    "kv_cache_usage": "token usage",
    "generation_throughput_tok_s": "gen throughput (token/s)",
}


def parse_sglang_log(path: Path) -> ParsedArtifact:
    """Parse SGLang ``Decode batch`` lines into intervals and an acceptance-length summary.

    Raise CalibrationError if a Decode batch line lacks a field or the file has none.
    """
    source = read_source(path)
    rows: list[IntervalRow] = []
    layouts: set[str] = set()
    first_stamp: float | None = None
    for line_number, line in enumerate(source.text.splitlines(), start=1):
        match = _DECODE.search(line)
        if match is None or line.lstrip().startswith("#"):
            continue
        stamp_match = _STAMP.match(line.strip())
        at_s = float("nan")
        if stamp_match is not None:
            rank = _RANK.search(stamp_match.group(7))
            if rank is not None and int(rank.group(1)) != 0:
                continue
            stamp = _timestamp(stamp_match, source, line_number)
            first_stamp = stamp if first_stamp is None else first_stamp
            at_s = stamp - first_stamp
        rows.append(_row(match.group(2), at_s, source, line_number))
        layouts.add(_layout(match.group(1), match.group(2)))
    if not rows:
        raise failure(source, "SGLang 'Decode batch' log lines; found none")
    table = interval_table(rows)
    layout = "+".join(sorted(layouts))
    return ParsedArtifact(
        kind=KIND,
        metadata=RunMetadata(
            source_path=str(source.path),
            source_sha256=source.sha256,
            engine="sglang",
            engine_era=layout,
        ),
        intervals=table,
        spec_decode=spec_summary_from_intervals(table, layout),
        notes=("mean acceptance length is the unweighted mean of the logged windows",),
    )


def _timestamp(match: re.Match[str], source: Source, line: int) -> float:
    try:
        year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
        return datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()
    except (ValueError, OverflowError):
        raise failure(source, "a valid [YYYY-MM-DD HH:MM:SS] timestamp", line) from None


def _row(body: str, at_s: float, source: Source, line: int) -> IntervalRow:
    fields: dict[str, str] = {}
    for part in re.split(r",\s*", body.strip()):
        key, separator, value = part.partition(": ")
        if separator:
            fields[key.strip()] = value.strip()
    row: IntervalRow = {"at_s": at_s}
    for column, key in _FIELDS.items():
        row[column] = number(fields, key, source, line)
    if "accept len" in fields:
        row["mean_acceptance_length"] = number(fields, "accept len", source, line)
    return row


def _layout(separator: str, body: str) -> str:
    if separator == ",":
        return "sglang-log-2026"
    return "sglang-log-late-2025" if "accept rate" in body else "sglang-log-early-2025"
