"""Per-request timing records of a vLLM run: ``requests.jsonl`` + ``timeseries.csv`` +
``meta.json``.

``requests.jsonl`` has one object per request with ``input_toks``, ``output_toks``, ``arrival_time``
(client wall clock, epoch s) and the engine's ``queued_ts``, ``scheduled_ts``, ``first_token_ts``,
``last_token_ts`` (monotonic s, another clock). TTFT and end-to-end latency are therefore measured
on the server from queueing: ``first_token_ts − queued_ts`` and ``last_token_ts − queued_ts``; the
arrival times are rebased to the first arrival. ``timeseries.csv`` (optional) has one row per tick:
``t, prompt_throughput, gen_throughput, running, waiting, kv_cache_pct`` (percent). ``meta.json``
(optional) gives the model, vLLM version and engine arguments.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from sim.artifacts.reading import (
    Source,
    as_float,
    failure,
    json_objects,
    read_source,
)
from sim.artifacts.schema import IntervalTable, ParsedArtifact, RequestTable, RunMetadata
from sim.artifacts.tables import IntervalRow, interval_table

KIND = "vllm_request_timings"

REQUESTS_FILE = "requests.jsonl"
_REQUIRED = ("input_toks", "output_toks", "arrival_time")
_TIMESERIES_COLUMNS = ("t", "running", "waiting", "kv_cache_pct")


def resolve_requests_file(path: Path) -> Path:
    """Return the ``requests.jsonl`` a folder or one of its sibling files stands for."""
    path = Path(path)
    if path.is_dir():
        return path / REQUESTS_FILE
    if path.name in ("meta.json", "timeseries.csv"):
        return path.parent / REQUESTS_FILE
    return path


def parse_request_timings(path: Path) -> ParsedArtifact:
    """Parse a request-timing folder (or its ``requests.jsonl``) into requests, intervals and
    metadata.

    Raise CalibrationError naming the file and line of a record without token counts or arrival
    time, a malformed ``timeseries.csv`` row, or an unreadable ``meta.json``.
    """
    source = read_source(resolve_requests_file(path))
    folder = source.path.parent
    requests = _requests(source)
    intervals = None
    if (folder / "timeseries.csv").exists():
        intervals = _timeseries(read_source(folder / "timeseries.csv"))
    meta = _meta(folder / "meta.json")
    engine_kwargs = meta.get("engine_kwargs")
    kwargs = engine_kwargs if isinstance(engine_kwargs, dict) else {}
    tp = kwargs.get("tensor_parallel_size")
    settings = {
        f"engine.{k}": v for k, v in kwargs.items() if isinstance(v, str | int | float | bool)
    }
    metadata = RunMetadata(
        source_path=str(source.path),
        source_sha256=source.sha256,
        engine="vllm",
        engine_version=str(meta["vllm_version"]) if "vllm_version" in meta else None,
        model=str(meta["model"]) if "model" in meta else None,
        tensor_parallel_size=tp if isinstance(tp, int) and not isinstance(tp, bool) else None,
        settings=settings,
    )
    return ParsedArtifact(
        kind=KIND,
        metadata=metadata,
        requests=requests,
        intervals=intervals,
        notes=("ttft_s and e2e_s measured on the server from queued_ts (engine clock)",),
    )


def _requests(source: Source) -> RequestTable:
    records = json_objects(source)
    columns = np.full((len(records), 7), np.nan, dtype=np.float64)
    keys = (*_REQUIRED, "queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")
    for row, (line, record) in enumerate(records):
        missing = [key for key in _REQUIRED if key not in record]
        if missing:
            raise failure(source, f"request keys {list(_REQUIRED)}, missing {missing}", line)
        for column, key in enumerate(keys):
            if record.get(key) is not None:
                columns[row, column] = as_float(record[key], source, key, line)
    tokens = columns[:, :2]
    if (
        not np.all(np.isfinite(tokens))
        or np.any(tokens < 0)
        or np.any(tokens != np.round(tokens))
        or np.any(tokens > 2**62)  # past int64: 1e300 tokens would cast to garbage
    ):
        raise failure(
            source, "input_toks and output_toks to be non-negative whole numbers below 2**62"
        )
    arrival, queued, first, last = columns[:, 2], columns[:, 3], columns[:, 5], columns[:, 6]
    finite_arrival = arrival[np.isfinite(arrival)]
    return RequestTable(
        num_requests=len(records),
        arrival_at_s=arrival - finite_arrival.min() if finite_arrival.size else None,
        prompt_tokens=tokens[:, 0].astype(np.int64),
        output_tokens=tokens[:, 1].astype(np.int64),
        ttft_s=first - queued,
        e2e_s=last - queued,
    )


def _timeseries(source: Source) -> IntervalTable | None:
    reader = csv.DictReader(source.text.splitlines())
    try:
        records = list(reader)
    except csv.Error as exc:
        raise failure(source, f"CSV text ({exc})") from None
    header = list(reader.fieldnames or [])
    missing = [c for c in _TIMESERIES_COLUMNS if c not in header]
    if missing:
        raise failure(source, f"CSV columns {list(_TIMESERIES_COLUMNS)}, missing {missing}", 1)
    rows: list[IntervalRow] = []
    for line, record in enumerate(records, start=2):
        values = {}
        for key in (*_TIMESERIES_COLUMNS, "prompt_throughput", "gen_throughput"):
            text = record.get(key)
            values[key] = math.nan if text in (None, "") else as_float(text, source, key, line)
        rows.append(
            {
                "at_s": values["t"],
                "num_running": values["running"],
                "num_waiting": values["waiting"],
                "kv_cache_usage": values["kv_cache_pct"] / 100.0,
                "prompt_throughput_tok_s": values["prompt_throughput"],
                "generation_throughput_tok_s": values["gen_throughput"],
            }
        )
    return interval_table(rows)


def _meta(path: Path) -> dict[str, object]:
    if not path.exists():
        return {}
    text = read_source(path).text  # a clear error for bytes that are not UTF-8
    try:
        meta = json.loads(text)
    except (ValueError, RecursionError):
        raise failure(path, "meta.json to be a JSON object", 1) from None
    if not isinstance(meta, dict):
        raise failure(path, "meta.json to be a JSON object", 1)
    return meta
