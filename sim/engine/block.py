"""A block of engine steps (sequences × steps), planned but not yet applied.

Every change the engine makes to its state goes through one :class:`StepBlock`: a general step
(whatever the scheduler chose: prefill chunks, decodes, admissions, preemptions) is a block of
one step, and a stretch of predictable decode steps planned at once (:mod:`sim.engine.planner`)
is a block of many. A block holds each step's integer aggregates (enough to cost it and to write
its record) and each sequence's per-step emissions and drafts; :meth:`EngineCore.apply_block
<sim.engine.core.EngineCore.apply_block>` applies its first steps, through the scheduler's and
the block manager's commands.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from sim.cost_model import StepShape
from sim.engine.drafter import DraftWork

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

    def then(self, other: StepTotals) -> StepTotals:
        """These steps followed by ``other``'s."""
        return StepTotals(
            np.concatenate((self.num_seqs, other.num_seqs)),
            np.concatenate((self.num_tokens, other.num_tokens)),
            np.concatenate((self.num_logit_tokens, other.num_logit_tokens)),
            np.concatenate((self.kv_read_tokens, other.kv_read_tokens)),
            np.concatenate((self.attention_pairs_x2, other.attention_pairs_x2)),
        )


def no_draft_work(num_steps: int) -> DraftWork:
    """The drafting work of steps that draft nothing."""
    zeros = np.zeros(num_steps, dtype=np.int64)
    return DraftWork(zeros, zeros, zeros, zeros, zeros)


def then_work(a: DraftWork, b: DraftWork) -> DraftWork:
    """The drafting work of ``a``'s steps followed by ``b``'s."""
    return DraftWork(
        np.concatenate((a.num_seqs, b.num_seqs)),
        np.concatenate((a.num_new_tokens, b.num_new_tokens)),
        np.concatenate((a.context_tokens, b.context_tokens)),
        np.concatenate((a.num_full_accept, b.num_full_accept)),
        np.concatenate((a.num_proposed, b.num_proposed)),
    )


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
