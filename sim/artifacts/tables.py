"""Assembling interval rows into an :class:`IntervalTable` and totalling its acceptance counters.

Parsers collect one plain dict per interval (only the keys the record carried) and hand the list
here; per-position lists of different widths are padded with NaN.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sim.artifacts.schema import IntervalTable, SpecDecodeSummary, nan_column

IntervalRow = dict[str, object]
"""One interval: scalar columns of :class:`IntervalTable` by name, plus optional ``rates``
(per-position acceptance fractions) and ``per_pos_counts`` (accepted tokens per position)."""

SCALAR_COLUMNS = (
    "at_s",
    "num_running",
    "num_waiting",
    "kv_cache_usage",
    "prompt_throughput_tok_s",
    "generation_throughput_tok_s",
    "num_drafts",
    "num_draft_tokens",
    "num_accepted_tokens",
    "mean_acceptance_length",
)


def _matrix(rows: Sequence[IntervalRow], key: str) -> np.ndarray | None:
    lists = [row.get(key) for row in rows]
    width = max((len(v) for v in lists if isinstance(v, Sequence | np.ndarray)), default=0)
    if width == 0:
        return None
    matrix = np.full((len(rows), width), np.nan, dtype=np.float64)
    for index, values in enumerate(lists):
        if isinstance(values, Sequence | np.ndarray) and len(values):
            matrix[index, : len(values)] = np.asarray(values, dtype=np.float64)
    return matrix


def interval_table(rows: Sequence[IntervalRow]) -> IntervalTable | None:
    """Return the rows as an IntervalTable (missing values NaN), or None for no rows."""
    if not rows:
        return None
    columns: dict[str, np.ndarray] = {}
    for name in SCALAR_COLUMNS:
        column = nan_column(len(rows))
        for index, row in enumerate(rows):
            value = row.get(name)
            if value is not None:
                column[index] = float(value)  # type: ignore[arg-type]
        columns[name] = column
    return IntervalTable(
        **columns,
        per_position_acceptance_rate=_matrix(rows, "rates"),
        num_accepted_tokens_per_pos=_matrix(rows, "per_pos_counts"),
    )


def _rows_with(*columns: np.ndarray) -> np.ndarray:
    mask = np.ones(len(columns[0]), dtype=bool)
    for column in columns:
        mask &= np.isfinite(column)
    return mask


def spec_summary_from_intervals(
    table: IntervalTable | None, layout: str
) -> SpecDecodeSummary | None:
    """Total the acceptance counters of every interval; None when no interval carried any.

    The mean acceptance length is ``1 + Σ accepted / Σ drafts`` over the intervals that report both;
    when no interval reports a draft count (SGLang logs, vLLM 0.8.3 lines) it is the plain mean of
    the per-interval values. Per-position rates are draft-weighted the same way.
    """
    if table is None:
        return None
    drafts, draft_tokens = table.num_drafts, table.num_draft_tokens
    accepted, mal = table.num_accepted_tokens, table.mean_acceptance_length
    rates, per_pos = table.per_position_acceptance_rate, table.num_accepted_tokens_per_pos
    spec_columns = (drafts, draft_tokens, accepted, mal)
    if rates is None and per_pos is None and not any(np.isfinite(c).any() for c in spec_columns):
        return None

    def total(column: np.ndarray) -> int | None:
        finite = column[np.isfinite(column)]
        return round(float(finite.sum())) if finite.size else None

    both = _rows_with(drafts, accepted)
    if both.any() and drafts[both].sum() > 0:
        mean_length: float | None = 1.0 + float(accepted[both].sum() / drafts[both].sum())
    else:
        finite_mal = mal[np.isfinite(mal)]
        mean_length = float(finite_mal.mean()) if finite_mal.size else None
    token_rows = _rows_with(draft_tokens, accepted)
    acceptance_rate = (
        float(accepted[token_rows].sum() / draft_tokens[token_rows].sum())
        if token_rows.any() and draft_tokens[token_rows].sum() > 0
        else None
    )
    return SpecDecodeSummary(
        layout=layout,
        num_drafts=total(drafts),
        num_draft_tokens=total(draft_tokens),
        num_accepted_tokens=total(accepted),
        mean_acceptance_length=mean_length,
        draft_acceptance_rate=acceptance_rate,
        per_position_acceptance_rate=_per_position(drafts, rates, per_pos),
    )


def _per_position(
    drafts: np.ndarray, rates: np.ndarray | None, per_pos: np.ndarray | None
) -> tuple[float, ...] | None:
    # Each position is weighted by the drafts of the intervals that report it, since intervals
    # with a smaller k have no value at the later positions.
    weighted = per_pos if per_pos is not None else None
    if weighted is None and rates is not None:
        weighted = rates * drafts[:, None]
    if weighted is not None:
        reported = np.isfinite(weighted) & np.isfinite(drafts)[:, None]
        denominators = np.where(reported, drafts[:, None], 0.0).sum(axis=0)
        if reported.any() and np.all(denominators > 0):
            numerators = np.where(reported, weighted, 0.0).sum(axis=0)
            return tuple(float(v) for v in numerators / denominators)
    if rates is not None and np.isfinite(rates).any():
        seen = np.isfinite(rates).sum(axis=0)
        means = np.where(seen > 0, np.nansum(rates, axis=0) / np.maximum(seen, 1), np.nan)
        return tuple(float(v) for v in means)
    return None
