"""Writing results: atomically, with the user's umask, and never over what a user has.

Every file is written to a temporary name in the same folder and renamed into place
(``os.replace`` is atomic on POSIX and Windows), then given the mode a plain ``open`` would
(``0o666`` less the umask; ``mkstemp`` alone leaves ``0o600``). The temporary name carries the
writer's process id (``.<name>.<pid>.<random>``), so a file left by a process that was killed
before it could clean up (``kill -9``, a power cut) is recognised and removed by the next command
that writes the same output (:func:`remove_stale_temporaries`); one whose writer still runs is
left alone.

Before any work, a command checks its outputs with :func:`check_output_folder` or
:func:`check_output_file`: an output that is an input, an existing file where a folder is due, or
earlier results, is refused with what exists, unless ``--force`` is given. A results folder's
name from the scenario goes through :func:`safe_name`, so it is always one path component.
"""

from __future__ import annotations

import glob
import json
import os
import re
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd
import yaml

from sim.errors import OutputError

#: Longest results-folder name kept from a scenario name (file systems allow 255 bytes; the
#: timestamp suffix needs 17).
MAX_NAME_CHARS = 100
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def current_umask() -> int:
    """The process's umask (read by setting it and putting it back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def temporary_beside(path: Path) -> tuple[int, str]:
    """Create the temporary file a write of ``path`` goes through: ``(descriptor, name)``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    return tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", dir=path.parent)


def _writer_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Remove the temporary files of earlier writes of ``path`` whose writer no longer runs.

    Only names of the form ``.<name>.<pid>.<random>`` are touched; a file of a live process
    (or of this one) stays. Returns what was removed.
    """
    removed: list[Path] = []
    if not path.parent.is_dir():
        return removed
    prefix = f".{path.name}."
    for leftover in path.parent.glob(f"{glob.escape(prefix)}*"):
        pid_text, _, rest = leftover.name[len(prefix) :].partition(".")
        if not pid_text.isdigit() or not rest or _writer_alive(int(pid_text)):
            continue
        try:
            leftover.unlink()
        except FileNotFoundError:  # removed by another command meanwhile
            continue
        removed.append(leftover)
    return removed


def atomic_write(path: Path, write: Callable[[IO[Any]], object], binary: bool = False) -> None:
    """Call ``write`` on a temporary file beside ``path``, then rename it to ``path``."""
    fd, tmp = temporary_beside(path)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
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


#: PyYAML's safe dumper, libyaml's where it is built in (some four times faster: 4 ms against
#: 15 ms for a resolved scenario). The same text for every shipped scenario (tests/test_outputs.py
#: checks); a long double-quoted string may be folded at other places, to the same value.
SAFE_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def write_yaml(path: Path, data: Any) -> None:
    """Write ``data`` as block-style YAML."""
    atomic_write(path, lambda f: yaml.dump(_jsonable(data), f, Dumper=SAFE_DUMPER, sort_keys=False))


def write_table(path: Path, frame: pd.DataFrame) -> None:
    """Write a table as CSV (or Parquet when ``path`` ends in ``.parquet``)."""
    if path.suffix == ".parquet":
        atomic_write(path, lambda f: frame.to_parquet(f, index=False), binary=True)
    else:
        atomic_write(path, lambda f: frame.to_csv(f, index=False))


def safe_name(name: str) -> str:
    """``name`` as one harmless path component: separators, ``..``, NUL and other characters
    outside ``A-Za-z0-9._+-`` become ``-``, leading dots and dashes go, at most MAX_NAME_CHARS."""
    cleaned = _UNSAFE.sub("-", name).lstrip(".-")[:MAX_NAME_CHARS].rstrip(".-")
    return cleaned or "scenario"


def fresh_results_dir(root: Path, name: str) -> Path:
    """A new folder ``root/<safe name>-<UTC timestamp>`` (suffixed if it already exists)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = root / f"{safe_name(name)}-{stamp}"
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = Path(f"{base}-{n}")
    candidate.mkdir(parents=True)
    return candidate


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _refuse_inputs(path: Path, inputs: tuple[Path, ...], flag: str) -> None:
    for source in inputs:
        if source is not None and _same_file(path, Path(source)):
            raise OutputError(f"{flag} {path}: is the input {source}; write somewhere else")


def check_output_file(
    path: Path, *, force: bool, inputs: tuple[Path, ...] = (), flag: str = "--out"
) -> None:
    """Check, before any work, that a file may be written at ``path``.

    Raise OutputError if ``path`` is one of ``inputs`` (never overwritten, even with ``force``),
    a folder, under a file, or an existing file and ``force`` is false.
    """
    _refuse_inputs(path, inputs, flag)
    if path.is_dir():
        raise OutputError(f"{flag} {path}: is a folder; give a file name")
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise OutputError(f"{flag} {path}: {parent} is a file, not a folder")
    if path.exists() and not force:
        raise OutputError(f"{flag} {path}: the file exists; use --force to replace it")


def check_output_folder(
    path: Path,
    *,
    force: bool,
    writes: tuple[str, ...],
    inputs: tuple[Path, ...] = (),
    flag: str = "--out",
) -> None:
    """Check, before any work, that the files ``writes`` may be written into folder ``path``.

    Raise OutputError if ``path`` is an existing file (or lies under one), if a file it would
    write is one of ``inputs`` (never overwritten, even with ``force``), or if it already holds
    any of ``writes`` and ``force`` is false; the message lists what exists.
    """
    if path.exists() and not path.is_dir():
        raise OutputError(f"{flag} {path}: is an existing file; give a folder")
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise OutputError(f"{flag} {path}: {parent} is a file, not a folder")
    for name in writes:
        for source in inputs:
            if _same_file(path / name, Path(source)):
                raise OutputError(
                    f"{flag} {path}: would replace {name}, the input {source}; write elsewhere"
                )
    existing = [name for name in writes if (path / name).exists()]
    if existing and not force:
        shown = ", ".join(existing[:6]) + (
            f" and {len(existing) - 6} more" if len(existing) > 6 else ""
        )
        raise OutputError(
            f"{flag} {path}: already holds {shown} from an earlier run; use --force to replace "
            "them, or give another folder"
        )
