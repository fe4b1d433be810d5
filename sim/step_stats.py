"""Step records read as a stream of chunks, and the figures a summary takes from them.

A run's step records may be held in memory (:class:`MemorySteps`) or already written to disk as
they were made (:class:`StepFile`: Parquet row groups or CSV). Either is read chunk by chunk, and
every figure is computed so that the chunking cannot change it: integer sums and counts, maxima,
exactly rounded float sums (:class:`ExactSum`: ``math.fsum``'s result over the whole stream) and
percentiles found by exact selection. A run held in memory and the same run streamed to disk
thus give the same summary, bit for bit, whatever the chunk sizes.

Percentiles of the inter-token latency (ITL) need the order statistics of up to some 10^8
weighted samples. :func:`select_ranks` finds the value at given ranks of the expanded multiset
without holding it: each pass over the stream counts the weight in 2^16 buckets of the
candidates' bit patterns (a float's IEEE-754 bits, sign-adjusted, sort as the float does), and
keeps only the bucket holding each rank; once that bucket holds at most :data:`COLLECT_LIMIT`
samples they are collected and sorted. Three passes are typical, memory is one chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from sim.exact_sum import ExactSum

FloatArray = NDArray[np.float64]
#: Rows read per chunk.
READ_CHUNK_ROWS = 1 << 18
#: Bits of a bucket index in one selection pass.
HIST_BITS = 16
#: Samples in a bucket few enough to collect and sort.
COLLECT_LIMIT = 1 << 20
#: Samples up to which :meth:`ItlSample.percentiles_ms` holds them all (8 MB) and selects every
#: rank in one ``np.partition`` instead of :func:`select_ranks`' passes; the same values.
EXPAND_LIMIT = 1 << 20
_TOP_BIT = np.uint64(1 << 63)


def _round_trip_option() -> dict[str, str]:
    """``read_csv``'s exact float parsing: pandas 3's default, an option before it."""
    import pandas as pd

    return {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}


class StepSource(Protocol):
    """Step records readable as chunks of columns, in step order."""

    def __len__(self) -> int: ...

    def chunks(self, names: tuple[str, ...]) -> Iterator[dict[str, np.ndarray]]:
        """Consecutive chunks of the columns ``names``, covering every step once."""
        ...


class MemorySteps:
    """Step columns held in memory (equal-length arrays), read in chunks of ``chunk_rows``."""

    def __init__(self, columns: Mapping[str, np.ndarray], chunk_rows: int = READ_CHUNK_ROWS):
        self.columns = columns
        self.chunk_rows = max(1, chunk_rows)

    def __len__(self) -> int:
        column = self.columns.get("start_at_s")
        return 0 if column is None else len(column)

    def chunks(self, names: tuple[str, ...]) -> Iterator[dict[str, np.ndarray]]:
        for start in range(0, len(self), self.chunk_rows):
            yield {name: self.columns[name][start : start + self.chunk_rows] for name in names}


class StepFile:
    """Step records written to ``path`` (``.parquet``, else CSV), read back chunk by chunk.

    pandas writes a float's shortest repr that round-trips and parses it back exactly (pandas 3
    by default, pandas 2 with ``float_precision="round_trip"``), so the values read from a CSV
    file are the values written, bit for bit (a test reads both formats back).
    """

    def __init__(self, path: Path, chunk_rows: int = READ_CHUNK_ROWS) -> None:
        self.path = path
        self.chunk_rows = max(1, chunk_rows)
        self._num_rows: int | None = None

    def __len__(self) -> int:
        if self._num_rows is None:
            if self.path.suffix == ".parquet":
                import pyarrow.parquet as pq

                self._num_rows = int(pq.ParquetFile(self.path).metadata.num_rows)
            else:
                self._num_rows = sum(len(c["start_at_s"]) for c in self.chunks(("start_at_s",)))
        return self._num_rows

    def chunks(self, names: tuple[str, ...]) -> Iterator[dict[str, np.ndarray]]:
        if self.path.suffix == ".parquet":
            import pyarrow.parquet as pq

            # Without pre-buffering and threads, pyarrow holds one row group at a time; with them
            # its memory pool kept some 350 MB while a 17M-step file was read.
            with pq.ParquetFile(self.path, pre_buffer=False) as reader:
                batches = reader.iter_batches(
                    batch_size=self.chunk_rows, columns=list(names), use_threads=False
                )
                for batch in batches:
                    yield {name: batch.column(name).to_numpy() for name in names}
            return
        import pandas as pd

        from sim.engine.recorder import STEP_COLUMNS

        dtypes = {name: STEP_COLUMNS[name] for name in names if name in STEP_COLUMNS}
        with pd.read_csv(  # type: ignore[call-overload]
            self.path,
            usecols=list(names),
            dtype=dtypes,
            chunksize=self.chunk_rows,
            **_round_trip_option(),
        ) as reader:
            for frame in reader:
                yield {name: frame[name].to_numpy() for name in names}


def as_source(steps: Mapping[str, np.ndarray] | StepSource) -> StepSource:
    """``steps`` as a :class:`StepSource` (a mapping of columns is read from memory)."""
    if isinstance(steps, Mapping):
        return MemorySteps(steps)
    return steps


@dataclass(frozen=True)
class StepTotals:
    """What a summary takes from the step records besides the ITL (integer sums are exact)."""

    num_steps: int
    #: End of the last step (0 without steps).
    last_end_s: float
    #: Most KV blocks in use after any step (0 without steps).
    kv_blocks_peak: int
    #: Steps starting in ``[start, end)``, and their sequences and tokens.
    num_window_steps: int
    window_num_seqs: int
    window_num_tokens: int
    #: Tokens emitted and prompt tokens computed by steps ending in ``[start, end)``.
    ended_emitted_tokens: int
    ended_prefill_tokens: int


def step_totals(
    source: StepSource, start_s: float, end_s: float, served: bool = False
) -> StepTotals:
    """One pass over ``source``: the totals of :class:`StepTotals` for the window
    ``[start_s, end_s)``; the tokens of steps ending in it only if ``served`` (else 0)."""
    names: tuple[str, ...] = ("start_at_s", "duration_s", "num_seqs", "num_tokens")
    names += ("kv_blocks_used",) + (("num_prefill_tokens", "num_emitted_tokens") if served else ())
    num_steps = kv_peak = window_steps = seqs = tokens = emitted = prefill = 0
    last_end = 0.0
    for chunk in source.chunks(names):
        start = chunk["start_at_s"]
        if len(start) == 0:
            continue
        duration = chunk["duration_s"]
        num_steps += len(start)
        last_end = float(start[-1] + duration[-1])
        kv_peak = max(kv_peak, int(chunk["kv_blocks_used"].max()))
        inside = (start >= start_s) & (start < end_s)
        window_steps += int(inside.sum())
        seqs += int(chunk["num_seqs"][inside].sum(dtype=np.int64))
        tokens += int(chunk["num_tokens"][inside].sum(dtype=np.int64))
        if not served:
            continue
        end = start + duration
        ended = (end >= start_s) & (end < end_s)
        emitted += int(chunk["num_emitted_tokens"][ended].sum(dtype=np.int64))
        prefill += int(chunk["num_prefill_tokens"][ended].sum(dtype=np.int64))
    return StepTotals(num_steps, last_end, kv_peak, window_steps, seqs, tokens, emitted, prefill)


def max_tokens_per_second(source: StepSource, start_s: float, end_s: float) -> float:
    """The busiest one-second bucket (counted from ``start_s``) of tokens emitted by steps
    ending in ``[start_s, end_s]`` (0 without any)."""
    per_second: FloatArray = np.zeros(0)
    for chunk in source.chunks(("start_at_s", "duration_s", "num_emitted_tokens")):
        step_end = chunk["start_at_s"] + chunk["duration_s"]
        ended = (step_end >= start_s) & (step_end <= end_s)
        if not ended.any():
            continue
        buckets = np.floor(step_end[ended] - start_s).astype(np.int64)
        weights = chunk["num_emitted_tokens"][ended].astype(np.float64)
        counts: FloatArray = np.bincount(buckets, weights=weights).astype(np.float64)
        if len(counts) > len(per_second):
            counts[: len(per_second)] += per_second
            per_second = counts
        else:
            per_second[: len(counts)] += counts
    return float(per_second.max()) if len(per_second) else 0.0


# --- the ITL sample ----------------------------------------------------------------------------
Chunks = Callable[[], Iterator[tuple[FloatArray, NDArray[np.int64]]]]


class ItlSample:
    """The inter-token latencies of a window: each step starting in ``[start_s, end_s)`` gives
    its duration ``num_regular_itl`` times; each irregular gap (spanning several steps) ending in
    ``[start_s, end_s]`` gives itself once. Samples are streamed, never held together."""

    def __init__(
        self,
        source: StepSource,
        start_s: float,
        end_s: float,
        irregular_s: FloatArray,
        irregular_at_s: FloatArray,
    ) -> None:
        self.source = source
        self.start_s, self.end_s = start_s, end_s
        late = (irregular_at_s >= start_s) & (irregular_at_s <= end_s)
        self.irregular_s = np.asarray(irregular_s, dtype=np.float64)[late]

    def chunks(self) -> Iterator[tuple[FloatArray, NDArray[np.int64]]]:
        """(values in s, weights > 0) chunk by chunk: the steps', then the irregular gaps."""
        for chunk in self.source.chunks(("start_at_s", "duration_s", "num_regular_itl")):
            start = chunk["start_at_s"]
            weights = chunk["num_regular_itl"].astype(np.int64)
            keep = (start >= self.start_s) & (start < self.end_s) & (weights > 0)
            yield chunk["duration_s"][keep], weights[keep]
        if len(self.irregular_s):
            yield self.irregular_s, np.ones(len(self.irregular_s), dtype=np.int64)

    def total(self) -> int:
        """The number of samples (the weights' sum)."""
        return sum(int(weights.sum()) for _, weights in self.chunks())

    def sum_ms(self, shift_ms: float = 0.0, power: int = 1) -> float:
        """``sum(weight * (value_ms - shift_ms) ** power)``, exactly rounded (``math.fsum``)."""

        total = ExactSum()
        for values, weights in self.chunks():
            deviation = values * 1e3 - shift_ms if shift_ms else values * 1e3
            total.add((deviation**power if power != 1 else deviation) * weights)
        return total.value()

    def percentiles_ms(self, total: int, qs: tuple[float, ...]) -> list[float]:
        """Percentiles (linear interpolation between order statistics, as
        :func:`sim.metrics.weighted_percentiles`) of ``total`` samples, in ms."""
        positions = [(total - 1) * q / 100.0 for q in qs]
        ranks: set[int] = set()
        for position in positions:
            lo = int(np.floor(position))
            ranks.update((lo, min(lo + 1, total - 1)))
        value_s: Mapping[int, float | np.float64]
        if total <= EXPAND_LIMIT:
            # Few enough samples to hold: every sample once, one selection for all the ranks.
            parts = [np.repeat(values, weights) for values, weights in self.chunks()]
            picked = np.partition(np.concatenate(parts), sorted(ranks))
            value_s = {rank: picked[rank] for rank in ranks}
        else:
            value_s = select_ranks(self.chunks, sorted(ranks))
        out = []
        for position in positions:
            lo = int(np.floor(position))
            v_lo = np.float64(value_s[lo]) * 1e3
            v_hi = np.float64(value_s[min(lo + 1, total - 1)]) * 1e3
            out.append(float(v_lo + (v_hi - v_lo) * (position - lo)))
        return out


def _sort_keys(values: FloatArray) -> NDArray[np.uint64]:
    """Unsigned keys that sort as the (non-NaN) floats do: the sign bit set on positives, every
    bit flipped on negatives."""
    bits = np.ascontiguousarray(values, dtype=np.float64).view(np.uint64)
    return np.where(bits & _TOP_BIT, ~bits, bits | _TOP_BIT)


@dataclass
class _Search:
    """The rank lies among the keys ``[lo, lo + width)``; ``below`` is the weight under ``lo``;
    ``collect``: the interval holds few enough samples to gather and sort."""

    lo: int
    width: int
    below: int = 0
    collect: bool = False

    @property
    def shift(self) -> int:
        return max(0, (self.width - 1).bit_length() - HIST_BITS)

    def inside(self, keys: NDArray[np.uint64]) -> NDArray[np.bool_]:
        mask = keys >= np.uint64(self.lo)
        if self.lo + self.width < 1 << 64:
            mask &= keys < np.uint64(self.lo + self.width)
        return mask


def select_ranks(
    chunks: Chunks, ranks: list[int], collect_limit: int = COLLECT_LIMIT
) -> dict[int, float]:
    """The values at 0-based ``ranks`` of the multiset where each chunk's ``values[i]`` occurs
    ``weights[i]`` (> 0) times, in sorted order; each call of ``chunks()`` is a new pass. A
    bucket of at most ``collect_limit`` samples is collected and sorted.

    Raise ValueError if a rank is not below the total weight.
    """
    searches = {rank: _Search(0, 1 << 64) for rank in ranks}
    found: dict[int, float] = {}
    while searches:
        # One pass: a histogram of weights and of samples per interval, or its samples.
        intervals = {(s.lo, s.width): s for s in searches.values()}
        weight_hist = {k: np.zeros(((s.width - 1) >> s.shift) + 1) for k, s in intervals.items()}
        count_hist = {k: np.zeros(len(h), dtype=np.int64) for k, h in weight_hist.items()}
        held: dict[tuple[int, int], list[tuple[FloatArray, NDArray[np.int64]]]] = {
            k: [] for k in intervals
        }
        for values, weights in chunks():
            keys = _sort_keys(values)
            for k, s in intervals.items():
                mask = s.inside(keys)
                if s.collect:
                    held[k].append((values[mask], weights[mask]))
                    continue
                buckets = ((keys[mask] - np.uint64(s.lo)) >> np.uint64(s.shift)).astype(np.intp)
                size = len(weight_hist[k])
                weight_hist[k] += np.bincount(buckets, weights=weights[mask], minlength=size)
                count_hist[k] += np.bincount(buckets, minlength=size)
        for rank, s in list(searches.items()):
            k, target = (s.lo, s.width), rank - s.below
            if s.collect:
                values = np.concatenate([v for v, _ in held[k]] or [np.zeros(0)])
                weights = np.concatenate([w for _, w in held[k]] or [np.zeros(0, np.int64)])
                order = np.argsort(values, kind="stable")
                cum = np.cumsum(weights[order])
                if not len(cum) or target >= int(cum[-1]):
                    raise ValueError(f"rank {rank} is not below the total weight")
                found[rank] = float(values[order][np.searchsorted(cum, target, side="right")])
                del searches[rank]
                continue
            cum = np.cumsum(weight_hist[k])  # integers below 2**53: exact in float64
            if not len(cum) or target >= int(cum[-1]):
                raise ValueError(f"rank {rank} is not below the total weight")
            bucket = int(np.searchsorted(cum, target, side="right"))
            shift = s.shift
            narrowed = _Search(s.lo + (bucket << shift), 1 << shift)
            narrowed.below = s.below + (int(cum[bucket - 1]) if bucket else 0)
            if shift == 0:  # one key: one value
                found[rank] = float(_from_key(narrowed.lo))
                del searches[rank]
                continue
            narrowed.collect = int(count_hist[k][bucket]) <= collect_limit
            searches[rank] = narrowed
    return found


def _from_key(key: int) -> np.float64:
    """The float whose :func:`_sort_keys` key is ``key``."""
    bits = np.uint64(key)
    bits = bits ^ _TOP_BIT if bits & _TOP_BIT else ~bits
    return np.array([bits], dtype=np.uint64).view(np.float64)[0]
