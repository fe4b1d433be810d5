"""Reading recorded requests: trace files to replay and value lists to sample lengths from.

A trace is a CSV with one row per request and the columns ``arrived_at`` (seconds),
``num_prefill_tokens`` and ``num_decode_tokens`` (the layout of the Splitwise/Azure 2023 traces as
Vidur processes them), or any file :func:`sim.artifacts.replay.read_replay_requests` reads: a
``vllm bench serve`` result JSON or a request-timings ``requests.jsonl``.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sim.errors import ScenarioError
from sim.inputs import InputError, read_text

if TYPE_CHECKING:
    from sim.artifacts.replay import ReplayRequests

CSV_COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
#: As sim.workload.config.MAX_SIMULATED_S: 2**32 s, below which float64 resolves a microsecond.
MAX_TRACE_SPAN_S = float(2**32)


@dataclass(frozen=True, eq=False)
class TraceRequests:
    """The requests of a trace, in arrival order.

    ``arrival_at_s`` is None when the trace records no times; then ``request_rate_per_s`` is the
    rate at which it was sent (None: all at once).
    """

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    arrival_at_s: np.ndarray | None
    request_rate_per_s: float | None
    source: str

    @property
    def num_requests(self) -> int:
        return len(self.prompt_tokens)


def resolve_path(path: Path, base_dir: Path) -> Path:
    """``path`` as written, or relative to ``base_dir`` (the scenario file's folder)."""
    path = path.expanduser()
    return path if path.is_absolute() else base_dir / path


def _read_csv(path: Path, columns: list[str]) -> dict[str, np.ndarray]:
    """The named numeric columns of a CSV file (read with the standard library: no pandas import).

    Raise ScenarioError if the file is missing or unreadable, a column is absent, or a cell is not a
    finite number (naming the file and line).
    """
    try:
        text = read_text(path)
    except InputError as exc:
        raise ScenarioError(f"cannot read CSV: {exc}") from None
    try:
        with io.StringIO(text, newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if header is None:
                raise ScenarioError(f"{path}: cannot read CSV: the file is empty")
            header = [name.strip() for name in header]
            missing = [name for name in columns if name not in header]
            if missing:
                raise ScenarioError(f"{path}: missing column(s) {missing}; the file has {header}")
            index = [header.index(name) for name in columns]
            cells: list[list[str]] = [[] for _ in columns]
            for line_number, row in enumerate(reader, start=2):
                if not row:
                    continue
                for slot, i in enumerate(index):
                    cells[slot].append(row[i] if i < len(row) else "")
                    if i >= len(row):
                        raise ScenarioError(
                            f"{path}, line {line_number}: missing column {columns[slot]!r}"
                        )
    except csv.Error as error:
        raise ScenarioError(f"{path}: cannot read CSV: {error}") from error
    frame: dict[str, np.ndarray] = {}
    for name, raw in zip(columns, cells, strict=True):
        values = np.array([_number(cell) for cell in raw], dtype=np.float64)
        bad = ~np.isfinite(values)
        if bad.any():
            row_index = int(np.argmax(bad))
            raise ScenarioError(
                f"{path}, line {row_index + 2}: column {name!r} must be a finite number, "
                f"got {raw[row_index]!r}"
            )
        frame[name] = values
    return frame


def _number(cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        return float("nan")


def _token_counts(values: np.ndarray, where: str) -> np.ndarray:
    """Token counts as int64; non-negative integers only.

    Raise ScenarioError naming ``where`` and the first offending value.
    """
    values = np.asarray(values, dtype=np.float64)
    bad = (values < 0) | (values != np.floor(values)) | ~np.isfinite(values)
    if bad.any():
        index = int(np.argmax(bad))
        raise ScenarioError(
            f"{where}: token counts must be non-negative integers, got {values[index]} "
            f"at entry {index}"
        )
    return values.astype(np.int64)


def _read_csv_trace(path: Path) -> TraceRequests:
    frame = _read_csv(path, list(CSV_COLUMNS))
    if len(frame["arrived_at"]) == 0:
        raise ScenarioError(f"{path}: the trace has no requests")
    arrival_at_s = frame["arrived_at"]
    decreasing = np.diff(arrival_at_s) < 0
    if decreasing.any():
        row = int(np.argmax(decreasing)) + 1
        raise ScenarioError(
            f"{path}, line {row + 2}: arrived_at decreases "
            f"({arrival_at_s[row - 1]} then {arrival_at_s[row]}); traces must be in arrival order"
        )
    span = float(arrival_at_s[-1] - arrival_at_s[0])
    if span > MAX_TRACE_SPAN_S:
        raise ScenarioError(
            f"{path}: arrived_at spans {span:.3g} s; past {MAX_TRACE_SPAN_S:.3g} s (136 years) "
            "simulated times lose microsecond precision; are the times in seconds?"
        )
    return TraceRequests(
        prompt_tokens=_token_counts(frame["num_prefill_tokens"], str(path)),
        output_tokens=_token_counts(frame["num_decode_tokens"], str(path)),
        arrival_at_s=arrival_at_s - arrival_at_s[0],
        request_rate_per_s=None,
        source=str(path),
    )


def read_trace(path: Path) -> TraceRequests:
    """The requests recorded at ``path``: a CSV trace, or a vLLM benchmark / request-timings file.

    Raise ScenarioError if a CSV trace is malformed or out of order; the readers of the vLLM formats
    raise their own SpecsimError (CalibrationError) naming the file and line.
    """
    if not path.is_file():
        raise ScenarioError(f"workload.arrival.path: no such file {path}")
    if path.suffix.lower() == ".csv":
        return _read_csv_trace(path)
    # Imported here: the artifact readers are only needed for vLLM and SGLang files.
    from sim.artifacts.replay import read_replay_requests

    return trace_of_replay(read_replay_requests(path))


def trace_of_replay(replay: ReplayRequests) -> TraceRequests:
    """The requests of a real run read by :func:`sim.artifacts.replay.read_replay_requests`, as a
    trace: a caller that replays one artifact many times (a replay fit) reads it once and hands
    the result to every run (``build_simulation(..., trace=...)``)."""
    arrival_at_s = replay.arrival_at_s
    rate_per_s = replay.request_rate_per_s
    return TraceRequests(
        prompt_tokens=np.asarray(replay.prompt_tokens, dtype=np.int64),
        output_tokens=np.asarray(replay.output_tokens, dtype=np.int64),
        arrival_at_s=None if arrival_at_s is None else np.asarray(arrival_at_s, dtype=np.float64),
        request_rate_per_s=None if rate_per_s is None else float(rate_per_s),
        source=str(replay.source),
    )


def read_length_values(path: Path, column: str | None, key_path: str) -> np.ndarray:
    """The recorded lengths to sample from: a CSV ``column``, or a JSON list (or object key).

    Raise ScenarioError if the file is missing or malformed, ``column`` is absent (or not given for
    a CSV), or a value is not a non-negative integer; ``key_path`` names the scenario key.
    """
    if not path.is_file():
        raise ScenarioError(f"{key_path}.path: no such file {path}")
    if path.suffix.lower() == ".csv":
        if column is None:
            raise ScenarioError(f"{key_path}.column: a CSV file ({path}) needs a column name")
        values = _read_csv(path, [column])[column]
    else:
        try:
            data = json.loads(read_text(path))
        except InputError as error:
            raise ScenarioError(f"cannot read JSON: {error}") from None
        except (ValueError, RecursionError) as error:
            raise ScenarioError(f"{path}: cannot read JSON: {error}") from error
        if column is not None:
            if not isinstance(data, dict) or column not in data:
                raise ScenarioError(f"{key_path}.column: {path} has no key {column!r}")
            data = data[column]
        if not isinstance(data, list) or not all(
            isinstance(value, int | float) and not isinstance(value, bool) for value in data
        ):
            raise ScenarioError(f"{path}: expected a JSON list of numbers")
        values = np.asarray(data, dtype=np.float64)
    if values.size == 0:
        raise ScenarioError(f"{path}: no values to sample lengths from")
    return _token_counts(values, str(path))


def take_requests(trace: TraceRequests, num_requests: int, loop: bool) -> TraceRequests:
    """The first ``num_requests`` requests of ``trace``, repeating it end to end if ``loop``.

    Each repetition starts one mean gap after the previous one's last arrival, so looping keeps the
    trace's rate: period = (last − first) · n / (n − 1). A trace without times repeats its lengths.

    Raise ScenarioError if more requests are asked for than the trace holds and ``loop`` is false.
    """
    available = trace.num_requests
    if num_requests > available and not loop:
        raise ScenarioError(
            f"workload.num_requests: {num_requests} requested but {trace.source} holds "
            f"{available}; lower num_requests or set workload.arrival.loop: true"
        )
    num_repeats = -(-num_requests // available)
    arrival_at_s = None
    if trace.arrival_at_s is not None:
        times = trace.arrival_at_s - trace.arrival_at_s[0]
        period_s = times[-1] * available / (available - 1) if available > 1 else 0.0
        offsets_s = np.repeat(np.arange(num_repeats) * period_s, available)
        arrival_at_s = (np.tile(times, num_repeats) + offsets_s)[:num_requests]
    return TraceRequests(
        prompt_tokens=np.tile(trace.prompt_tokens, num_repeats)[:num_requests],
        output_tokens=np.tile(trace.output_tokens, num_repeats)[:num_requests],
        arrival_at_s=arrival_at_s,
        request_rate_per_s=trace.request_rate_per_s,
        source=trace.source,
    )
