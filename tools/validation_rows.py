"""The columns of ``sim/data/validation_points.csv`` and the two helpers every source's
builder uses: a row with every column, and a CSV read into rows
(``tools/build_validation_points.py`` writes the file)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

COLUMNS = (
    "point_id",
    "source_group",
    "engine",
    "preset",
    "model",
    "gpu",
    "num_gpus",
    "precision",
    "kv_cache",
    "method",
    "num_speculative_tokens",
    "arrival",
    "concurrency",
    "rate_per_s",
    "trace",
    "prompt_tokens",
    "output_tokens",
    "max_num_seqs",
    "max_num_batched_tokens",
    "dataset",
    "num_requests",
    "warmup_requests",
    "quantity",
    "statistic",
    "measured",
    "unit",
    "source",
    "fitted_by",
    "not_expressible",
    "notes",
    "tensor_parallel",
    "expert_parallel",
    "prompt_pool",
    "num_turns",
    "temperature",
    "draft_model",
)


def _row(**values: Any) -> dict[str, Any]:
    row = {column: "" for column in COLUMNS}
    unknown = set(values) - set(COLUMNS)
    if unknown:
        raise KeyError(f"unknown columns {sorted(unknown)}")
    row.update(values)
    return row


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))
