"""A block of engine steps (sequences × steps), planned but not yet applied.

Every change the engine makes to its state goes through one :class:`StepBlock`: a general step
(whatever the scheduler chose: prefill chunks, decodes, admissions, preemptions) is a block of
one step, and a stretch of predictable decode steps planned at once (:mod:`sim.engine.planner`)
is a block of many (:func:`general_block` makes the former from the scheduler's batch). A block
holds each step's integer aggregates (enough to cost it and to write its record) and each
sequence's per-step emissions and drafts; :meth:`EngineCore.apply_block
<sim.engine.core.EngineCore.apply_block>` applies its first steps, through the scheduler's and
the block manager's commands.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from sim.cost_model import StepShape
from sim.engine.drafter import DraftWork
from sim.engine.queues import ScheduledBatch
from sim.engine.scheduler import Scheduler

IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]


@dataclass(frozen=True)
class StepTotals:
    """Integer aggregates of a step (or one entry per step of a block)."""

    num_seqs: IntArray
    num_tokens: IntArray
    num_logit_tokens: IntArray
    kv_read_tokens: IntArray
    attention_pairs_x2: IntArray

    def shape(self) -> StepShape:
        """The cost model's view of these steps."""
        return StepShape(
            num_seqs=self.num_seqs,
            num_tokens=self.num_tokens,
            num_logit_tokens=self.num_logit_tokens,
            kv_read_tokens=self.kv_read_tokens,
            attention_pairs=self.attention_pairs_x2 / 2.0,
        )


def no_draft_work(num_steps: int) -> DraftWork:
    """The drafting work of steps that draft nothing."""
    zeros = np.zeros(num_steps, dtype=np.int64)
    return DraftWork(zeros, zeros, zeros, zeros, zeros)


@dataclass(frozen=True)
class StepBlock:
    """Up to ``length`` steps over the sequences ``ids`` (the rows), not yet applied.

    Per step (one entry each): ``totals`` and ``work`` (to cost the step), ``kv_blocks_used``,
    ``num_decode_seqs``, ``num_prefill_seqs``, ``num_prefill_tokens`` and ``num_regular_itl``
    (for its record). Per row: ``computed0`` the KV length the row's steps start from and
    ``finish_step`` the step in which it emits its last token (``>= length`` if not within the
    block). Per row and step: ``emitted`` tokens, ``proposed`` and ``accepted`` drafts (None in a
    stretch without speculation: one token a step until the row's last); ``advanced`` tokens
    written to the KV cache and ``is_decode`` (None: as emitted, every active step a decode).

    The last ``num_admitted`` rows are waiting requests the block's first step admits (a
    stretch's admissions: their whole prompts are prefilled in step 0, which the block counts as
    one token over ``prompt - 1`` computed). A general step's admissions, chunks and preemptions
    have been carried out by the scheduler already: ``scratch_blocks`` are the blocks it lent
    the step for draft slots, ``num_waiting`` the queue the step saw (a stretch's comes from the
    arrivals at each step's start).
    """

    ids: IntArray
    length: int
    totals: StepTotals
    work: DraftWork
    kv_blocks_used: IntArray
    num_decode_seqs: IntArray
    num_prefill_seqs: IntArray
    num_prefill_tokens: IntArray
    num_regular_itl: IntArray
    computed0: IntArray
    finish_step: IntArray
    emitted: IntArray | None = None
    proposed: IntArray | None = None
    accepted: IntArray | None = None
    advanced: IntArray | None = None
    is_decode: BoolArray | None = None
    num_admitted: int = 0
    scratch_blocks: int = 0
    num_waiting: IntArray | None = None

    @property
    def num_seqs(self) -> IntArray:
        """Sequences in each step."""
        return self.totals.num_seqs

    @property
    def is_general(self) -> bool:
        """Whether the block is one step the scheduler chose (not a planned stretch)."""
        return self.is_decode is not None


def general_block(
    scheduler: Scheduler,
    batch: ScheduledBatch,
    num_waiting: int,
    num_steps: int,
    speculative: bool,
) -> StepBlock:
    """The step ``batch`` the scheduler chose (its blocks granted, its admissions made) as a
    block of one step; ``num_waiting`` requests were queued when it was scheduled,
    ``num_steps`` steps ran before it, and ``speculative`` steps draft."""
    r = scheduler.requests
    ids, take = batch.ids, batch.num_new_tokens
    is_dec = batch.is_decode
    computed = r.num_computed_tokens[ids]
    known = r.known_tokens(ids)
    remaining = r.output_tokens[ids] - r.num_emitted[ids]
    completes = ~is_dec & (computed + take == known)
    emitted = np.where(is_dec, np.minimum(batch.accepted + 1, remaining), np.where(completes, 1, 0))
    finishing = (emitted > 0) & (emitted == remaining)
    drafting = (is_dec | completes) & ~finishing
    advanced = np.where(is_dec, emitted, take)
    new_computed = computed + advanced

    num_tokens = int(take.sum())
    num_decode = int(is_dec.sum())
    num_decode_tokens = int((take * is_dec).sum())
    totals = StepTotals(
        num_seqs=np.array([len(ids)]),
        num_tokens=np.array([num_tokens]),
        num_logit_tokens=np.array([num_decode_tokens + int(completes.sum())]),
        kv_read_tokens=np.array([int(computed.sum()) + num_tokens]),
        attention_pairs_x2=np.array([(take * (2 * computed + take + 1)).sum()]),
    )
    if speculative:
        work = _draft_work(scheduler, batch, is_dec, emitted, drafting, new_computed)
    else:
        work = no_draft_work(1)
    later = (emitted > 0) & (r.num_emitted[ids] > 0)
    regular = later & (r.last_emit_step[ids] == num_steps - 1)
    return StepBlock(
        ids=ids,
        length=1,
        totals=totals,
        work=work,
        # Scratch blocks are already out of the free pool.
        kv_blocks_used=np.array([scheduler.kv.num_used]),
        num_decode_seqs=np.array([num_decode]),
        num_prefill_seqs=np.array([len(ids) - num_decode]),
        num_prefill_tokens=np.array([num_tokens - num_decode_tokens]),
        num_regular_itl=np.array([int(regular.sum())]),
        computed0=computed,
        finish_step=np.where(finishing, 0, 1),
        emitted=emitted[:, None],
        proposed=batch.proposed[:, None],
        accepted=batch.accepted[:, None],
        advanced=advanced[:, None],
        is_decode=is_dec[:, None],
        scratch_blocks=batch.scratch_blocks,
        num_waiting=np.array([num_waiting]),
    )


def _draft_work(
    scheduler: Scheduler,
    batch: ScheduledBatch,
    is_dec: BoolArray,
    emitted: IntArray,
    drafting: BoolArray,
    new_computed: IntArray,
) -> DraftWork:
    """The drafting a general step implies (decodes that go on, prefills that complete)."""
    ids, take = batch.ids, batch.num_new_tokens
    r = scheduler.requests
    next_proposed, _ = scheduler.plan.lookup(ids, r.num_decode_steps[ids] + is_dec)
    full = drafting & is_dec & (batch.proposed > 0) & (batch.accepted == batch.proposed)
    return DraftWork(
        num_seqs=np.array([drafting.sum()]),
        num_new_tokens=np.array([(np.where(is_dec, emitted, take) * drafting).sum()]),
        context_tokens=np.array([(new_computed * drafting).sum()]),
        num_full_accept=np.array([full.sum()]),
        num_proposed=np.array([(next_proposed * drafting).sum()]),
    )
