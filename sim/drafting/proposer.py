"""What the model-based strategies share: drafting as a short list of forwards per step.

An EAGLE head, an MTP module, Medusa heads and a draft model all draft by running a few forwards
of a small network after each verify step. A :class:`ForwardProposer` lists those forwards for a
step's batch (:meth:`forwards`) and costs them at once for every step of a fast-forwarded segment:

``T_draft = per_step_s + Σ_forwards (per_forward_s + T_roofline(forward))`` for a drafting step,

the roofline from :class:`~sim.drafting.network.NetworkCost` or the draft model's own cost model,
the two fixed terms from ``sim/data/draft_overheads.yaml``.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sim.acceptance.plan import AcceptanceModel, Proposal
from sim.drafting.base import FloatArray, Strategy
from sim.drafting.overheads import DraftOverheads
from sim.engine.drafter import DraftWork

BoolArray = NDArray[np.bool_]


@dataclass(frozen=True)
class Forward:
    """One batched draft forward in each step (every field: one entry per step).

    ``active``: steps in which this forward runs at all.
    """

    num_tokens: FloatArray
    num_logit_tokens: FloatArray
    kv_read_tokens: FloatArray
    attention_pairs: FloatArray
    active: BoolArray
    cost: Callable[[FloatArray, FloatArray, FloatArray, FloatArray], FloatArray]


@dataclass(frozen=True)
class Batch:
    """A step's drafting batch as floats: sequences, tokens to catch up, mean context."""

    num_seqs: FloatArray
    num_new_tokens: FloatArray
    context_tokens: FloatArray
    num_full_accept: FloatArray
    drafting: BoolArray

    @staticmethod
    def of(work: DraftWork) -> Batch:
        num_seqs = np.asarray(work.num_seqs, dtype=np.float64).reshape(-1)
        return Batch(
            num_seqs=num_seqs,
            num_new_tokens=np.asarray(work.num_new_tokens, dtype=np.float64).reshape(-1),
            context_tokens=np.asarray(work.context_tokens, dtype=np.float64).reshape(-1),
            num_full_accept=np.asarray(work.num_full_accept, dtype=np.float64).reshape(-1),
            drafting=(num_seqs > 0) & (np.asarray(work.num_proposed).reshape(-1) > 0),
        )

    @cached_property
    def mean_context(self) -> FloatArray:
        """Mean context length of the drafting sequences (0 where none drafts)."""
        return np.divide(
            self.context_tokens,
            self.num_seqs,
            out=np.zeros_like(self.context_tokens),
            where=self.num_seqs > 0,
        )

    def catch_up(self, cost: Callable[..., FloatArray]) -> Forward:
        """The first forward: every new token of every drafting sequence, one logit row each.

        Attention pairs ``Σ t_i·(c_i + (t_i+1)/2)`` are approximated with the mean context.
        """
        tokens = self.num_new_tokens
        return Forward(
            tokens,
            self.num_seqs.copy(),
            self.context_tokens.copy(),
            tokens * self.mean_context,
            self.drafting,
            cost,
        )

    def step_forward(
        self,
        index: int,
        tokens_per_seq: float,
        cost: Callable[..., FloatArray],
        prefix_reads: float = 1.0,
    ) -> Forward:
        """The ``index``-th later forward (1-based): ``tokens_per_seq`` tokens and logit rows per
        sequence, each attending to its context plus the drafts before it; the KV of that
        context is read ``prefix_reads`` times per sequence (1: shared by its nodes)."""
        tokens = self.num_seqs * tokens_per_seq
        return Forward(
            tokens,
            tokens.copy(),
            prefix_reads * (self.context_tokens + index * self.num_seqs),
            tokens * (self.mean_context + index),
            self.drafting,
            cost,
        )


class ForwardProposer(Strategy):
    """A strategy that drafts with forwards of a small network; subclasses list the forwards.

    Raise ValueError if ``overheads`` is None.
    """

    def __init__(
        self,
        proposal: Proposal | None,
        acceptance: AcceptanceModel | None,
        overheads: DraftOverheads,
    ) -> None:
        super().__init__(proposal, acceptance)
        if overheads is None:
            raise ValueError("a drafting strategy needs its fixed overheads")
        self.overheads = overheads

    @abstractmethod
    def forwards(self, batch: Batch) -> list[Forward]:
        """The draft forwards of each step of ``batch``."""

    def num_forwards(self) -> int:
        """Draft forwards per speculative step (the extra draft-model forward not counted)."""
        return len(self.forwards(Batch.of(_ONE_SEQUENCE)))

    def draft_time_s(self, work: DraftWork) -> FloatArray:
        batch = Batch.of(work)
        total = np.full(len(batch.num_seqs), self.overheads.per_step_s)
        for forward in self.forwards(batch):
            seconds = forward.cost(
                forward.num_tokens,
                forward.num_logit_tokens,
                forward.kv_read_tokens,
                forward.attention_pairs,
            )
            total = total + (self.overheads.per_forward_s + seconds) * forward.active
        # Steps in which nothing drafts cost nothing (the per-step overhead included).
        return np.asarray(total * batch.drafting, dtype=np.float64)

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["draft_forwards_per_step"] = self.num_forwards()
        out["draft_overheads"] = {
            "per_forward_s": self.overheads.per_forward_s,
            "per_step_s": self.overheads.per_step_s,
        }
        return out


#: One decoding sequence that drafts: used to count forwards.
_ONE_SEQUENCE = DraftWork(
    num_seqs=np.array([1]),
    num_new_tokens=np.array([1]),
    context_tokens=np.array([1]),
    num_full_accept=np.array([0]),
    num_proposed=np.array([1]),
)
