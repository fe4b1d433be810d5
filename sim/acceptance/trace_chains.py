"""A chain's acceptance plan from replayed traces, without walking the requests in lockstep.

:meth:`TraceReplayModel.plan <sim.acceptance.traces.TraceReplayModel.plan>` walks every
request's trace one step index at a time, twice (once to count the steps, once to write them):
some 1,000 numpy passes over up to every request for requests of up to 1,024 output tokens.
For a chain the walk of a request depends only on its trace, not on the request: every
request replaying trace ``t`` visits the same positions (from the trace's first, wrapping at its
end) and accepts the same drafts at each step, and stops at the first step whose emitted tokens
cover its own length. So :func:`chain_plan` walks each trace once, as far as its longest
request needs, and reads each request's steps off its trace's walk. The n-gram lookup's misses
(a step that accepts nothing proposes nothing with probability ``miss_probability``) are drawn
as the walk draws them: at each step index, one uniform per request still going, in request
order. The plan is that of the walk, array for array, and the generator ends in the same state
(``tests/acceptance/test_traces.py`` compares the two).
"""

from __future__ import annotations

import numpy as np

from sim.acceptance.plan import AcceptancePlan, Proposal, offsets_from_counts

#: Requests whose steps are gathered at once (bounds the temporaries to a few MB).
CHUNK_REQUESTS = 1 << 13


def chain_plan(
    acc_len: np.ndarray,
    trace_offsets: np.ndarray,
    keys: np.ndarray,
    needed: np.ndarray,
    proposal: Proposal,
    miss_probability: float,
    rng: np.random.Generator,
) -> AcceptancePlan:
    """The plan of requests replaying traces ``keys`` (``acc_len[trace_offsets[t]:
    trace_offsets[t + 1]]`` each) for ``needed`` decode tokens with a chain of
    ``proposal.depth`` drafts; ``rng`` draws the misses (when ``miss_probability`` > 0)."""
    depth, k = proposal.depth, proposal.num_draft_tokens
    going = needed > 0
    used, slot = np.unique(keys[going], return_inverse=True)
    target = np.zeros(len(used), dtype=np.int64)
    np.maximum.at(target, slot, needed[going])
    walk = _trace_walks(acc_len, trace_offsets, used, target, depth)
    # The first step whose emitted tokens cover the request: cumulative sums rise within a
    # row, and row u is shifted by u * shift so that one search serves every row.
    emitted = np.cumsum(walk.astype(np.int64) + 1, axis=1)
    emitted[walk < 0] = np.iinfo(np.int32).max  # beyond a trace's walk
    shift = np.int64(np.iinfo(np.int32).max) + 1
    rows = emitted + np.arange(len(used), dtype=np.int64)[:, None] * shift
    num_steps = np.zeros(needed.size, dtype=np.int64)
    found = np.searchsorted(rows.ravel(), needed[going] + slot * shift)
    num_steps[going] = found - slot * walk.shape[1] + 1
    offsets = offsets_from_counts(num_steps)
    total = int(offsets[-1])
    # A step proposes at most num_draft_tokens: one byte each when that fits.
    dtype = np.int8 if k <= np.iinfo(np.int8).max else np.int16
    accepted = np.zeros(total, dtype=dtype)
    row_of = np.full(needed.size, -1, dtype=np.int64)
    row_of[going] = slot
    for start in range(0, needed.size, CHUNK_REQUESTS):
        stop = min(start + CHUNK_REQUESTS, needed.size)
        counts = num_steps[start:stop]
        owner = np.repeat(np.arange(start, stop), counts)
        first = offsets[start]
        index = np.arange(first, offsets[stop]) - offsets[owner]
        accepted[first : offsets[stop]] = walk[row_of[owner], index]
    proposed = np.full(total, k, dtype=dtype)
    if miss_probability > 0.0:
        _draw_misses(proposed, accepted, offsets, num_steps, miss_probability, rng)
    return AcceptancePlan(offsets, proposed, accepted)


def _trace_walks(
    acc_len: np.ndarray,
    trace_offsets: np.ndarray,
    used: np.ndarray,
    target: np.ndarray,
    depth: int,
) -> np.ndarray:
    """Drafts accepted at each step of each used trace's replay (row per trace, -1 past its
    walk), walked from the trace's first position, wrapping at its end, until its emitted
    tokens reach ``target``: the walk of :meth:`TraceReplayModel._walk` on the traces."""
    base = trace_offsets[used]
    length = trace_offsets[used + 1] - base
    position = np.zeros(len(used), dtype=np.int64)
    emitted = np.zeros(len(used), dtype=np.int64)
    active = np.flatnonzero(target > 0)
    columns: list[tuple[np.ndarray, np.ndarray]] = []
    while active.size:
        here = position[active]
        accepted = np.minimum(acc_len[base[active] + here].astype(np.int64) - 1, depth)
        columns.append((active, accepted))
        emitted[active] += accepted + 1
        position[active] = (here + accepted + 1) % length[active]
        active = active[emitted[active] < target[active]]
    walk = np.full((len(used), max(len(columns), 1)), -1, dtype=np.int16)
    for step, (rows, accepted) in enumerate(columns):
        walk[rows, step] = accepted
    return walk


def _draw_misses(
    proposed: np.ndarray,
    accepted: np.ndarray,
    offsets: np.ndarray,
    num_steps: np.ndarray,
    miss_probability: float,
    rng: np.random.Generator,
) -> None:
    """Steps that accept nothing propose nothing with ``miss_probability``: one uniform per
    request still going at each step index, in request order, as the lockstep walk draws."""
    active = np.flatnonzero(num_steps > 0)
    step = 0
    while active.size:
        at = offsets[active] + step
        miss = (accepted[at] == 0) & (rng.random(active.size) < miss_probability)
        proposed[at[miss]] = 0
        step += 1
        active = active[num_steps[active] > step]
