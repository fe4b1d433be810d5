"""Decode segments: many decode steps planned at once from the engine's state.

Between events that change the batch (an arrival that could be admitted, a block shortage, a
completion whose room someone waits for), every running sequence decodes and each step's shape
follows from the sequences' lengths and their acceptance plans alone. :func:`plan_segment`
computes those steps' integer aggregates as (sequence × step) arrays without touching any state;
the engine costs them with one cost-model call and :func:`commit_segment` applies the first
``length`` of them. A segment may open with the step that admits the waiting requests, when the
scheduler would admit them all with whole prompts: they are rows that prefill in step 0.

Both functions reproduce exactly what stepping one by one through the scheduler does: the same
integer aggregates, the same block counts, the same emissions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from sim.cost_model import StepShape
from sim.engine.drafter import DraftWork
from sim.engine.kv_cache import blocks_for
from sim.engine.requests import RUNNING

if TYPE_CHECKING:
    from sim.engine.core import EngineCore

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class StepTotals:
    """Integer aggregates of a step (or one entry per step of a segment)."""

    num_seqs: IntArray
    num_tokens: IntArray
    num_logit_tokens: IntArray
    kv_read_tokens: IntArray
    attention_pairs_x2: IntArray

    def shape(self) -> StepShape:
        return StepShape(
            num_seqs=self.num_seqs,
            num_tokens=self.num_tokens,
            num_logit_tokens=self.num_logit_tokens,
            kv_read_tokens=self.kv_read_tokens,
            attention_pairs=self.attention_pairs_x2 / 2.0,
        )


#: Steps costed per segment at most; a longer stretch becomes several segments.
FAST_FORWARD_CHUNK = 64


@dataclass(frozen=True)
class Segment:
    """Up to ``length`` decode steps of the running sequences ``ids``, not yet applied.

    (sequence × step) arrays: ``emitted`` tokens, ``proposed`` and ``accepted`` drafts (zero
    after a sequence's last step; None without speculation, where every running sequence emits
    one token per step), ``finish_step`` the step in which each sequence emits its last token
    (``>= length`` if not within the segment), ``num_seqs`` the sequences in each step.
    """

    ids: IntArray
    length: int
    totals: StepTotals
    work: DraftWork
    blocks: IntArray
    num_seqs: IntArray
    computed0: IntArray
    emitted: IntArray | None
    proposed: IntArray | None
    accepted: IntArray | None
    finish_step: IntArray
    #: Waiting requests admitted by the first step (the last rows of ``ids``): their prompts are
    #: prefilled whole in step 0, which emits their first tokens; they decode from step 1.
    num_admitted: int = 0
    admitted_prompt_tokens: int = 0


def plan_segment(
    core: EngineCore,
    through_finishes: bool,
    next_arrival_at_s: float = np.inf,
    admit: IntArray | None = None,
) -> Segment | None:
    """Plan the next pure-decode steps of ``core``'s running sequences (state untouched).

    Stops before a step that would need more KV blocks or token budget than there are, and after
    the first step in which a sequence finishes unless ``through_finishes`` (nothing waits to
    take the freed room), in which case the finished sequences drop out and the others go on.
    ``next_arrival_at_s`` only sizes the plan: the steps likely to run before that arrival cuts
    the stretch, from the last step's duration (a plan that proves short simply ends the
    stretch early; the next one carries on). ``admit`` (fresh waiting requests, in queue order)
    makes step 0 also prefill their whole prompts, as the scheduler would admit them; the caller
    has checked that nothing else in the queue or the running set stands in the way. Return
    None if not even one step fits.
    """
    s, r, kv, plan = core.scheduler, core.requests, core.kv, core.plan
    ids = s.running
    computed0 = r.num_computed_tokens[ids]
    remaining = r.output_tokens[ids] - r.num_emitted[ids]
    if admit is not None:
        # An admitted request counts as having computed all but one token of its prompt and
        # emitting its first token in step 0 (its remaining prefill is corrected below).
        prompts = r.prompt_tokens[admit]
        ids = np.concatenate((ids, admit))
        computed0 = np.concatenate((computed0, prompts - 1))
        remaining = np.concatenate((remaining, r.output_tokens[admit]))
    # Every step emits at least one token per sequence: all have finished within max(remaining)
    # steps, the first within min(remaining); costing more steps would be wasted work.
    horizon = int(remaining.max()) if through_finishes else int(remaining.min())
    m = min(FAST_FORWARD_CHUNK, horizon)
    last_step_s = core.recorder.last_duration_s()
    if next_arrival_at_s < np.inf and last_step_s > 0:
        # Steps vary along a stretch: plan three times the gap / last step, plus sixteen.
        expected = (next_arrival_at_s - core.clock_s) / last_step_s
        m = max(1, min(m, int(expected * 3.0) + 16))
    j = np.arange(m)
    if admit is None and not len(plan.proposed):
        return _plan_plain(core, ids, computed0, remaining, m, through_finishes)
    if not len(plan.proposed):
        proposed_all = accepted = np.zeros((len(ids), m + 1), dtype=np.int64)
    elif admit is None:
        proposed_all, accepted = plan.window(ids, r.num_decode_steps[ids], m + 1)
    else:
        # Admitted requests draft from step 1: their plans start one column later.
        old = ids[: len(ids) - len(admit)]
        old_proposed, old_accepted = plan.window(old, r.num_decode_steps[old], m + 1)
        new_proposed, new_accepted = plan.window(admit, np.zeros(len(admit), np.int64), m)
        pad = np.zeros((len(admit), 1), dtype=np.int64)
        proposed_all = np.vstack((old_proposed, np.hstack((pad, new_proposed))))
        accepted = np.vstack((old_accepted, np.hstack((pad, new_accepted))))
    accepted = accepted[:, :m]
    raw = accepted + 1
    cum = np.cumsum(raw, axis=1)
    before = cum - raw
    # Emissions only grow: the finishing step is the count of steps still short of the end
    # (m when the request does not finish within the plan).
    finish_step = (cum < remaining[:, None]).sum(axis=1)
    active = j <= finish_step[:, None]
    finishing = j == finish_step[:, None]
    # Emissions stop at the request's end: the last step emits what is left.
    emitted = np.minimum(accepted + 1, remaining[:, None] - before) * active
    proposed = proposed_all[:, :m] * active
    accepted = accepted * active
    computed = computed0[:, None] + before
    take = ((1 + s.config.extra_tokens_per_decode) + proposed) * active
    if admit is not None:
        # With computed = prompt - 1 and one token, an admitted request's step 0 holds and reads
        # exactly its prompt's KV; its token count and causal pairs are corrected after.
        take[len(ids) - len(admit) :, 0] = 1
    logits = take.sum(axis=0)
    tokens = logits
    prefill_tokens = 0
    if admit is not None:
        prefill_tokens = int(prompts.sum())
        tokens = logits.copy()
        tokens[0] += prefill_tokens - len(admit)
    if s.config.rollback_policy == "in_place":
        blocks = (blocks_for(computed + take, kv.block_size) * active).sum(axis=0)
    else:
        blocks = (
            (blocks_for(computed + 1, kv.block_size) + blocks_for(take - 1, kv.block_size)) * active
        ).sum(axis=0)
    blocks = core.kv.pool_blocks(ids, blocks, active)
    length = _steps_that_fit(core, ids, tokens, blocks, finish_step, m, through_finishes)
    if length == 0:
        return None
    cols = slice(0, length)
    emitted, proposed, accepted = emitted[:, cols], proposed[:, cols], accepted[:, cols]
    computed, take, active = computed[:, cols], take[:, cols], active[:, cols]
    drafting = active & ~finishing[:, cols]
    new_computed = computed + emitted
    num_seqs = active.sum(axis=0)
    pairs_x2 = (take * (2 * computed + take + 1)).sum(axis=0)
    num_new_tokens = (emitted * drafting).sum(axis=0)
    if admit is not None:
        # A whole prompt of P tokens is P·(P+1)/2 causal pairs, counted above as P (one token
        # over P - 1); a drafter catches up on the whole prompt, counted above as one token.
        pairs_x2[0] += int((prompts * (prompts + 1) - 2 * prompts).sum())
        new_rows = slice(len(ids) - len(admit), len(ids))
        num_new_tokens[0] += int(((prompts - 1) * drafting[new_rows, 0]).sum())
    return Segment(
        ids=ids,
        length=length,
        totals=StepTotals(
            num_seqs=num_seqs,
            num_tokens=tokens[cols],
            num_logit_tokens=logits[cols],
            kv_read_tokens=((computed + take) * active).sum(axis=0),
            attention_pairs_x2=pairs_x2,
        ),
        work=DraftWork(
            num_seqs=drafting.sum(axis=0),
            num_new_tokens=num_new_tokens,
            context_tokens=(new_computed * drafting).sum(axis=0),
            num_full_accept=(drafting & (proposed > 0) & (accepted == proposed)).sum(axis=0),
            num_proposed=(proposed_all[:, 1 : length + 1] * drafting).sum(axis=0),
        ),
        blocks=blocks[cols],
        num_seqs=num_seqs,
        computed0=computed0,
        emitted=emitted,
        proposed=proposed,
        accepted=accepted,
        finish_step=finish_step,
        num_admitted=0 if admit is None else len(admit),
        admitted_prompt_tokens=prefill_tokens,
    )


def _steps_that_fit(
    core: EngineCore,
    ids: IntArray,
    tokens: IntArray,
    blocks: IntArray,
    finish_step: IntArray,
    m: int,
    through_finishes: bool,
) -> int:
    """Planned steps to keep: none from the first that exceeds the token budget or the blocks
    the running sequences can hold, and none after the first (or, through finishes, the last)
    completion."""
    kv = core.kv
    # Room without evicting a cached block (stepping takes steps that evict, in order).
    capacity = kv.room_without_eviction(ids)
    ok = (tokens <= core.scheduler.config.max_num_batched_tokens) & (blocks <= capacity)
    length = m if ok.all() else int(np.argmin(ok))
    last = int(finish_step.max()) if through_finishes else int(finish_step.min())
    if through_finishes and kv.caching:
        # A shareable request's end caches its blocks: stop there, to queue them as stepping does.
        shareable = kv.hash_limit_tokens[ids] > 0
        if shareable.any():
            last = min(last, int(finish_step[shareable].min()))
    return min(length, last + 1)


def _plan_plain(
    core: EngineCore,
    ids: IntArray,
    computed0: IntArray,
    remaining: IntArray,
    m: int,
    through_finishes: bool,
) -> Segment | None:
    """:func:`plan_segment` without speculation: each running sequence computes ``take`` tokens
    and emits one per step until its last, so the aggregates are closed forms in the step index
    over the sequences still running (only the block counts need the per-sequence matrix)."""
    s, kv = core.scheduler, core.kv
    take = 1 + s.config.extra_tokens_per_decode
    j = np.arange(m)
    finish_step = remaining - 1
    # Sequences still running at step j, and the sum of their starting lengths (via the order of
    # their finishing steps).
    order = np.argsort(finish_step, kind="stable")
    finished_before = np.searchsorted(finish_step[order], j, side="left")
    num_seqs = len(ids) - finished_before
    c0_sorted = np.concatenate(([0], np.cumsum(computed0[order])))
    context = (c0_sorted[-1] - c0_sorted[finished_before]) + num_seqs * j
    active = j <= finish_step[:, None]
    if s.config.rollback_policy == "in_place" or take == 1:
        blocks = (blocks_for(computed0[:, None] + (j + take), kv.block_size) * active).sum(axis=0)
    else:
        blocks = (blocks_for(computed0[:, None] + (j + 1), kv.block_size) * active).sum(
            axis=0
        ) + num_seqs * int(blocks_for(take - 1, kv.block_size))
    tokens = num_seqs * take
    blocks = core.kv.pool_blocks(ids, blocks, active)
    length = _steps_that_fit(core, ids, tokens, blocks, finish_step, m, through_finishes)
    if length == 0:
        return None
    cols = slice(0, length)
    num_seqs, context, tokens = num_seqs[cols], context[cols], tokens[cols]
    zeros = np.zeros(length, dtype=np.int64)
    return Segment(
        ids=ids,
        length=length,
        totals=StepTotals(
            num_seqs=num_seqs,
            num_tokens=tokens,
            num_logit_tokens=tokens,
            kv_read_tokens=context + tokens,
            attention_pairs_x2=2 * take * context + num_seqs * take * (take + 1),
        ),
        work=DraftWork(zeros, zeros, zeros, zeros, zeros),
        blocks=blocks[cols],
        num_seqs=num_seqs,
        computed0=computed0,
        emitted=None,
        proposed=None,
        accepted=None,
        finish_step=finish_step,
    )


def commit_segment(
    core: EngineCore,
    segment: Segment,
    length: int,
    starts: FloatArray,
    durations: FloatArray,
    parts: dict[str, FloatArray],
    waiting_at: Callable[[FloatArray], IntArray],
    offset: int = 0,
) -> None:
    """Apply the first ``length`` steps of ``segment``, timed by ``starts[offset:]`` (each step's
    start and the last one's end; ``durations`` and ``parts`` from the same ``offset``), record
    them, and retire whoever finished."""
    if offset:
        starts, durations = starts[offset:], durations[offset:]
        parts = {key: value[offset:] for key, value in parts.items()}
    r, kv = core.requests, core.kv
    ids = segment.ids
    last_step = np.minimum(segment.finish_step, length - 1)
    if segment.emitted is None:
        emitted_per_request = last_step + 1
        emitted_per_step: IntArray = segment.num_seqs[:length]
        drafted_per_step: IntArray | int = 0
        accepted_per_step: IntArray | int = 0
    else:
        assert segment.proposed is not None and segment.accepted is not None
        emitted = segment.emitted[:, :length]
        emitted_per_request = emitted.sum(axis=1)
        emitted_per_step = emitted.sum(axis=0)
        proposed, accepted = segment.proposed[:, :length], segment.accepted[:, :length]
        r.num_drafted[ids] += proposed.sum(axis=1)
        r.num_accepted[ids] += accepted.sum(axis=1)
        drafted_per_step, accepted_per_step = proposed.sum(axis=0), accepted.sum(axis=0)
    new_computed = segment.computed0 + emitted_per_request
    decode_steps = last_step + 1
    num_admitted = segment.num_admitted
    if num_admitted:
        # Admission as the scheduler does it: off the queue's head, onto the running set's end.
        admitted = ids[len(ids) - num_admitted :]
        s = core.scheduler
        for _ in range(num_admitted):
            s.waiting.popleft()
        s.running = np.concatenate((s.running, admitted))
        r.state[admitted] = RUNNING
        first_time = admitted[np.isnan(r.scheduled_at_s[admitted])]  # not a readmission
        r.scheduled_at_s[first_time] = starts[0]
        r.first_token_at_s[admitted] = starts[1]
        decode_steps[len(ids) - num_admitted :] -= 1  # step 0 was their prefill
    r.num_emitted[ids] += emitted_per_request
    r.num_computed_tokens[ids] = new_computed
    r.num_decode_steps[ids] += decode_steps
    r.last_emit_at_s[ids] = starts[last_step + 1]
    r.last_emit_step[ids] = core.num_steps + last_step
    # KV: each sequence ends holding exactly the blocks of its committed tokens.
    kv.set_logical(ids, new_computed)
    kv.set_held(ids, blocks_for(new_computed, kv.block_size))
    num_decode_seqs = segment.num_seqs[:length]
    num_prefill_seqs: IntArray | int = 0
    num_prefill_tokens: IntArray | int = 0
    num_waiting = waiting_at(starts[:length])
    if num_admitted:
        # Step 0 also prefilled the admitted requests, which were waiting when it started.
        num_decode_seqs = num_decode_seqs.copy()
        num_decode_seqs[0] -= num_admitted
        num_prefill_seqs = np.zeros(length, dtype=np.int64)
        num_prefill_seqs[0] = num_admitted
        num_prefill_tokens = np.zeros(length, dtype=np.int64)
        num_prefill_tokens[0] = segment.admitted_prompt_tokens
        num_waiting = num_waiting.copy()
        num_waiting[0] += num_admitted
    core.recorder.append(
        {
            "start_at_s": starts[:length],
            "duration_s": durations[:length],
            **{key: value[:length] for key, value in parts.items()},
            "num_seqs": segment.num_seqs[:length],
            "num_decode_seqs": num_decode_seqs,
            "num_prefill_seqs": num_prefill_seqs,
            "num_tokens": segment.totals.num_tokens[:length],
            "num_prefill_tokens": num_prefill_tokens,
            "num_emitted_tokens": emitted_per_step,
            "num_draft_tokens": drafted_per_step,
            "num_accepted_tokens": accepted_per_step,
            "kv_blocks_used": segment.blocks[:length],
            "num_waiting": num_waiting,
            # Every sequence that decodes emitted in the step before (a prefill emits a first
            # token, not an inter-token gap).
            "num_regular_itl": num_decode_seqs,
        }
    )
    core.clock_s = float(starts[length])
    core.num_steps += length
    finished = segment.finish_step < length
    if finished.any():
        core.finish_at(ids[finished], starts[segment.finish_step[finished] + 1])
