"""Columnar per-step records, appended one step or a whole fast-forwarded stretch at a time.

Rows are never Python objects: each column is a numpy array. Held in memory, the columns grow
by doubling, so recording several hundred thousand steps costs a few tens of megabytes and no
per-step allocation; a run that does not write its step records keeps only the columns its
summary reads (:data:`SUMMARY_COLUMNS`: 36 bytes a step instead of 108). Given a sink
(:meth:`StepRecorder.stream_to`), the recorder holds one chunk of :data:`CHUNK_ROWS` steps and
hands each full chunk to the sink (a file writer), so a run of any length holds one chunk.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

#: Steps per chunk handed to a sink: 262,144 rows of 19 columns is ~28 MB.
CHUNK_ROWS = 1 << 18

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


class StepSink(Protocol):
    """Where a streaming recorder hands its chunks: each call gets the next steps, in order, as
    equal-length columns the sink may keep (the recorder does not reuse them)."""

    def write(self, columns: Mapping[str, np.ndarray]) -> None: ...


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
        self._sink: StepSink | None = None
        self._num_flushed = 0
        self._last_duration_s = float("nan")

    def __len__(self) -> int:
        return self._num_flushed + self._size

    @property
    def column_names(self) -> tuple[str, ...]:
        """The step columns kept, in :data:`STEP_COLUMNS` order."""
        return self._names

    @property
    def streaming(self) -> bool:
        """Whether the steps go to a sink (then :meth:`columns` is not available)."""
        return self._sink is not None

    def stream_to(self, sink: StepSink, chunk_rows: int = CHUNK_ROWS) -> None:
        """From now on hold at most ``chunk_rows`` steps and hand each full chunk to ``sink``
        (:meth:`flush` hands over the rest). Raise ValueError if steps were recorded already
        or ``chunk_rows`` < 1."""
        if len(self):
            raise ValueError("stream_to: steps were recorded already")
        if chunk_rows < 1:
            raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
        self._sink = sink
        self._capacity = chunk_rows
        self._columns = self._empty_chunk()

    def _empty_chunk(self) -> dict[str, NDArray[np.generic]]:
        return {name: np.zeros(self._capacity, dtype=STEP_COLUMNS[name]) for name in self._names}

    def flush(self) -> None:
        """Hand the steps held to the sink (nothing without a sink or steps)."""
        if self._sink is None or self._size == 0:
            return
        chunk = {name: column[: self._size] for name, column in self._columns.items()}
        self._num_flushed += self._size
        self._size = 0
        self._columns = self._empty_chunk()
        self._sink.write(chunk)

    def append(self, rows: dict[str, object]) -> None:
        """Append one or more steps; every kept column must be given, scalars or equal-length
        arrays (others are ignored)."""
        first = np.atleast_1d(np.asarray(rows["start_at_s"]))
        count = len(first)
        if count == 0:
            return
        if self._sink is not None:
            self._append_streaming(rows, count)
            return
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
        self._last_duration_s = float(self._columns["duration_s"][needed - 1])

    def _append_streaming(self, rows: dict[str, object], count: int) -> None:
        """Fill the chunk held, handing it to the sink each time it is full."""
        done = 0
        while done < count:
            take = min(count - done, self._capacity - self._size)
            stop = self._size + take
            for name in self._names:
                value: Any = rows[name]
                if take != count and np.ndim(value):
                    value = value[done : done + take]
                self._columns[name][self._size : stop] = value
            self._size = stop
            done += take
            self._last_duration_s = float(self._columns["duration_s"][stop - 1])
            if self._size == self._capacity:
                self.flush()

    def add_irregular_itl(self, values: NDArray[np.float64], at_s: float) -> None:
        """Record inter-token gaps that span more than one step (after a preemption or a skip),
        all ending at ``at_s``."""
        if len(values):
            self._irregular_itl.append(np.asarray(values, dtype=np.float64))
            self._irregular_itl_at.append(np.full(len(values), at_s))

    def add_irregular_itl_at(self, values: NDArray[np.float64], at_s: NDArray[np.float64]) -> None:
        """Record inter-token gaps that span more than one step, each ending at its ``at_s``."""
        if len(values):
            self._irregular_itl.append(np.asarray(values, dtype=np.float64))
            self._irregular_itl_at.append(np.asarray(at_s, dtype=np.float64))

    def columns(self) -> dict[str, NDArray[np.generic]]:
        """The recorded columns, trimmed to the number of steps (views, not copies).

        Raise RuntimeError if the steps went to a sink."""
        if self._sink is not None:
            raise RuntimeError("the step records were handed to a sink; read them from it")
        return {name: column[: self._size] for name, column in self._columns.items()}

    def irregular_itl(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """All inter-token gaps that were not a single step's duration, and when each ended."""
        if not self._irregular_itl:
            return np.zeros(0), np.zeros(0)
        return np.concatenate(self._irregular_itl), np.concatenate(self._irregular_itl_at)

    def last_duration_s(self) -> float:
        """Duration of the last recorded step (NaN before the first)."""
        return self._last_duration_s
