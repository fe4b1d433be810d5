"""What one run's folder holds, in one place: the files' names, their paths, and a loader.

A run folder (``specsim run --out``, a compare arm, a sweep point) holds ``summary.json`` (the
:class:`~sim.summary.Summary`, written last so a folder with a summary is complete),
``requests.csv``, the step records (``steps.parquet``, or ``steps.csv`` without pyarrow; absent
after ``--no-steps``), ``scenario.resolved.yaml`` (every default written out, with what the run
derived: the strategy, the KV pool or the fleet's groups) and ``vllm_bench.json``. The writers
(:func:`sim.results.save_result` and the step stream) take their paths from :class:`RunFolder`;
the readers (reports, a sweep resuming) load it into a :class:`SavedRun` and read its typed
fields instead of opening files by name or recovering what the run already wrote down.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from sim.errors import OutputError
from sim.summary import Summary

SUMMARY_FILE = "summary.json"
REQUESTS_FILE = "requests.csv"
STEPS_FILE = "steps.csv"
STEPS_PARQUET_FILE = "steps.parquet"
SCENARIO_FILE = "scenario.resolved.yaml"
VLLM_BENCH_FILE = "vllm_bench.json"
#: Every file a run folder may hold: what ``--out`` must not silently replace.
RUN_FILES = (
    SUMMARY_FILE,
    REQUESTS_FILE,
    STEPS_FILE,
    STEPS_PARQUET_FILE,
    SCENARIO_FILE,
    VLLM_BENCH_FILE,
)


@dataclass(frozen=True)
class RunFolder:
    """The paths of one run folder's files (nothing is read or created when it is made)."""

    root: Path

    @property
    def summary(self) -> Path:
        return self.root / SUMMARY_FILE

    @property
    def requests(self) -> Path:
        return self.root / REQUESTS_FILE

    @property
    def scenario(self) -> Path:
        return self.root / SCENARIO_FILE

    @property
    def vllm_bench(self) -> Path:
        return self.root / VLLM_BENCH_FILE

    def steps(self) -> Path | None:
        """The step records written (Parquet first), or None if the run wrote none."""
        for name in (STEPS_PARQUET_FILE, STEPS_FILE):
            if (self.root / name).is_file():
                return self.root / name
        return None

    def is_complete(self) -> bool:
        """Whether the run finished writing (its summary, written last, is there)."""
        return self.summary.is_file()

    def load_summary(self) -> Summary:
        """The folder's summary. Raise OutputError naming the file if it is missing, not JSON,
        or not a summary."""
        try:
            data = json.loads(self.summary.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError("expected a JSON object")
            return Summary.from_dict(data)
        except (OSError, ValueError) as exc:  # json.JSONDecodeError is a ValueError
            raise OutputError(f"{self.summary}: not a run summary ({exc})") from None

    def load(self, *, with_steps: bool = True) -> SavedRun:
        """Read every file the folder holds (the step records only if ``with_steps``).

        Raise OutputError naming the folder if it holds no summary, or naming the file that
        cannot be read.
        """
        if not self.is_complete():
            raise OutputError(f"{self.root}: no {SUMMARY_FILE}; not a run folder")
        summary = self.load_summary()
        requests = _read(self.requests, pd.read_csv) if self.requests.is_file() else None
        steps_path = self.steps() if with_steps else None
        steps = None
        if steps_path is not None:
            reader = pd.read_parquet if steps_path.suffix == ".parquet" else pd.read_csv
            steps = _read(steps_path, reader)
        scenario: dict[str, Any] = {}
        if self.scenario.is_file():
            scenario = _read(self.scenario, _yaml_mapping)
        bench = _read(self.vllm_bench, _json_mapping) if self.vllm_bench.is_file() else None
        return SavedRun(self, summary, requests, steps, scenario, bench)


@dataclass(frozen=True)
class SavedRun:
    """A run folder read back: the summary typed, the tables as frames, the documents as
    mappings."""

    folder: RunFolder
    summary: Summary
    requests: pd.DataFrame | None
    steps: pd.DataFrame | None
    #: ``scenario.resolved.yaml``: the scenario with every default, and ``derived``.
    resolved_scenario: dict[str, Any]
    vllm_bench: dict[str, Any] | None

    @property
    def num_kv_blocks(self) -> int | None:
        """The KV pool's size in blocks as the run built it (``derived.kv_cache.num_blocks``);
        None for a fleet, whose replicas each have their own pool, or an older folder."""
        kv = (self.resolved_scenario.get("derived") or {}).get("kv_cache") or {}
        blocks = kv.get("num_blocks")
        return int(blocks) if blocks is not None else None


def _read(path: Path, reader: Any) -> Any:
    try:
        return reader(path)
    # pandas' and pyarrow's parse errors and a bad encoding are ValueErrors, their I/O OSErrors.
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise OutputError(f"{path}: cannot read ({exc})") from None


def _yaml_mapping(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ValueError("expected a mapping")
    return data


def _json_mapping(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    return data
