"""What a real serving run can have measured: every parsed artifact is checked before a fit.

A parser checks that a file is well formed; these checks refuse values no run can produce, which
would otherwise become a profile with τ = −2, a scipy crash on non-finite residuals, or a fit with
−99 % error that exits 0:

- latencies: TTFT and end-to-end latency > 0 and the end-to-end latency not below the TTFT (the
  last token comes after the first); inter-token gaps >= 0;
- speculative decoding: accepted <= drafted tokens, and the mean acceptance length τ (bonus
  included) in [1, k + 1] with k draft tokens per step (vLLM ``vllm/v1/spec_decode/metrics.py``
  defines τ = 1 + accepted / drafts; each draft holds at most k tokens, all of which may be
  accepted); rates in [0, 1];
- counters: per-interval differences of cumulative counters >= 0 (a counter that went down is a
  restart or two runs mixed), and scrape timestamps in order.

Each refusal is a CalibrationError naming the file and the record (request or interval, counted
from 0 in file order) and the values.
"""

from __future__ import annotations

import numpy as np

from sim.artifacts.schema import IntervalTable, ParsedArtifact, RequestTable, SpecDecodeSummary
from sim.errors import CalibrationError

#: Slack for values computed from rounded figures (a τ printed to two decimals, a rate to three).
ROUNDING = 0.01


def _refuse(artifact: ParsedArtifact, what: str) -> CalibrationError:
    return CalibrationError(f"{artifact.metadata.source_path}: {what}")


def _first(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def _check_requests(artifact: ParsedArtifact, table: RequestTable) -> None:
    ok = table.succeeded
    if table.itls_s is not None:
        for index, gaps in enumerate(table.itls_s):
            if gaps.size and np.nanmin(gaps) < 0:
                raise _refuse(
                    artifact,
                    f"request {index}: an inter-token gap is {np.nanmin(gaps):.6g} s; gaps "
                    "must be >= 0",
                )
    for name, column in (("TTFT", table.ttft_s), ("end-to-end latency", table.e2e_s)):
        if column is None:
            continue
        bad = _first(ok & np.isfinite(column) & (column <= 0))
        if bad is not None:
            raise _refuse(
                artifact,
                f"request {bad}: {name} is {column[bad]:.6g} s; a latency must be > 0 "
                "(are the timestamps of this request out of order?)",
            )
    if table.ttft_s is not None and table.e2e_s is not None:
        both = ok & np.isfinite(table.ttft_s) & np.isfinite(table.e2e_s)
        bad = _first(both & (table.e2e_s < table.ttft_s * (1 - 1e-9) - 1e-9))
        if bad is not None:
            raise _refuse(
                artifact,
                f"request {bad}: end-to-end latency {table.e2e_s[bad]:.6g} s is below its TTFT "
                f"{table.ttft_s[bad]:.6g} s; the last token cannot come before the first",
            )


def _check_tau(artifact: ParsedArtifact, tau: float, where: str) -> None:
    k = artifact.metadata.num_speculative_tokens
    high = float(k + 1) if k else float("inf")
    if not np.isfinite(tau) or tau < 1 - ROUNDING or tau > high + ROUNDING:
        bound = f"[1, k + 1] = [1, {k + 1}]" if k else ">= 1"
        raise _refuse(
            artifact,
            f"{where}: mean acceptance length {tau:.6g} is outside {bound}: a verify step emits "
            "the bonus token and at most every draft token",
        )


def _check_intervals(artifact: ParsedArtifact, table: IntervalTable) -> None:
    # Scrapes of one server come in time order; a log file may hold several sessions' excerpts,
    # each with its own clock, so only scrapes are held to it.
    at = table.at_s[np.isfinite(table.at_s)] if artifact.kind == "prometheus" else table.at_s[:0]
    bad = _first(np.diff(at) < 0)
    if bad is not None:
        raise _refuse(
            artifact,
            f"interval {bad + 1}: timestamp {at[bad + 1]:.6g} s comes before the previous "
            f"{at[bad]:.6g} s; records must be in time order",
        )
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        column = getattr(table, name)
        bad = _first(np.isfinite(column) & (column < 0))
        if bad is not None:
            raise _refuse(
                artifact,
                f"interval {bad}: {name} changed by {column[bad]:.6g}; a counter never goes "
                "down (was the server restarted, or are two runs mixed?)",
            )
    drafted, accepted = table.num_draft_tokens, table.num_accepted_tokens
    bad = _first(np.isfinite(drafted) & np.isfinite(accepted) & (accepted > drafted))
    if bad is not None:
        raise _refuse(
            artifact,
            f"interval {bad}: {accepted[bad]:.6g} accepted tokens exceed {drafted[bad]:.6g} "
            "drafted ones",
        )
    for index, tau in enumerate(table.mean_acceptance_length):
        if np.isfinite(tau):
            _check_tau(artifact, float(tau), f"interval {index}")
    if table.per_position_acceptance_rate is not None:
        rates = table.per_position_acceptance_rate
        outside = np.isfinite(rates) & ((rates < -ROUNDING) | (rates > 1 + ROUNDING))
        if outside.any():
            row = int(np.argwhere(outside)[0][0])
            raise _refuse(artifact, f"interval {row}: an acceptance rate is outside [0, 1]")


def _check_summary(artifact: ParsedArtifact, summary: SpecDecodeSummary) -> None:
    drafted, accepted = summary.num_draft_tokens, summary.num_accepted_tokens
    if drafted is not None and accepted is not None and accepted > drafted:
        raise _refuse(
            artifact,
            f"speculative decoding totals: {accepted} accepted tokens exceed {drafted} drafted",
        )
    if summary.mean_acceptance_length is not None:
        _check_tau(artifact, summary.mean_acceptance_length, "speculative decoding totals")
    rate = summary.draft_acceptance_rate
    if rate is not None and not -ROUNDING <= rate <= 1 + ROUNDING:
        raise _refuse(artifact, f"draft acceptance rate {rate:.6g} is outside [0, 1]")
    rates = summary.per_position_acceptance_rate or ()
    if any(not -ROUNDING <= r <= 1 + ROUNDING for r in rates):
        raise _refuse(artifact, f"per-position acceptance rates {list(rates)} leave [0, 1]")


def check_artifact(artifact: ParsedArtifact) -> ParsedArtifact:
    """Return ``artifact`` if every value is one a real run can produce.

    Raise CalibrationError naming the file, the record and the values of the first that is not.
    """
    if artifact.requests is not None:
        _check_requests(artifact, artifact.requests)
    if artifact.intervals is not None:
        _check_intervals(artifact, artifact.intervals)
    if artifact.spec_decode is not None:
        _check_summary(artifact, artifact.spec_decode)
    return artifact
