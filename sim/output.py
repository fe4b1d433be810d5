"""Writing results: atomically, so an interrupted run never leaves a half-written file.

Every file is written to a temporary name in the same folder and renamed into place
(``os.replace`` is atomic on POSIX and Windows).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd
import yaml


def atomic_write(path: Path, write: Callable[[IO[Any]], None], binary: bool = False) -> None:
    """Call ``write`` on a temporary file beside ``path``, then rename it to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        handle: IO[Any] = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")
        with handle as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        value = float(value)
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON (NaN and infinities become null)."""
    atomic_write(path, lambda f: json.dump(_jsonable(data), f, indent=2, sort_keys=False))


def write_yaml(path: Path, data: Any) -> None:
    """Write ``data`` as block-style YAML."""
    atomic_write(path, lambda f: yaml.safe_dump(_jsonable(data), f, sort_keys=False))


def write_table(path: Path, frame: pd.DataFrame) -> None:
    """Write a table as CSV (or Parquet when ``path`` ends in ``.parquet``)."""
    if path.suffix == ".parquet":
        atomic_write(path, lambda f: frame.to_parquet(f, index=False), binary=True)
    else:
        atomic_write(path, lambda f: frame.to_csv(f, index=False))


def fresh_results_dir(root: Path, name: str) -> Path:
    """A new folder ``root/<name>-<UTC timestamp>`` (suffixed if it already exists)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = root / f"{name}-{stamp}"
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = Path(f"{base}-{n}")
    candidate.mkdir(parents=True)
    return candidate
