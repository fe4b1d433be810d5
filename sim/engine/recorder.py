"""Columnar per-step records, appended one step or a whole fast-forwarded stretch at a time.

Rows are never Python objects: each column is a numpy array that grows by doubling, so recording
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
    #: The most drafts a sequence of the step proposed: the k a policy chose.
    "spec_k": np.int32,
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
        self, initial_capacity: int = 4096, columns: tuple[str, ...] = tuple(STEP_COLUMNS)
    ) -> None:
        unknown = [name for name in columns if name not in STEP_COLUMNS]
        if unknown or "start_at_s" not in columns or "duration_s" not in columns:
            raise ValueError(f"step columns must include start_at_s and duration_s, got {columns}")
        self._capacity = max(16, initial_capacity)
        self._size = 0
        self._names = tuple(name for name in STEP_COLUMNS if name in columns)
        self._columns: dict[str, NDArray[np.generic]] = {
            name: np.zeros(self._capacity, dtype=STEP_COLUMNS[name]) for name in self._names
        }
        self._irregular_itl: list[NDArray[np.float64]] = []
        self._irregular_itl_at: list[NDArray[np.float64]] = []

    def __len__(self) -> int:
        return self._size

    def append(self, rows: dict[str, object]) -> None:
        """Append one or more steps; every kept column must be given, scalars or equal-length
        arrays (others are ignored)."""
        first = np.atleast_1d(np.asarray(rows["start_at_s"]))
        count = len(first)
        needed = self._size + count
        if needed > self._capacity:
            while self._capacity < needed:
                self._capacity *= 2
            for name, column in self._columns.items():
                grown = np.zeros(self._capacity, dtype=column.dtype)
                grown[: self._size] = column[: self._size]
                self._columns[name] = grown
        for name in self._names:
            self._columns[name][self._size : needed] = rows[name]  # type: ignore[assignment]
        self._size = needed

    def add_irregular_itl(self, values: NDArray[np.float64], at_s: float) -> None:
        """Record inter-token gaps that span more than one step (after a preemption or a skip),
        all ending at ``at_s``."""
        if len(values):
            self._irregular_itl.append(np.asarray(values, dtype=np.float64))
            self._irregular_itl_at.append(np.full(len(values), at_s))

    def columns(self) -> dict[str, NDArray[np.generic]]:
        """The recorded columns, trimmed to the number of steps (views, not copies)."""
        return {name: column[: self._size] for name, column in self._columns.items()}

    def irregular_itl(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """All inter-token gaps that were not a single step's duration, and when each ended."""
        if not self._irregular_itl:
            return np.zeros(0), np.zeros(0)
        return np.concatenate(self._irregular_itl), np.concatenate(self._irregular_itl_at)

    def last_duration_s(self) -> float:
        """Duration of the last recorded step (NaN before the first)."""
        if self._size == 0:
            return float("nan")
        return float(self._columns["duration_s"][self._size - 1])
