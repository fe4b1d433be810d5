"""The stretch planner: many decode steps planned at once from the engine's state.

Between events that change the batch (an arrival that could be admitted, a block shortage, a
completion whose room someone waits for), every running sequence decodes and each step's shape
follows from the sequences' lengths and their acceptance plans alone. :func:`plan_stretch`
computes those steps' integer aggregates as (sequence × step) arrays and returns them as a
:class:`~sim.engine.block.StepBlock`, reading the scheduler's state and changing nothing; the
engine costs the block with one cost-model call and applies its first steps
(``EngineCore.apply_block``). A stretch may open with the step that admits the waiting requests,
when the scheduler would admit them all with whole prompts: they are rows that prefill in step 0.

The plan reproduces exactly what stepping one by one through the scheduler does: the same
integer aggregates, the same block counts, the same emissions.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from sim.engine import stretch_kernel
from sim.engine.block import StepBlock, StepTotals, no_draft_work
from sim.engine.drafter import DraftWork
from sim.engine.scheduler import Scheduler
from sim.engine.stretch_drafts import _drafts, _drafts_compiled

IntArray = NDArray[np.int64]


#: Steps costed per stretch at most; a longer stretch is planned as several blocks.
FAST_FORWARD_CHUNK = 64

#: Steps planned ahead of the next arrival: (multiple of the expected steps, extra steps). A
#: plan that proves short ends the stretch early and the next one carries on (the records are
#: the same), so this trades planned steps thrown away for stretches planned again. A fixed
#: plan reads its steps in one gather, so planning far is cheap; an adaptive plan plays its
#: policy forward step by step, and arrivals cut a stretch within a few steps of the expected
#: count (on the reference chat workload, 99 % within 2.4 steps), so it plans the gap plus four.
PLAN_AHEAD = (3.0, 16)
ADAPTIVE_PLAN_AHEAD = (1.0, 4)


def plan_stretch(
    s: Scheduler,
    through_finishes: bool,
    next_arrival_at_s: float = np.inf,
    admit: IntArray | None = None,
    *,
    clock_s: float = 0.0,
    last_step_s: float = float("nan"),
    head: int | None = None,
    compiled: bool = True,
) -> StepBlock | None:
    """Plan the next pure-decode steps of the scheduler's running sequences (state untouched).

    Stops before a step that would need more KV blocks or token budget than there are, and after
    the first step in which a sequence finishes unless ``through_finishes`` (nothing waits to
    take the freed room), in which case the finished sequences drop out and the others go on.
    ``next_arrival_at_s`` only sizes the plan: the steps likely to run before that arrival cuts
    the stretch, from ``last_step_s`` (the last step's duration) and the clock ``clock_s`` (a
    plan that proves short simply ends the stretch early; the next one carries on). ``admit``
    (fresh waiting requests, in queue order) makes step 0 also prefill their whole prompts, as
    the scheduler would admit them; the caller has checked that nothing else in the queue or the
    running set stands in the way. ``head``: the request at the head of the waiting queue, which
    the scheduler would admit as soon as a step leaves it room (see
    :meth:`Scheduler.head_admissible`): the stretch stops before such a step. ``compiled``:
    do the drafts' arithmetic in the compiled pass when numba is installed (the numpy
    reference path otherwise; both give the same plan). Return None if not even one step fits.
    """
    r, kv, plan = s.requests, s.kv, s.plan
    ids = s.running
    if admit is not None:
        ids = np.concatenate((ids, admit))
    computed0 = r.num_computed_tokens[ids]
    # Admitted requests have emitted nothing (whole_admissions admits only those).
    remaining = r.output_tokens[ids] - r.num_emitted[ids]
    if admit is not None:
        # An admitted request counts as having computed all but one token of its prompt and
        # emitting its first token in step 0 (its remaining prefill is corrected below).
        prompts = r.prompt_tokens[admit]
        computed0[len(ids) - len(admit) :] = prompts - 1
    # Every step emits at least one token per sequence: all have finished within max(remaining)
    # steps, the first within min(remaining); costing more steps would be wasted work.
    if plan.batch_dependent:
        through_finishes = False  # a finish changes the batch and so the policy's choice
    left = remaining.tolist()  # Python reductions: faster on a stretch's few dozen rows
    horizon = max(left) if through_finishes else min(left)
    m = min(FAST_FORWARD_CHUNK, horizon, plan.holds_for())
    if next_arrival_at_s < np.inf and last_step_s > 0:
        # Steps vary along a stretch: plan three times the gap / last step, plus sixteen; a
        # policy played forward pays for every planned step, so there the gap plus four.
        expected = (next_arrival_at_s - clock_s) / last_step_s
        factor, extra = ADAPTIVE_PLAN_AHEAD if plan.adaptive else PLAN_AHEAD
        m = max(1, min(m, int(expected * factor) + extra))
    j = np.arange(m)
    if not len(plan.proposed) and (admit is None or s.config.extra_tokens_per_decode == 0):
        prompts_or_none = None if admit is None else r.prompt_tokens[admit]
        return _plan_plain(s, ids, computed0, remaining, m, through_finishes, head, prompts_or_none)
    num_old = len(ids) - (0 if admit is None else len(admit))
    kernel = stretch_kernel.compiled() if compiled and not plan.adaptive else None
    if kernel is not None:
        drafts = _drafts_compiled(kernel, s, ids, computed0, remaining, m, num_old)
    else:
        drafts = _drafts(s, ids, computed0, remaining, m, num_old)
    (num_seqs, logits, blocks), rest, emitted, proposed, accepted, finish_step = drafts
    tokens = logits
    prefill_tokens = 0
    if admit is not None:
        prefill_tokens = int(prompts.sum())
        tokens = logits.copy()
        tokens[0] += prefill_tokens - len(admit)
    if kv.caching:
        blocks = kv.pool_blocks(ids, blocks, j <= finish_step[:, None])
    length = _steps_that_fit(
        s, ids, tokens, blocks, num_seqs, finish_step, m, through_finishes, head
    )
    if length == 0:
        return None
    cols = slice(0, length)
    emitted, proposed, accepted = emitted[:, cols], proposed[:, cols], accepted[:, cols]
    kv_read, pairs_x2, *work = rest(length)
    num_seqs, pairs_x2 = num_seqs[cols], pairs_x2.copy()
    num_new_tokens = work[1].copy()
    if admit is not None:
        # A whole prompt of P tokens is P·(P+1)/2 causal pairs, counted above as P (one token
        # over P - 1); a drafter catches up on the whole prompt, counted above as one token.
        pairs_x2[0] += int((prompts * (prompts + 1) - 2 * prompts).sum())
        drafts_after = finish_step[num_old:] > 0  # does not finish in step 0
        num_new_tokens[0] += int(((prompts - 1) * drafts_after).sum())
    num_admitted = 0 if admit is None else len(admit)
    num_decode_seqs, num_prefill_seqs, num_prefill_tokens = _prefills(
        num_seqs, num_admitted, prefill_tokens
    )
    return StepBlock(
        ids=ids,
        length=length,
        totals=StepTotals(
            num_seqs=num_seqs,
            num_tokens=tokens[cols],
            num_logit_tokens=logits[cols],
            kv_read_tokens=kv_read,
            attention_pairs_x2=pairs_x2,
        ),
        work=DraftWork(
            num_seqs=work[0],
            num_new_tokens=num_new_tokens,
            context_tokens=work[2],
            num_full_accept=work[3],
            num_proposed=work[4],
        ),
        kv_blocks_used=blocks[cols],
        num_decode_seqs=num_decode_seqs,
        num_prefill_seqs=num_prefill_seqs,
        num_prefill_tokens=num_prefill_tokens,
        num_regular_itl=num_decode_seqs,
        computed0=computed0,
        finish_step=finish_step,
        emitted=emitted,
        proposed=proposed,
        accepted=accepted,
        num_admitted=num_admitted,
    )


def _prefills(
    num_seqs: IntArray, num_admitted: int, prefill_tokens: int
) -> tuple[IntArray, IntArray, IntArray]:
    """A stretch's decoding sequences, prefilling sequences and prefill tokens per step: every
    sequence decodes, except the admitted ones in step 0 (every decode emitted in the step
    before, so these are also its regular inter-token gaps)."""
    zeros = np.zeros(len(num_seqs), dtype=np.int64)
    if not num_admitted:
        return num_seqs, zeros, zeros
    num_decode_seqs = num_seqs.copy()
    num_decode_seqs[0] -= num_admitted
    num_prefill_seqs = zeros.copy()
    num_prefill_seqs[0] = num_admitted
    zeros[0] = prefill_tokens
    return num_decode_seqs, num_prefill_seqs, zeros


def _steps_that_fit(
    s: Scheduler,
    ids: IntArray,
    tokens: IntArray,
    blocks: IntArray,
    num_seqs: IntArray,
    finish_step: IntArray,
    m: int,
    through_finishes: bool,
    head: int | None,
) -> int:
    """Planned steps to keep: none from the first that exceeds the token budget or the blocks
    the running sequences can hold, or that would admit the waiting ``head``, and none after the
    first (or, through finishes, the last) completion."""
    kv = s.kv
    # Room without evicting a cached block (stepping takes steps that evict, in order).
    capacity = kv.room_without_eviction(ids)
    ok = (tokens <= s.config.max_num_batched_tokens) & (blocks <= capacity)
    if head is not None:
        # The head waits while the running sequences (those not finished yet) leave it no room.
        ok &= ~s.head_admissible(head, tokens, blocks, num_seqs)
    length = m if ok.all() else int(np.argmin(ok))
    # A Python reduction: faster than numpy's on the few dozen rows of a stretch.
    steps = finish_step.tolist()
    last = max(steps) if through_finishes else min(steps)
    if through_finishes and kv.caching:
        # A shareable request's end caches its blocks: stop there, to queue them as stepping does.
        shareable = kv.hash_limit_tokens[ids] > 0
        if shareable.any():
            last = min(last, int(finish_step[shareable].min()))
    return min(length, last + 1)


def _plan_plain(
    s: Scheduler,
    ids: IntArray,
    computed0: IntArray,
    remaining: IntArray,
    m: int,
    through_finishes: bool,
    head: int | None,
    prompts: IntArray | None = None,
) -> StepBlock | None:
    """:func:`plan_stretch` without speculation: each running sequence computes ``take`` tokens
    and emits one per step until its last, so the aggregates are closed forms in the step index
    over the sequences still running (only the block counts need the per-sequence matrix).
    ``prompts``: the prompts of the admitted requests (the last rows), with ``take`` 1: step 0
    counts each as one token over ``prompt - 1`` computed, corrected below as in
    :func:`plan_stretch`."""
    kv = s.kv
    block_size = kv.block_size
    take = 1 + s.config.extra_tokens_per_decode
    j = np.arange(m)
    finish_step = remaining - 1
    # Sequences still running at step j, and the sum of their starting lengths (one pass each
    # over the small sequence × step mask: fewer numpy calls than sorting by finishing step).
    active = j <= finish_step[:, None]
    num_seqs = active.sum(axis=0)
    context = computed0 @ active + num_seqs * j
    # Blocks of n tokens: ceil(n / block_size) = (n + block_size - 1) // block_size, a shift
    # when the size is a power of two (an arithmetic shift floors as // does).
    in_place = s.config.rollback_policy == "in_place" or take == 1
    lookahead = s.config.lookahead_slots
    slots = computed0[:, None] + (j + ((take if in_place else 1) + lookahead + block_size - 1))
    if lookahead and prompts is not None:
        # Admitted in step 0 with nothing computed: no lookahead slots yet.
        slots[len(ids) - len(prompts) :, 0] -= lookahead
    if block_size & (block_size - 1) == 0:
        held = slots >> (block_size.bit_length() - 1)
    else:
        held = slots // block_size
    blocks = held.sum(axis=0, where=active)
    if not in_place:
        blocks += num_seqs * ((take - 1 + block_size - 1) // block_size)
    logits = num_seqs * take
    tokens = logits
    num_admitted = prefill_tokens = 0
    if prompts is not None:
        num_admitted, prefill_tokens = len(prompts), int(prompts.sum())
        tokens = logits.copy()
        tokens[0] += prefill_tokens - num_admitted
    blocks = kv.pool_blocks(ids, blocks, active)
    length = _steps_that_fit(
        s, ids, tokens, blocks, num_seqs, finish_step, m, through_finishes, head
    )
    if length == 0:
        return None
    cols = slice(0, length)
    num_seqs, context, logits = num_seqs[cols], context[cols], logits[cols]
    pairs_x2 = 2 * take * context + num_seqs * take * (take + 1)
    if prompts is not None:
        # A whole prompt of P tokens is P·(P+1)/2 causal pairs, counted above as P.
        pairs_x2[0] += int((prompts * (prompts + 1) - 2 * prompts).sum())
    num_decode_seqs, num_prefill_seqs, num_prefill_tokens = _prefills(
        num_seqs, num_admitted, prefill_tokens
    )
    return StepBlock(
        ids=ids,
        length=length,
        totals=StepTotals(
            num_seqs=num_seqs,
            num_tokens=tokens[cols],
            num_logit_tokens=logits,
            kv_read_tokens=context + logits,
            attention_pairs_x2=pairs_x2,
        ),
        work=no_draft_work(length),
        kv_blocks_used=blocks[cols],
        num_decode_seqs=num_decode_seqs,
        num_prefill_seqs=num_prefill_seqs,
        num_prefill_tokens=num_prefill_tokens,
        num_regular_itl=num_decode_seqs,
        computed0=computed0,
        finish_step=finish_step,
        num_admitted=num_admitted,
    )
