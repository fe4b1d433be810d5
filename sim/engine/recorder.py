"""Columnar per-step records, appended one step or a whole fast-forwarded stretch at a time.

Rows are never Python objects: each column is a list of fixed-size numpy chunks, filled in place
and joined once at the end (a full chunk is never copied while the run goes on), so recording
several hundred thousand steps costs a few tens of megabytes and no per-step allocation. A run
that does not write its step records keeps only the columns its summary reads
(:data:`SUMMARY_COLUMNS`: 36 bytes a step instead of 108).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

#: Step columns and their dtypes. Times in seconds; counts of sequences, tokens and blocks.
STEP_COLUMNS: dict[str, type] = {
    "start_at_s": np.float64,
    "duration_s": np.float64,
    "fixed_s": np.float64,
    "linear_s": np.float64,
    "attention_s": np.float64,
    "allreduce_s": np.float64,
    "sampling_s": np.float64,
    "draft_s": np.float64,
    "num_seqs": np.int32,
    "num_decode_seqs": np.int32,
    "num_prefill_seqs": np.int32,
    "num_tokens": np.int32,
    "num_prefill_tokens": np.int32,
    "num_emitted_tokens": np.int32,
    "num_draft_tokens": np.int32,
    "num_accepted_tokens": np.int32,
    "kv_blocks_used": np.int32,
    "num_waiting": np.int32,
    "num_regular_itl": np.int32,
}


#: The step columns :func:`sim.metrics.summarize` reads (and a capacity probe's judgement).
SUMMARY_COLUMNS = (
    "start_at_s",
    "duration_s",
    "num_seqs",
    "num_tokens",
    "num_prefill_tokens",
    "num_emitted_tokens",
    "kv_blocks_used",
    "num_regular_itl",
)

#: What a run keeps of its step records: every column, or those its summary needs.
STEP_RECORDS = {"all": tuple(STEP_COLUMNS), "summary": SUMMARY_COLUMNS}


class StepRecorder:
    """Growable columns of step records, plus the ITL samples that are not one step long.

    ``columns``: the step columns to keep (default: all of :data:`STEP_COLUMNS`).
    Raise ValueError if one is not a step column or ``start_at_s``/``duration_s`` is left out.
    """

    def __init__(
        self, chunk_rows: int = 1 << 16, columns: tuple[str, ...] = tuple(STEP_COLUMNS)
    ) -> None:
        unknown = [name for name in columns if name not in STEP_COLUMNS]
        if unknown or "start_at_s" not in columns or "duration_s" not in columns:
            raise ValueError(f"step columns must include start_at_s and duration_s, got {columns}")
        self._chunk_rows = max(16, chunk_rows)
        self._size = 0
        self._names = tuple(name for name in STEP_COLUMNS if name in columns)
        #: Full chunks of each column, and the chunk being filled (``_fill`` rows of it).
        self._full: dict[str, list[NDArray[np.generic]]] = {name: [] for name in self._names}
        self._current = self._new_chunk()
        self._fill = 0
        self._irregular_itl: list[NDArray[np.float64]] = []
        self._irregular_itl_at: list[NDArray[np.float64]] = []

    def _new_chunk(self) -> dict[str, NDArray[np.generic]]:
        return {name: np.zeros(self._chunk_rows, dtype=STEP_COLUMNS[name]) for name in self._names}

    def __len__(self) -> int:
        return self._size

    def append(self, rows: dict[str, object]) -> None:
        """Append one or more steps; every kept column must be given, scalars or equal-length
        arrays (others are ignored)."""
        count = np.asarray(rows["start_at_s"]).size
        done = 0
        while done < count:
            # Fill the current chunk; a full one is set aside (never copied) and a new one begun.
            take = min(count - done, self._chunk_rows - self._fill)
            for name in self._names:
                value = rows[name]
                if isinstance(value, np.ndarray) and value.ndim:
                    value = value[done : done + take] if take < count else value
                self._current[name][self._fill : self._fill + take] = value  # type: ignore[assignment]
            self._fill += take
            done += take
            if self._fill == self._chunk_rows:
                for name in self._names:
                    self._full[name].append(self._current[name])
                self._current = self._new_chunk()
                self._fill = 0
        self._size += count

    def add_irregular_itl(self, values: NDArray[np.float64], at_s: float) -> None:
        """Record inter-token gaps that span more than one step (after a preemption or a skip),
        all ending at ``at_s``."""
        if len(values):
            self._irregular_itl.append(np.asarray(values, dtype=np.float64))
            self._irregular_itl_at.append(np.full(len(values), at_s))

    def columns(self) -> dict[str, NDArray[np.generic]]:
        """The recorded columns, one array each. The chunks are joined one column at a time,
        each column's chunks freed as it is joined, and kept joined for later calls."""
        out: dict[str, NDArray[np.generic]] = {}
        if not any(self._full.values()):
            return {name: self._current[name][: self._fill] for name in self._names}
        for name in self._names:
            parts = self._full[name]
            if self._fill:
                parts.append(self._current[name][: self._fill])
            joined = parts[0] if len(parts) == 1 else np.concatenate(parts)
            self._full[name] = [joined]
            out[name] = joined
        if self._fill:
            self._current = self._new_chunk()
            self._fill = 0
        return out

    def value_at(self, name: str, at_s: float) -> float | None:
        """Column ``name`` of the last step starting at or before ``at_s`` (None: no such step).

        Raise KeyError if the column is not kept.
        """
        chunks = [(self._current["start_at_s"][: self._fill], self._current[name][: self._fill])]
        chunks += list(zip(self._full["start_at_s"][::-1], self._full[name][::-1], strict=True))
        for starts, values in chunks:
            if len(starts) and starts[0] <= at_s:
                row = int(np.searchsorted(starts, at_s, side="right")) - 1
                return float(values[row])
        return None

    def irregular_itl(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """All inter-token gaps that were not a single step's duration, and when each ended."""
        if not self._irregular_itl:
            return np.zeros(0), np.zeros(0)
        return np.concatenate(self._irregular_itl), np.concatenate(self._irregular_itl_at)

    def last_duration_s(self) -> float:
        """Duration of the last recorded step (NaN before the first)."""
        if self._fill:
            return float(self._current["duration_s"][self._fill - 1])
        if self._size == 0:
            return float("nan")
        return float(self._full["duration_s"][-1][-1])
