"""Decode segments: many pure-decode steps planned at once from the engine's state.

Between events that change the batch (an arrival that could be admitted, a completion, a block
shortage), every running sequence decodes and each step's shape follows from the sequences'
lengths and their acceptance plans alone. :func:`plan_segment` computes those steps' integer
aggregates as (sequence × step) arrays without touching any state; the engine costs them with one
cost-model call and :func:`commit_segment` applies the first ``length`` of them.

Both functions reproduce exactly what stepping one by one through the scheduler does: the same
integer aggregates, the same block counts, the same emissions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from sim.engine.drafter import DraftWork
from sim.engine.kv_cache import blocks_for

if TYPE_CHECKING:
    from sim.engine.core import EngineCore, StepTotals

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

#: Steps costed per segment at most; a longer stretch becomes several segments.
FAST_FORWARD_CHUNK = 64


@dataclass(frozen=True)
class Segment:
    """Up to ``length`` decode steps of the running sequences ``ids``, not yet applied.

    Without speculation every sequence emits one token per step and ``emitted``/``proposed``/
    ``accepted`` are None; otherwise they are (sequence × step) arrays. ``new_computed`` is each
    sequence's committed KV length after each step; ``finishing_at_end`` marks the sequences that
    finish in step ``length - 1`` (only the last step of a segment can hold a completion).
    """

    ids: IntArray
    length: int
    totals: StepTotals
    work: DraftWork
    blocks: IntArray
    computed0: IntArray
    emitted: IntArray | None
    proposed: IntArray | None
    accepted: IntArray | None
    finishing_at_end: NDArray[np.bool_]


def plan_segment(core: EngineCore) -> Segment | None:
    """Plan the next pure-decode steps of ``core``'s running sequences (state untouched).

    Stops after the first step in which a sequence finishes and before a step that would need
    more KV blocks or token budget than there are. Return None if not even one step fits.
    """
    from sim.engine.core import StepTotals

    s, r, kv, plan = core.scheduler, core.requests, core.kv, core.plan
    ids = s.running
    num = len(ids)
    computed0 = r.num_computed_tokens[ids]
    remaining = r.output_tokens[ids] - r.num_emitted[ids]
    # Every step emits at least one token per sequence: the first completion is within
    # min(remaining) steps, so costing more would be wasted work.
    m = min(FAST_FORWARD_CHUNK, int(remaining.min()))
    extra = s.config.extra_tokens_per_decode
    capacity = kv.num_free + int(kv.held[ids].sum())
    j = np.arange(m)

    if not len(plan.proposed):
        # Without speculation the aggregates are closed forms in the step index.
        take = 1 + extra
        if num * take > s.config.max_num_batched_tokens:
            return None
        if s.config.rollback_policy == "in_place" or take == 1:
            blocks = blocks_for(computed0[:, None] + (j + take), kv.block_size).sum(axis=0)
        else:
            blocks = blocks_for(computed0[:, None] + (j + 1), kv.block_size).sum(
                axis=0
            ) + num * int(blocks_for(take - 1, kv.block_size))
        fits = blocks <= capacity
        length = m if fits.all() else int(np.argmin(fits))
        if length == 0:
            return None
        context = int(computed0.sum()) + num * j[:length]
        tokens = np.full(length, num * take, dtype=np.int64)
        zeros = np.zeros(length, dtype=np.int64)
        return Segment(
            ids=ids,
            length=length,
            totals=StepTotals(
                num_seqs=np.full(length, num, dtype=np.int64),
                num_tokens=tokens,
                num_logit_tokens=tokens,
                kv_read_tokens=context + num * take,
                attention_pairs_x2=2 * take * context + num * take * (take + 1),
            ),
            work=DraftWork(zeros, zeros, zeros, zeros, zeros),
            blocks=blocks[:length],
            computed0=computed0,
            emitted=None,
            proposed=None,
            accepted=None,
            finishing_at_end=remaining == length,
        )

    position = (plan.offsets[ids] + r.num_decode_steps[ids])[:, None] + np.arange(m + 1)
    inside = position < plan.offsets[ids + 1][:, None]
    safe = np.where(inside, position, 0)
    proposed_all = np.where(inside, plan.proposed[safe], 0).astype(np.int64)
    accepted = np.where(inside[:, :m], plan.accepted[safe[:, :m]], 0).astype(np.int64)
    proposed = proposed_all[:, :m]
    raw = accepted + 1
    cum = np.cumsum(raw, axis=1)
    before = cum - raw
    rem = remaining[:, None]
    emitted = np.minimum(raw, np.maximum(rem - before, 0))
    finishing = cum >= rem
    computed = computed0[:, None] + before
    take_matrix = (1 + extra) + proposed
    tokens = take_matrix.sum(axis=0)
    if s.config.rollback_policy == "in_place":
        blocks = blocks_for(computed + take_matrix, kv.block_size).sum(axis=0)
    else:
        blocks = (
            blocks_for(computed + 1, kv.block_size) + blocks_for(take_matrix - 1, kv.block_size)
        ).sum(axis=0)
    ok = (tokens <= s.config.max_num_batched_tokens) & (blocks <= capacity)
    length = m if ok.all() else int(np.argmin(ok))
    any_finish: NDArray[np.bool_] = np.asarray(finishing.any(axis=0))
    if any_finish[:length].any():
        length = int(np.argmax(any_finish)) + 1
    if length == 0:
        return None
    proposed, accepted, emitted = proposed[:, :length], accepted[:, :length], emitted[:, :length]
    computed, take_matrix = computed[:, :length], take_matrix[:, :length]
    drafting = ~finishing[:, :length]
    new_computed = computed + emitted
    return Segment(
        ids=ids,
        length=length,
        totals=StepTotals(
            num_seqs=np.full(length, num, dtype=np.int64),
            num_tokens=tokens[:length],
            num_logit_tokens=tokens[:length],
            kv_read_tokens=(computed + take_matrix).sum(axis=0),
            attention_pairs_x2=(take_matrix * (2 * computed + take_matrix + 1)).sum(axis=0),
        ),
        work=DraftWork(
            num_seqs=drafting.sum(axis=0),
            num_new_tokens=(emitted * drafting).sum(axis=0),
            context_tokens=(new_computed * drafting).sum(axis=0),
            num_full_accept=(drafting & (proposed > 0) & (accepted == proposed)).sum(axis=0),
            num_proposed=(proposed_all[:, 1 : length + 1] * drafting).sum(axis=0),
        ),
        blocks=blocks[:length],
        computed0=computed0,
        emitted=emitted,
        proposed=proposed,
        accepted=accepted,
        finishing_at_end=finishing[:, length - 1],
    )


def commit_segment(
    core: EngineCore,
    segment: Segment,
    length: int,
    starts: FloatArray,
    durations: FloatArray,
    parts: dict[str, FloatArray],
    waiting_at: Callable[[FloatArray], IntArray],
) -> None:
    """Apply the first ``length`` steps of ``segment``, timed by ``starts`` (length + 1 entries:
    each step's start and the last one's end), and record them."""
    r, kv = core.requests, core.kv
    ids, num = segment.ids, len(segment.ids)
    end = float(starts[length])
    if segment.emitted is None:
        emitted_per_request: IntArray | int = length
        emitted_per_step: IntArray | int = num
        drafted: IntArray | int = 0
        accepted: IntArray | int = 0
        new_computed = segment.computed0 + length
    else:
        assert segment.proposed is not None and segment.accepted is not None
        emitted = segment.emitted[:, :length]
        emitted_per_request = emitted.sum(axis=1)
        emitted_per_step = emitted.sum(axis=0)
        drafted = segment.proposed[:, :length]
        accepted = segment.accepted[:, :length]
        r.num_drafted[ids] += drafted.sum(axis=1)
        r.num_accepted[ids] += accepted.sum(axis=1)
        drafted, accepted = drafted.sum(axis=0), accepted.sum(axis=0)
        new_computed = segment.computed0 + emitted_per_request
    r.num_emitted[ids] += emitted_per_request
    r.num_computed_tokens[ids] = new_computed
    r.num_decode_steps[ids] += length
    r.last_emit_at_s[ids] = end
    r.last_emit_step[ids] = core.num_steps + length - 1
    # KV: each sequence ends holding exactly the blocks of its committed tokens.
    kv.set_logical(ids, new_computed)
    keep = blocks_for(new_computed, kv.block_size)
    kv.num_free += int(kv.held[ids].sum() - keep.sum())
    kv.held[ids] = keep
    core.recorder.append(
        {
            "start_at_s": starts[:length],
            "duration_s": durations[:length],
            **{key: value[:length] for key, value in parts.items()},
            "num_seqs": num,
            "num_decode_seqs": num,
            "num_prefill_seqs": 0,
            "num_tokens": segment.totals.num_tokens[:length],
            "num_prefill_tokens": 0,
            "num_emitted_tokens": emitted_per_step,
            "num_draft_tokens": drafted,
            "num_accepted_tokens": accepted,
            "kv_blocks_used": segment.blocks[:length],
            "num_waiting": waiting_at(starts[:length]),
            "num_regular_itl": num,
        }
    )
    core.clock_s = end
    core.num_steps += length
    if length == segment.length:
        core.finish(ids[segment.finishing_at_end], end)
