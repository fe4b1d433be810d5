"""What the engine needs from a drafting strategy: its per-request plans and its draft cost.

The engine knows nothing about how a strategy drafts. Per step it tells the strategy how much
drafting work the batch implies (:class:`DraftWork`, one entry per step so a fast-forwarded
stretch is costed at once) and adds the returned seconds to the step; per sequence it reads the
acceptance plan drawn up front (how many draft tokens each verify step carries and accepts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from sim.acceptance.plan import AcceptancePlan

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


#: Zeros appended to a plan: reads past a request's plan land there.
PLAN_PADDING = 1


class StepPlan(AcceptancePlan):
    """The engine's view of an acceptance plan: the same three arrays (request r's verify steps
    are ``[offsets[r], offsets[r+1])``, ``proposed`` draft tokens carried by each and
    ``accepted`` of them), plus the lookups the engine makes and the per-step policy seam.

    A request that runs past its plan (it cannot, unless preemption re-emits a token) proposes
    nothing more. The arrays are :class:`~sim.acceptance.plan.AcceptancePlan`'s fields, not a
    copy of them: :meth:`of` views a drawn plan without copying its arrays.
    """

    #: Whether a policy chooses the drafts step by step (:mod:`sim.engine.policies`).
    adaptive = False
    #: Whether the choice depends on the batch size (a stretch then stops at a finish).
    batch_dependent = False
    #: Whether a stretch may open with admissions (planned apart from the running rows).
    stretch_admissions = True

    def holds_for(self) -> int:
        """Steps over which the plan's answers follow from the positions alone (a fixed plan:
        all of them); the stretch planner plans no further."""
        return 1 << 30

    def observe(self, ids: IntArray, proposed: IntArray, accepted: IntArray) -> None:
        """Applied steps, (row × step), for a plan that learns from them (a fixed one does
        not)."""

    @classmethod
    def of(cls, plan: AcceptancePlan) -> StepPlan:
        """The engine's view of a drawn acceptance plan (its arrays, shared, not copied)."""
        if isinstance(plan, StepPlan):
            return plan
        return cls(offsets=plan.offsets, proposed=plan.proposed, accepted=plan.accepted)

    @staticmethod
    def without_speculation(num_requests: int) -> StepPlan:
        """An empty plan: every request proposes nothing at every step."""
        return StepPlan(
            offsets=np.zeros(num_requests + 1, dtype=np.int64),
            proposed=np.zeros(0, dtype=np.int16),
            accepted=np.zeros(0, dtype=np.int16),
        )

    def lookup(self, requests: IntArray, step_index: IntArray) -> tuple[IntArray, IntArray]:
        """Proposed and accepted draft tokens of each request's ``step_index``-th verify step
        (int64; zero past the request's plan)."""
        proposed, accepted = self.window(requests, step_index, 1)
        return proposed[:, 0], accepted[:, 0]

    def window(
        self, requests: IntArray, step_index: IntArray, num_steps: int
    ) -> tuple[IntArray, IntArray]:
        """:meth:`lookup` of ``num_steps`` consecutive verify steps of each request from its
        ``step_index``-th, as (request × step) arrays. Read from the stored (int8/int16) plan: a
        widened copy of a million requests' plans would take 1.6 GB."""
        if len(self.proposed) == 0:
            zeros = np.zeros((len(requests), num_steps), dtype=np.int64)
            return zeros, zeros.copy()
        grid = (self.offsets[requests] + step_index)[:, None] + np.arange(num_steps)
        inside = grid < self.offsets[requests + 1][:, None]
        grid = np.minimum(grid, len(self.proposed) - 1)  # past a plan's end: masked below
        proposed = np.where(inside, self.proposed[grid], 0).astype(np.int64)
        accepted = np.where(inside, self.accepted[grid], 0).astype(np.int64)
        return proposed, accepted

    def _padded(self) -> tuple[IntArray, IntArray]:
        """The plan as int64, with zeros appended so that any window past the end is readable
        (for the compiled pass; made on its first use)."""
        cached = self.__dict__.get("_padded_cache")
        if cached is None:
            pad = np.zeros(PLAN_PADDING, dtype=np.int64)
            cached = (
                np.concatenate((self.proposed.astype(np.int64), pad)),
                np.concatenate((self.accepted.astype(np.int64), pad)),
            )
            object.__setattr__(self, "_padded_cache", cached)
        return cached
