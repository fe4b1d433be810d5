"""What the engine needs from a drafting strategy: its per-request plans and its draft cost.

The engine knows nothing about how a strategy drafts. Per step it tells the strategy how much
drafting work the batch implies (:class:`DraftWork`, one entry per step so a fast-forwarded
segment is costed at once) and adds the returned seconds to the step; per sequence it reads the
acceptance plan drawn up front (how many draft tokens each verify step carries and accepts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class DraftWork:
    """Drafting work implied by one or many steps (every field: one entry per step).

    ``num_seqs``: sequences that draft after the step (decodes that go on, prefills that complete);
    ``num_new_tokens``: tokens the drafter must catch up on (accepted + 1 per decode, the completed
    chunk for a prefill); ``context_tokens``: Σ context length of the drafting sequences;
    ``num_full_accept``: sequences whose every draft was accepted (a draft model then needs one
    more forward to keep its KV in step); ``num_proposed``: draft tokens proposed for the next step.
    """

    num_seqs: IntArray
    num_new_tokens: IntArray
    context_tokens: IntArray
    num_full_accept: IntArray
    num_proposed: IntArray


class Drafter(Protocol):
    """The engine's view of a drafting strategy."""

    name: str

    def draft_time_s(self, work: DraftWork) -> FloatArray:
        """Seconds of drafting each step adds, one entry per step."""
        ...

    def extra_kv_bytes_per_token(self) -> float:
        """KV bytes per token the drafter keeps beside the target's (its own layers)."""
        ...


class NoDrafter:
    """No speculation: steps carry one token per decoding sequence and cost nothing extra."""

    name = "none"

    def draft_time_s(self, work: DraftWork) -> FloatArray:
        return np.zeros(len(np.atleast_1d(work.num_seqs)))

    def extra_kv_bytes_per_token(self) -> float:
        return 0.0


@dataclass(frozen=True)
class StepPlan:
    """Per-request verify-step plans: request r's steps are ``[offsets[r], offsets[r+1])``.

    ``proposed`` draft tokens carried by each step and ``accepted`` of them (0 ≤ accepted ≤
    proposed). A request that runs past its plan (it cannot, unless preemption re-emits a token)
    proposes nothing more.
    """

    offsets: IntArray
    proposed: NDArray[np.int16]
    accepted: NDArray[np.int16]

    @staticmethod
    def without_speculation(num_requests: int) -> StepPlan:
        """An empty plan: every request proposes nothing at every step."""
        return StepPlan(
            offsets=np.zeros(num_requests + 1, dtype=np.int64),
            proposed=np.zeros(0, dtype=np.int16),
            accepted=np.zeros(0, dtype=np.int16),
        )

    def lookup(self, requests: IntArray, step_index: IntArray) -> tuple[IntArray, IntArray]:
        """Proposed and accepted draft tokens of each request's ``step_index``-th verify step."""
        if len(self.proposed) == 0:
            zeros = np.zeros(len(requests), dtype=np.int64)
            return zeros, zeros.copy()
        position = self.offsets[requests] + step_index
        inside = position < self.offsets[requests + 1]
        safe = np.where(inside, position, 0)
        proposed = np.where(inside, self.proposed[safe], 0).astype(np.int64)
        accepted = np.where(inside, self.accepted[safe], 0).astype(np.int64)
        return proposed, accepted
