"""The normalised form of a parsed serving artifact, whatever engine or release wrote it.

Every parser in :mod:`sim.artifacts` returns a :class:`ParsedArtifact`. Its parts mirror what
a real run can tell us: per-request timings (:class:`RequestTable`), per-interval engine counters
(:class:`IntervalTable`, e.g. one row per vLLM ``Engine …`` / ``SpecDecoding metrics`` log record
or per pair of Prometheus scrapes), per-step batch composition (:class:`StepTable`, only from vLLM's
``Iteration(…)`` log lines), one acceptance summary over the whole artifact
(:class:`SpecDecodeSummary`), per-request acceptance traces (:class:`AcceptanceTraces`) and run
metadata (:class:`RunMetadata`). A part the artifact does not contain is ``None``; a value missing
in some rows of a table is NaN.

Conventions: times in seconds (``*_s``), token counts in tokens, KV usage as a fraction in [0, 1],
acceptance rates as fractions in [0, 1]. ``mean_acceptance_length`` always counts the bonus token,
i.e. it is the number of tokens one verify step emits for one request: ``1 + accepted / num_drafts``
(vLLM ≥ 0.9.0 definition, vLLM ``vllm/v1/spec_decode/metrics.py``). Per-position rates are vLLM's
*unconditional* ones: rate[i] = P(the first i + 1 draft tokens were all accepted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import pandas as pd

from sim.errors import InvariantError

SettingValue = str | int | float | bool | None


def _frozen_mapping(values: Mapping[str, object] | None) -> Mapping[str, object]:
    return MappingProxyType(dict(values or {}))


def _check_lengths(owner: str, num_rows: int, columns: Mapping[str, object]) -> None:
    """Raise InvariantError if a column's length differs from the table's row count."""
    for name, column in columns.items():
        if column is None:
            continue
        length = len(column)  # type: ignore[arg-type]
        if length != num_rows:
            raise InvariantError(f"{owner}.{name} has {length} rows, expected {num_rows}")


@dataclass(frozen=True, eq=False)
class RequestTable:
    """Per-request measurements, index i = request i in the artifact's own order.

    ``arrival_at_s`` starts at 0 (rebased from perf-counter or epoch stamps). ``ttft_s`` and
    ``e2e_s`` are NaN for failed requests. ``itls_s[i]`` holds the gaps between successive streamed
    chunks of request i; one chunk may carry several tokens (speculative decoding, stream
    intervals), so ``len(itls_s[i]) + 1 <= output_tokens[i]``. ``errors[i]`` is None on success.
    Raise InvariantError if the columns disagree in length.
    """

    num_requests: int
    arrival_at_s: np.ndarray | None = None
    prompt_tokens: np.ndarray | None = None
    output_tokens: np.ndarray | None = None
    ttft_s: np.ndarray | None = None
    itls_s: tuple[np.ndarray, ...] | None = None
    e2e_s: np.ndarray | None = None
    errors: tuple[str | None, ...] | None = None

    def __post_init__(self) -> None:
        _check_lengths("RequestTable", self.num_requests, self._columns())

    def _columns(self) -> dict[str, object]:
        return {
            "arrival_at_s": self.arrival_at_s,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "ttft_s": self.ttft_s,
            "itls_s": self.itls_s,
            "e2e_s": self.e2e_s,
            "errors": self.errors,
        }

    @property
    def succeeded(self) -> np.ndarray:
        """Boolean mask of requests without an error (all True when errors are unknown)."""
        if self.errors is None:
            return np.ones(self.num_requests, dtype=bool)
        return np.fromiter((e is None for e in self.errors), dtype=bool, count=self.num_requests)

    def to_dataframe(self) -> pd.DataFrame:
        """Return one row per request; absent columns are left out, ``num_chunks`` is derived."""
        data: dict[str, object] = {}
        for name, column in self._columns().items():
            if column is None:
                continue
            data[name] = list(column) if isinstance(column, tuple) else column
        if self.itls_s is not None:
            data["num_chunks"] = np.fromiter(
                (len(gaps) + 1 if len(gaps) else 0 for gaps in self.itls_s),
                dtype=np.int64,
                count=self.num_requests,
            )
        return pd.DataFrame(data, index=pd.RangeIndex(self.num_requests, name="request"))


@dataclass(frozen=True, eq=False)
class IntervalTable:
    """Engine counters per logging or scrape interval; NaN marks a value the record did not carry.

    ``at_s`` is the end of the interval in seconds since the artifact's first timestamp (NaN when
    the source has no clock, e.g. a log line without prefix). Draft counters are per interval, never
    cumulative: cumulative sources (vLLM V0 log lines, Prometheus counters) are differenced.
    ``per_position_acceptance_rate`` and ``num_accepted_tokens_per_pos`` have one column per draft
    position. Raise InvariantError if the columns disagree in length.
    """

    at_s: np.ndarray
    num_running: np.ndarray
    num_waiting: np.ndarray
    kv_cache_usage: np.ndarray
    prompt_throughput_tok_s: np.ndarray
    generation_throughput_tok_s: np.ndarray
    num_drafts: np.ndarray
    num_draft_tokens: np.ndarray
    num_accepted_tokens: np.ndarray
    mean_acceptance_length: np.ndarray
    per_position_acceptance_rate: np.ndarray | None = None
    num_accepted_tokens_per_pos: np.ndarray | None = None

    def __post_init__(self) -> None:
        _check_lengths("IntervalTable", len(self.at_s), self._columns())

    def _columns(self) -> dict[str, np.ndarray | None]:
        return {
            "at_s": self.at_s,
            "num_running": self.num_running,
            "num_waiting": self.num_waiting,
            "kv_cache_usage": self.kv_cache_usage,
            "prompt_throughput_tok_s": self.prompt_throughput_tok_s,
            "generation_throughput_tok_s": self.generation_throughput_tok_s,
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "mean_acceptance_length": self.mean_acceptance_length,
            "per_position_acceptance_rate": self.per_position_acceptance_rate,
            "num_accepted_tokens_per_pos": self.num_accepted_tokens_per_pos,
        }

    @property
    def num_intervals(self) -> int:
        """Number of rows."""
        return len(self.at_s)

    def to_dataframe(self) -> pd.DataFrame:
        """Return one row per interval; per-position arrays become ``<name>_<position>`` columns."""
        data: dict[str, np.ndarray] = {}
        for name, column in self._columns().items():
            if column is None:
                continue
            if column.ndim == 2:
                for position in range(column.shape[1]):
                    data[f"{name}_{position}"] = column[:, position]
            else:
                data[name] = column
        return pd.DataFrame(data)


@dataclass(frozen=True, eq=False)
class StepTable:
    """Per engine step batch composition and wall time, from vLLM ``Iteration(…)`` log lines
    (0.14+).

    "Context" requests have produced no output yet (prefill, including chunked-prefill
    continuations); "generation tokens" are scheduled decode tokens, i.e. 1 + number of draft
    tokens per speculating request. Raise InvariantError if the columns disagree in length.
    """

    at_s: np.ndarray
    iteration: np.ndarray
    num_context_requests: np.ndarray
    num_context_tokens: np.ndarray
    num_generation_requests: np.ndarray
    num_generation_tokens: np.ndarray
    elapsed_s: np.ndarray
    kv_cache_usage: np.ndarray
    is_dummy: np.ndarray

    def __post_init__(self) -> None:
        _check_lengths("StepTable", len(self.at_s), self.__dict__)

    @property
    def num_steps(self) -> int:
        """Number of rows."""
        return len(self.at_s)

    def to_dataframe(self) -> pd.DataFrame:
        """Return one row per engine step."""
        return pd.DataFrame(dict(self.__dict__))


@dataclass(frozen=True)
class SpecDecodeSummary:
    """Speculative-decoding totals over the whole artifact, in vLLM ≥ 0.9.0 definitions.

    ``num_drafts`` counts (request, verify step) pairs with at least one draft token;
    ``mean_acceptance_length`` includes the bonus token; ``draft_acceptance_rate`` is accepted /
    drafted (fraction); ``acceptance_histogram[j]`` counts verify steps that accepted exactly j
    drafts (bonus excluded). ``layout`` names the source format seen (e.g. ``"vllm-log-0.10.2"``);
    it matters because vLLM 0.8.5 printed the acceptance length without the bonus token.
    """

    layout: str
    num_drafts: int | None = None
    num_draft_tokens: int | None = None
    num_accepted_tokens: int | None = None
    mean_acceptance_length: float | None = None
    draft_acceptance_rate: float | None = None
    per_position_acceptance_rate: tuple[float, ...] | None = None
    acceptance_histogram: tuple[int, ...] | None = None


@dataclass(frozen=True, eq=False)
class AcceptanceTraces:
    """Per-request, per-position acceptance traces measured with a long proposal.

    ``acc_len[method][i][pos]`` is the number of tokens a verify step starting at output position
    ``pos`` of request i would emit, bonus included; a chain of k drafts emits
    ``min(acc_len[pos], k + 1)``. The trace of a method may be shorter or longer than
    ``output_tokens[i]`` when that method's run generated different text.
    Raise InvariantError if a method's traces do not cover every request.
    """

    request_ids: tuple[str, ...]
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    acc_len: Mapping[str, tuple[np.ndarray, ...]]

    def __post_init__(self) -> None:
        columns: dict[str, object] = {"prompt_tokens": self.prompt_tokens}
        columns["output_tokens"] = self.output_tokens
        columns.update({f"acc_len[{m}]": traces for m, traces in self.acc_len.items()})
        _check_lengths("AcceptanceTraces", len(self.request_ids), columns)
        object.__setattr__(self, "acc_len", MappingProxyType(dict(self.acc_len)))

    @property
    def methods(self) -> tuple[str, ...]:
        """The drafting methods traced, e.g. ``("eagle", "ngram")``."""
        return tuple(self.acc_len)


@dataclass(frozen=True, eq=False)
class RunMetadata:
    """What is known about the run that produced an artifact; unknown fields are None.

    ``engine_version`` is an exact release when the artifact states it; otherwise ``engine_era``
    describes the release range inferred from the format (e.g. ``"vllm>=0.14"``).
    ``request_rate_per_s`` is None for an unlimited ("inf") or unknown rate. ``settings`` keeps
    engine-specific knobs (tree top-k, batch size, user ``--metadata`` pairs) verbatim.
    """

    source_path: str
    source_sha256: str
    engine: str | None = None
    engine_version: str | None = None
    engine_era: str | None = None
    method: str | None = None
    num_speculative_tokens: int | None = None
    temperature: float | None = None
    model: str | None = None
    tensor_parallel_size: int | None = None
    gpu: str | None = None
    request_rate_per_s: float | None = None
    max_concurrency: int | None = None
    settings: Mapping[str, SettingValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "settings", _frozen_mapping(self.settings))


@dataclass(frozen=True, eq=False)
class ParsedArtifact:
    """One run read from one artifact, normalised; parts the artifact lacks are None.

    ``aggregates`` holds the artifact's own summary numbers under vLLM bench key names (e.g.
    ``duration``, ``mean_ttft_ms``), after known quirks are corrected; ``notes`` says which
    corrections and derivations were applied, so a fit can be traced back to the file.
    """

    kind: str
    metadata: RunMetadata
    requests: RequestTable | None = None
    intervals: IntervalTable | None = None
    steps: StepTable | None = None
    spec_decode: SpecDecodeSummary | None = None
    acceptance: AcceptanceTraces | None = None
    aggregates: Mapping[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "aggregates", _frozen_mapping(self.aggregates))


def requests_to_dataframe(artifact: ParsedArtifact) -> pd.DataFrame:
    """Return the artifact's per-request table as a DataFrame, with ``source`` and ``kind`` columns.

    An artifact without per-request data gives an empty DataFrame; this never raises.
    """
    if artifact.requests is None:
        return pd.DataFrame()
    frame = artifact.requests.to_dataframe()
    frame["source"] = artifact.metadata.source_path
    frame["kind"] = artifact.kind
    return frame


def nan_column(num_rows: int) -> np.ndarray:
    """Return a float64 column of NaN, the placeholder for a value no row carried."""
    return np.full(num_rows, np.nan, dtype=np.float64)
