"""Saving one run's folder (:class:`sim.run_folder.RunFolder` names its files): summary,
records, the resolved scenario and ``vllm_bench.json``.

Step records can be tens of millions of rows. A run given a folder writes them as it goes
(:func:`sim.run.execute`'s ``steps_to``, through a :class:`StepStreamWriter`); a run that held
them is written by :func:`stream_steps`, in chunks of :data:`CHUNK_ROWS` rows either way (Parquet
row groups when pyarrow is installed, CSV otherwise), so writing never builds a second copy of
the table or its text in memory, and both give the same bytes. ``requests.csv`` is written in
chunks of :data:`REQUEST_CHUNK_ROWS` rows too.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from sim.engine.recorder import CHUNK_ROWS
from sim.output import (
    atomic_write,
    check_output_folder,
    current_umask,
    temporary_beside,
    write_json,
    write_yaml,
)
from sim.run import ScenarioResult
from sim.run_folder import RUN_FILES, STEPS_FILE, STEPS_PARQUET_FILE, RunFolder
from sim.scenario import Scenario
from sim.vllm_bench import vllm_bench_result

#: Requests per chunk of ``requests.csv``: pandas formats a chunk as Python strings first
#: (some 60 bytes a value, 17 columns: ~35 MB for 32,768 rows).
REQUEST_CHUNK_ROWS = 1 << 15


def scenario_inputs(scenario: Scenario, base_dir: Path) -> tuple[Path, ...]:
    """The files a scenario reads (trace and recorded lengths), resolved as the run resolves
    them: outputs must never replace them."""
    workload = scenario.workload
    paths = [
        getattr(part, "path", None)
        for part in (workload.arrival, workload.prompt_tokens, workload.output_tokens)
    ]
    return tuple(p if p.is_absolute() else base_dir / p for p in paths if p is not None)


def check_run_output(out_dir: Path, *, force: bool, inputs: tuple[Path, ...] = ()) -> None:
    """Before a run: refuse an ``--out`` that is a file or holds an earlier run's results.

    Raise OutputError saying what exists unless ``force``, or if a file to write is an input.
    """
    check_output_folder(out_dir, force=force, writes=RUN_FILES, inputs=inputs)


def request_columns(
    result: ScenarioResult, start: int = 0, stop: int | None = None
) -> dict[str, np.ndarray]:
    """The columns of :func:`requests_frame`, rows ``start`` to ``stop``: ``request_id``, the
    recorded columns, then the derived latencies (seconds)."""
    columns = {name: np.asarray(column[start:stop]) for name, column in result.requests.items()}
    count = len(next(iter(columns.values()))) if columns else 0
    arrival = columns["arrival_at_s"]
    # The recorded times may be inf (a request not served) or NaN; where both sides are inf the
    # latency is NaN, as pandas' own subtraction gives it, without numpy's warning.
    with np.errstate(invalid="ignore"):
        ttft = columns["first_token_at_s"] - arrival
        e2e = columns["finished_at_s"] - arrival
    return {
        "request_id": np.arange(start, start + count),
        **columns,
        "ttft_s": ttft,
        "e2e_latency_s": e2e,
    }


def requests_frame(result: ScenarioResult, start: int = 0, stop: int | None = None) -> pd.DataFrame:
    """One row per request (``start`` to ``stop``, default all) with its derived latencies
    (seconds)."""
    return pd.DataFrame(request_columns(result, start, stop))


def write_requests(path: Path, result: ScenarioResult, rows: int = REQUEST_CHUNK_ROWS) -> None:
    """Write :func:`requests_frame` as CSV, ``rows`` requests at a time (the same bytes as the
    whole frame's ``to_csv``), atomically. Numeric columns are formatted here, as pandas formats
    them (numpy's shortest round-trip text, NaN empty), without building a frame."""
    total = len(next(iter(result.requests.values()))) if result.requests else 0

    def write(handle: IO[Any]) -> None:
        for start in range(0, max(total, 1), rows):
            text = _requests_csv(result, start, start + rows, header=start == 0)
            if text is None:
                frame = requests_frame(result, start, start + rows)
                frame.to_csv(handle, index=False, header=start == 0)
            else:
                handle.write(text)

    atomic_write(path, write)


def _requests_csv(result: ScenarioResult, start: int, stop: int, header: bool) -> str | None:
    """Rows ``start`` to ``stop`` of :func:`requests_frame` as pandas' ``to_csv`` writes them,
    or None if a column is not numeric (then pandas writes them)."""
    columns = request_columns(result, start, stop)
    texts = []
    for column in columns.values():
        values = np.asarray(column)
        if values.dtype.kind not in "iub" and values.dtype != np.float64:
            return None
        if values.dtype.kind == "f":
            # Python's repr is numpy's shortest round-trip text (what pandas writes); NaN empty.
            text = list(map(repr, values.tolist()))
            for i in np.flatnonzero(np.isnan(values)).tolist():
                text[i] = ""
            texts.append(text)
        else:
            texts.append(list(map(str, values.tolist())))
    lines = [",".join(columns)] if header else []
    lines.extend(map(",".join, zip(*texts, strict=True)))
    return "\n".join(lines) + "\n" if lines else ""


def steps_file_name() -> str:
    """``steps.parquet`` when pyarrow is installed, else ``steps.csv``."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return STEPS_FILE
    return STEPS_PARQUET_FILE


class StepStreamWriter:
    """Step records appended chunk by chunk to a temporary file, renamed into place on close.

    ``write`` takes a mapping of equal-length column arrays (a chunk of steps, numbered on from
    the last chunk); nothing is kept in memory between calls. Parquet chunks become row groups;
    CSV chunks are appended under one header. ``close`` renames the file into place atomically
    with the user's umask; ``abort`` (or an exception inside ``with``) removes it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        fd, tmp = temporary_beside(path)
        os.fchmod(fd, 0o666 & ~current_umask())
        self._tmp = Path(tmp)
        self._handle: IO[Any] = os.fdopen(fd, "wb")
        self._parquet: Any = None
        self._num_rows = 0

    @property
    def num_rows(self) -> int:
        """Steps written so far."""
        return self._num_rows

    def write(self, columns: Mapping[str, np.ndarray]) -> None:
        """Append one chunk of steps."""
        count = len(next(iter(columns.values()))) if columns else 0
        chunk = {"step": np.arange(self._num_rows, self._num_rows + count, dtype=np.int64)}
        chunk.update(columns)
        if self.path.suffix == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.table(chunk)
            if self._parquet is None:
                self._parquet = pq.ParquetWriter(self._handle, table.schema)
            self._parquet.write_table(table)
        else:
            text = pd.DataFrame(chunk).to_csv(index=False, header=self._num_rows == 0)
            self._handle.write(text.encode("utf-8"))
        self._num_rows += count

    def close(self) -> Path:
        """Finish the file and rename it into place; return its path."""
        if self._parquet is not None:
            self._parquet.close()
        self._handle.close()
        os.replace(self._tmp, self.path)
        return self.path

    def abort(self) -> None:
        """Drop the partial file."""
        if self._parquet is not None:
            # Closed here, not by its finaliser after the file it writes to is gone.
            with contextlib.suppress(Exception):
                self._parquet.close()
            self._parquet = None
        self._handle.close()
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> StepStreamWriter:
        return self

    def __exit__(self, kind: object, value: object, trace: object) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()


def stream_steps(out_dir: Path, columns: Mapping[str, np.ndarray], rows: int = CHUNK_ROWS) -> Path:
    """Write step records into ``out_dir`` in chunks of ``rows`` steps; return the file."""
    total = len(next(iter(columns.values()))) if columns else 0
    with StepStreamWriter(out_dir / steps_file_name()) as writer:
        for start in range(0, max(total, 1), rows):
            writer.write({name: column[start : start + rows] for name, column in columns.items()})
    return writer.path


def save_result(
    result: ScenarioResult,
    out_dir: Path,
    *,
    write_steps: bool = True,
    vllm_bench: dict[str, Any] | None = None,
) -> None:
    """Write the resolved scenario, ``requests.csv``, the step records (unless the run wrote
    them as it went; see :func:`stream_steps`), ``vllm_bench.json`` (the run in
    ``vllm bench serve --save-result``'s keys; computed from the records unless given, as it
    must be when the step records were dropped) and ``summary.json`` last, so a folder with a
    summary is complete."""
    out_dir.mkdir(parents=True, exist_ok=True)
    folder = RunFolder(out_dir)
    write_yaml(folder.scenario, result.resolved_scenario)
    write_requests(folder.requests, result)
    if write_steps and result.steps_file is None:
        stream_steps(out_dir, result.steps)
    bench = vllm_bench if vllm_bench is not None else vllm_bench_result(result)
    write_json(folder.vllm_bench, bench)
    write_json(folder.summary, result.summary.to_dict())
