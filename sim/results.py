"""Saving and loading one run's folder: summary, records and the resolved scenario.

Step records can be tens of millions of rows; :func:`stream_steps` streams them to disk in chunks
of :data:`CHUNK_ROWS` rows (Parquet row groups when pyarrow is installed, CSV otherwise), so
writing never builds a second copy of the table or its text in memory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from sim.output import atomic_write, check_output_folder, write_json, write_table, write_yaml
from sim.run import ScenarioResult

SUMMARY_FILE = "summary.json"
REQUESTS_FILE = "requests.csv"
STEPS_FILE = "steps.csv"
STEPS_PARQUET_FILE = "steps.parquet"
SCENARIO_FILE = "scenario.resolved.yaml"
#: Every file a run folder may hold: what ``--out`` must not silently replace.
RUN_FILES = (SUMMARY_FILE, REQUESTS_FILE, STEPS_FILE, STEPS_PARQUET_FILE, SCENARIO_FILE)
#: Rows per chunk when streaming step records: 262,144 rows of 19 columns is ~28 MB.
CHUNK_ROWS = 1 << 18


def check_run_output(out_dir: Path, *, force: bool, inputs: tuple[Path, ...] = ()) -> None:
    """Before a run: refuse an ``--out`` that is a file or holds an earlier run's results.

    Raise OutputError saying what exists unless ``force``.
    """
    check_output_folder(out_dir, force=force, writes=RUN_FILES, inputs=inputs)


def requests_frame(result: ScenarioResult) -> pd.DataFrame:
    """One row per request with its derived latencies (seconds)."""
    frame = pd.DataFrame(result.requests)
    frame.insert(0, "request_id", range(len(frame)))
    frame["ttft_s"] = frame["first_token_at_s"] - frame["arrival_at_s"]
    frame["e2e_latency_s"] = frame["finished_at_s"] - frame["arrival_at_s"]
    return frame


def steps_frame(result: ScenarioResult) -> pd.DataFrame:
    """One row per engine step."""
    frame = pd.DataFrame(result.steps)
    frame.insert(0, "step", range(len(frame)))
    return frame


def _chunks(columns: Mapping[str, np.ndarray], rows: int) -> Any:
    """``columns`` with a leading ``step`` number, ``rows`` rows at a time (views, no copies)."""
    total = len(next(iter(columns.values()))) if columns else 0
    for start in range(0, max(total, 1), rows):
        stop = min(start + rows, total)
        chunk = {"step": np.arange(start, stop, dtype=np.int64)}
        chunk.update({name: column[start:stop] for name, column in columns.items()})
        yield chunk


def steps_file_name() -> str:
    """``steps.parquet`` when pyarrow is installed, else ``steps.csv``."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return STEPS_FILE
    return STEPS_PARQUET_FILE


def stream_steps(out_dir: Path, columns: Mapping[str, np.ndarray], rows: int = CHUNK_ROWS) -> Path:
    """Stream step records into ``out_dir`` chunk by chunk, atomically; return the file."""
    path = out_dir / steps_file_name()
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        def write_parquet(handle: IO[Any]) -> None:
            writer: Any = None
            for chunk in _chunks(columns, rows):
                table = pa.table(chunk)
                if writer is None:
                    writer = pq.ParquetWriter(handle, table.schema)
                writer.write_table(table)
            if writer is not None:
                writer.close()

        atomic_write(path, write_parquet, binary=True)
    else:

        def write_csv(handle: IO[Any]) -> None:
            for index, chunk in enumerate(_chunks(columns, rows)):
                pd.DataFrame(chunk).to_csv(handle, index=False, header=index == 0)

        atomic_write(path, write_csv)
    return path


def save_result(result: ScenarioResult, out_dir: Path, *, write_steps: bool = True) -> None:
    """Write the resolved scenario, ``requests.csv``, the step records (streamed; see
    :func:`stream_steps`) and ``summary.json`` last, so a folder with a summary is complete."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_yaml(out_dir / SCENARIO_FILE, result.resolved_scenario)
    write_table(out_dir / REQUESTS_FILE, requests_frame(result))
    if write_steps:
        stream_steps(out_dir, result.steps)
    write_json(out_dir / SUMMARY_FILE, result.summary)


def load_summary(folder: Path) -> dict[str, Any]:
    """The ``summary.json`` of a run folder."""
    data: dict[str, Any] = json.loads((folder / SUMMARY_FILE).read_text(encoding="utf-8"))
    return data
