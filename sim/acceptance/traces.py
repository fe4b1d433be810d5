"""Replaying per-request acceptance traces measured on a real engine.

A trace holds, for every output position of one real request, ``acc_len[pos]``: the tokens a verify
step starting at that position would emit (bonus token included) with a long proposal. A chain of k
drafts starting at ``pos`` emits ``min(acc_len[pos], k + 1)`` tokens and the next step starts at
``pos`` plus that (the SpecDecode-Bench convention, Liu et al. 2026, arXiv:2601.11580). Replaying a
trace keeps what a single α loses: easy and hard stretches inside a request, and easy and
hard requests.

A simulated request longer than its trace continues from the trace's start (positions
wrap modulo the
trace length), so its acceptance keeps the trace's statistics rather than inventing new ones.

Trees: the trace gives the top path; where it stops short of the tree's depth, a sibling may still
be accepted (the rank rule of ``tree.py``, with the trace set's own per-depth conditional rates) and
the walk then continues along the trace from the next position, which is the same text because the
accepted sibling is the target's token.

n-gram: a position with ``acc_len == 1`` is either a proposal rejected at its first token or no
proposal at all (no match), which the trace cannot tell apart. With match rate ``m`` (the
fraction of
steps that find a match), such a step is a miss with probability ``(1 − m) / P1``, where
``P1`` is the
fraction of k = 1 steps that emit one token. The default ``m = min(1, (1 − P1) / a1)`` takes
``a1 = 0.579``, the first-position acceptance of vLLM's n-gram proposer given a draft
(mean of the two
windows logged in vLLM issue #19254: 0.543 and 0.615).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.acceptance.plan import (
    AcceptanceModel,
    AcceptancePlan,
    Proposal,
    check_decode_tokens,
    offsets_from_counts,
)
from sim.acceptance.trace_chains import chain_plan
from sim.acceptance.tree import SIBLING_DECAY, rescue_probabilities
from sim.errors import CalibrationError, ScenarioError
from sim.inputs import InputError, read_text

NGRAM_FIRST_POSITION_RATE = 0.579
TRACE_FIELDS = ("acc_eagle", "acc_ngram")
#: acc_len is stored as one byte per position (the shipped .npz): 1..255 tokens per verify step.
MAX_ACCEPTED_PER_STEP = 255


@dataclass(frozen=True)
class TraceSet:
    """Many requests' ``acc_len`` arrays, concatenated: trace t is
    ``acc_len[offsets[t]:offsets[t+1]]``."""

    acc_len: np.ndarray
    offsets: np.ndarray
    source: str

    @property
    def num_traces(self) -> int:
        """How many traces the set holds."""
        return int(self.offsets.size - 1)

    @property
    def lengths(self) -> np.ndarray:
        """Positions per trace."""
        return np.diff(self.offsets)

    @classmethod
    def from_lists(cls, traces: list[list[int]] | list[np.ndarray], source: str) -> TraceSet:
        """A set from per-request lists, dropping empty ones.

        Raise CalibrationError if no trace is left or a value is outside 1..255.
        """
        kept = [np.asarray(trace, dtype=np.int64) for trace in traces if len(trace) > 0]
        if not kept:
            raise CalibrationError(f"{source}: no non-empty acceptance trace")
        flat = np.concatenate(kept)
        if flat.min() < 1 or flat.max() > MAX_ACCEPTED_PER_STEP:
            raise CalibrationError(
                f"{source}: acc_len values must be in 1..{MAX_ACCEPTED_PER_STEP}"
            )
        lengths = np.array([trace.size for trace in kept], dtype=np.int64)
        return cls(flat.astype(np.uint8), offsets_from_counts(lengths), source)


def load_jsonl_traces(path: Path, field: str) -> TraceSet:
    """Read ``field`` (``acc_eagle`` or ``acc_ngram``) ``{"acc_len": [...]}`` from every
    line of a file.

    Raise ScenarioError if the file is missing, CalibrationError naming the line if one
    is malformed.
    """
    if field not in TRACE_FIELDS:
        raise ScenarioError(
            f"speculation.acceptance.trace_field: must be one of {TRACE_FIELDS}, got {field!r}"
        )
    if not path.is_file():
        raise ScenarioError(f"speculation.acceptance.trace: no such file {path}")
    try:
        text = read_text(path)
    except InputError as exc:
        raise CalibrationError(str(exc)) from None
    traces: list[list[int]] = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            trace = [int(value) for value in json.loads(line)[field]["acc_len"]]
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as error:
            raise CalibrationError(
                f"{path}:{line_number}: expected {field}.acc_len, a list of integers ({error})"
            ) from None
        # A verify step emits at least the bonus token and at most the proposal plus one.
        if any(not 1 <= value <= MAX_ACCEPTED_PER_STEP for value in trace):
            bad = next(v for v in trace if not 1 <= v <= MAX_ACCEPTED_PER_STEP)
            raise CalibrationError(
                f"{path}:{line_number}: {field}.acc_len holds {bad}; tokens per verify step "
                f"are between 1 and {MAX_ACCEPTED_PER_STEP}"
            )
        traces.append(trace)
    return TraceSet.from_lists(traces, str(path))


def chain_replay_totals(traces: TraceSet, depth: int) -> tuple[int, int]:
    """The tokens emitted and the verify steps taken when every trace is replayed once from its
    start with a chain of ``depth`` drafts, as :meth:`TraceReplayModel.plan` replays it for a
    request of the trace's length: a step at position ``p`` accepts ``min(acc_len[p] - 1,
    depth)`` drafts and emits one token more, and the replay moves on by that many positions
    until it reaches the trace's end (so it never wraps).

    Each position's successor is fixed, so the replay is a path in a forest; pointer doubling
    sums the tokens and steps along every path in ``log2`` of the longest replay's steps
    passes over the positions (the walk takes one numpy pass per step index, 4,672 for the
    shipped ShareGPT traces at depth 3). The totals of traces seen before in this process are
    remembered."""
    digest = hashlib.blake2b(np.ascontiguousarray(traces.acc_len).tobytes())
    digest.update(np.ascontiguousarray(traces.offsets, dtype=np.int64).tobytes())
    key = (digest.digest(), int(depth))
    known = _REPLAY_TOTALS.get(key)
    if known is not None:
        return known
    totals = _replay_totals(traces, depth)
    with _REPLAY_LOCK:  # runs in threads of one process (a Dask worker's) share the memo
        if len(_REPLAY_TOTALS) >= KEEP_REPLAY_TOTALS:
            _REPLAY_TOTALS.pop(next(iter(_REPLAY_TOTALS)))
        _REPLAY_TOTALS[key] = totals
    return totals


#: :func:`chain_replay_totals` of the trace sets and depths seen in this process, by a digest of
#: the traces (BLAKE2b) and the depth: every run of a sweep or a plan describes its strategy,
#: and each build reads its traces anew.
_REPLAY_TOTALS: dict[tuple[bytes, int], tuple[int, int]] = {}
#: Entries kept in :data:`_REPLAY_TOTALS` (the oldest goes first).
KEEP_REPLAY_TOTALS = 64
_REPLAY_LOCK = threading.Lock()


def _replay_totals(traces: TraceSet, depth: int) -> tuple[int, int]:
    acc = traces.acc_len.astype(np.int64)
    n = acc.size
    lengths = traces.lengths
    starts = traces.offsets[:-1][lengths > 0]
    jump = np.minimum(acc - 1, depth) + 1
    after = np.arange(n, dtype=np.int64) + jump
    end = np.repeat(traces.offsets[1:], lengths)
    # Position n is the absorbing end: no tokens, no steps, its own successor.
    successor = np.append(np.where(after < end, after, n), n)
    tokens = np.append(jump, 0)
    steps = np.append(np.ones(n, dtype=np.int64), 0)
    while (successor[starts] != n).any():
        tokens, steps, successor = (
            tokens + tokens[successor],
            steps + steps[successor],
            successor[successor],
        )
    return int(tokens[starts].sum()), int(steps[starts].sum())


class TraceReplayModel(AcceptanceModel):
    """Each request replays one real trace (its ``trace_keys`` entry, else a uniform draw).

    Raise ScenarioError if ``match_rate`` is outside [0, 1] or below what the traces allow.
    """

    def __init__(
        self,
        traces: TraceSet,
        *,
        field: str = "acc_eagle",
        match_rate: float | None = None,
        sibling_decay: float = SIBLING_DECAY,
        provenance: dict[str, Any] | None = None,
    ) -> None:
        self.traces = traces
        self.field = field
        self.sibling_decay = float(sibling_decay)
        self.provenance = dict(provenance or {})
        self.sibling_rates = self._conditional_rates_by_position()
        self.miss_probability = 0.0
        self.match_rate = 1.0
        if field == "acc_ngram":
            single_fraction = 2.0 - self.token_weighted_tau(1)
            default_rate = min(1.0, (1.0 - single_fraction) / NGRAM_FIRST_POSITION_RATE)
            self.match_rate = default_rate if match_rate is None else float(match_rate)
            if not 1.0 - single_fraction - 1e-12 <= self.match_rate <= 1.0:
                raise ScenarioError(
                    f"speculation.acceptance.ngram_match_rate: must be in "
                    f"[{1.0 - single_fraction:.4f}, 1] for {traces.source} (the fraction of "
                    f"steps that accept a draft token), got {self.match_rate}"
                )
            if single_fraction > 0.0:
                self.miss_probability = min(1.0, (1.0 - self.match_rate) / single_fraction)

    def _conditional_rates_by_position(self) -> np.ndarray:
        # Position-weighted P(acc_len >= d + 2 | acc_len >= d + 1): the top candidate's
        # rate at depth d.
        counts = np.bincount(self.traces.acc_len.astype(np.int64), minlength=257)[1:]
        at_least = np.cumsum(counts[::-1])[::-1].astype(np.float64)
        rates = np.divide(at_least[1:], at_least[:-1], out=np.zeros(255), where=at_least[:-1] > 0)
        return rates

    def _keys(self, num_requests: int, trace_keys: np.ndarray | None, rng: np.random.Generator):
        if trace_keys is None:
            return rng.integers(0, self.traces.num_traces, size=num_requests)
        keys = np.asarray(trace_keys, dtype=np.int64)
        if keys.shape != (num_requests,):
            raise ScenarioError(f"trace_keys must have shape ({num_requests},), got {keys.shape}")
        if np.any(keys < 0) or np.any(keys >= self.traces.num_traces):
            raise ScenarioError(
                f"trace_keys must be in [0, {self.traces.num_traces}) for {self.traces.source}"
            )
        return keys

    def _tree_accepted(
        self, start: np.ndarray, length: np.ndarray, base: np.ndarray, proposal: Proposal,
        rescue: np.ndarray, rng: np.random.Generator,
    ) -> np.ndarray:  # fmt: skip
        depth = proposal.depth
        done = np.zeros(start.size, dtype=np.int64)
        position = start.copy()
        going = np.ones(start.size, dtype=bool)
        while np.any(going):
            walking = np.flatnonzero(going)
            acc = self.traces.acc_len[base[walking] + position[walking]].astype(np.int64)
            top = np.minimum(acc - 1, depth - done[walking])
            done[walking] += top
            short = done[walking] < depth
            rescued = short & (
                rng.random(walking.size) < rescue[np.minimum(done[walking], depth - 1)]
            )
            saved = walking[rescued]
            done[saved] += 1
            position[saved] = (position[saved] + top[rescued] + 1) % length[saved]
            going[:] = False
            going[saved[done[saved] < depth]] = True
        return done

    def _walk(
        self, needed: np.ndarray, base: np.ndarray, length: np.ndarray, proposal: Proposal,
        rescue: np.ndarray, rng: np.random.Generator, visit: Callable[..., None],
    ) -> None:  # fmt: skip
        """Walk every request's trace in lockstep, calling ``visit(step_index, owners,
        proposed, accepted)`` for each step index with the requests that take it."""
        position = np.zeros(needed.size, dtype=np.int64)
        emitted_total = np.zeros(needed.size, dtype=np.int64)
        active = np.flatnonzero(needed > 0)
        step_index = 0
        while active.size:
            here = position[active]
            if proposal.is_tree:
                accepted = self._tree_accepted(here, length[active], base[active], proposal,
                                               rescue, rng)  # fmt: skip
            else:
                acc = self.traces.acc_len[base[active] + here].astype(np.int64)
                accepted = np.minimum(acc - 1, proposal.depth)
            proposed = np.full(active.size, proposal.num_draft_tokens, dtype=np.int16)
            if self.miss_probability > 0.0:
                miss = (accepted == 0) & (rng.random(active.size) < self.miss_probability)
                proposed[miss] = 0
            visit(step_index, active, proposed, accepted.astype(np.int16))
            step_index += 1
            emitted_total[active] += accepted + 1
            position[active] = (here + accepted + 1) % length[active]
            active = active[emitted_total[active] < needed[active]]

    def plan(
        self,
        num_decode_tokens: np.ndarray,
        proposal: Proposal,
        rng: np.random.Generator,
        trace_keys: np.ndarray | None = None,
    ) -> AcceptancePlan:
        """Each request replays its trace: a chain's steps are read off each trace's walk
        (:func:`~sim.acceptance.trace_chains.chain_plan`), a tree's are walked in lockstep, one
        vectorised pass per step index (:meth:`walked_plan`); the two give a chain the same
        plan.

        Raise ScenarioError if ``trace_keys`` has the wrong shape or an index out of range.
        """
        needed = check_decode_tokens(num_decode_tokens)
        keys = self._keys(needed.size, trace_keys, rng)
        if not proposal.is_tree:
            return chain_plan(
                self.traces.acc_len, self.traces.offsets, keys, needed, proposal,
                self.miss_probability, rng,
            )  # fmt: skip
        return self.walked_plan(needed, keys, proposal, rng)

    def walked_plan(
        self, needed: np.ndarray, keys: np.ndarray, proposal: Proposal, rng: np.random.Generator
    ) -> AcceptancePlan:
        """The plan of requests replaying traces ``keys`` for ``needed`` decode tokens, every
        request's trace walked in lockstep, one vectorised pass per step index."""
        base = self.traces.offsets[keys]
        length = self.traces.lengths[keys]
        rescue = np.zeros(max(proposal.depth, 1))
        if proposal.is_tree and proposal.tree_widths is not None:
            rates = self.sibling_rates[: proposal.depth]
            rescue = rescue_probabilities(rates, proposal.tree_widths, self.sibling_decay)
        # Two identical walks (the generator's state put back in between): the first counts
        # each request's steps, the second writes them in place. Holding every step's arrays
        # until the offsets are known would take three times the plan's memory.
        state = rng.bit_generator.state
        num_steps = np.zeros(needed.size, dtype=np.int64)

        def count(step_index: int, owners: np.ndarray, *_: np.ndarray) -> None:
            num_steps[owners] += 1

        self._walk(needed, base, length, proposal, rescue, rng, count)
        rng.bit_generator.state = state
        offsets = offsets_from_counts(num_steps)
        total = int(offsets[-1])
        # A step proposes at most num_draft_tokens: one byte each when that fits (a million
        # requests' plans are some 10^8 steps).
        dtype = np.int8 if proposal.num_draft_tokens <= np.iinfo(np.int8).max else np.int16
        all_proposed = np.zeros(total, dtype=dtype)
        all_accepted = np.zeros(total, dtype=dtype)

        def write(step_index: int, owners: np.ndarray, proposed: np.ndarray,
                  accepted: np.ndarray) -> None:  # fmt: skip
            all_proposed[offsets[owners] + step_index] = proposed
            all_accepted[offsets[owners] + step_index] = accepted

        self._walk(needed, base, length, proposal, rescue, rng, write)
        return AcceptancePlan(offsets, all_proposed, all_accepted)

    def token_weighted_tau(self, num_speculative_tokens: int) -> float:
        """Tokens per step over every trace replayed once from its start with a chain of
        k drafts (:meth:`plan` of every trace at its own length, whose steps' tokens and count
        :func:`chain_replay_totals` finds without the walk)."""
        tokens, steps = chain_replay_totals(self.traces, num_speculative_tokens)
        return float(np.float64(tokens) / steps)

    def expected_acceptance_length(self, proposal: Proposal) -> float:
        """τ over every trace replayed once from its start (a fixed internal seed for
        tree siblings)."""
        if not proposal.is_tree:
            return self.token_weighted_tau(proposal.depth)
        plan = self.plan(
            self.traces.lengths, proposal, np.random.default_rng(0),
            trace_keys=np.arange(self.traces.num_traces),
        )  # fmt: skip
        return float(np.sum(plan.accepted.astype(np.int64) + 1) / plan.accepted.size)

    def describe(self) -> dict[str, Any]:
        """The trace source, field, match rate and tree rule."""
        return {
            "name": "trace",
            "source": self.traces.source,
            "trace_field": self.field,
            "num_traces": self.traces.num_traces,
            "ngram_match_rate": round(self.match_rate, 6) if self.field == "acc_ngram" else None,
            "tree_sibling_decay": self.sibling_decay,
            "wrap": "a request longer than its trace continues from the trace's first position",
            **self.provenance,
        }
