"""The acceptance plan: every verify step of every request, drawn up front.

Acceptance depends on a request's content, not on the batch it is verified in, so the
engine asks for
all of a request's verify steps when the request arrives: how many draft tokens each step
proposes and
how many of them the target accepts. The engine gathers ``accepted[offsets[r] + j]`` for request r's
j-th verify step and emits ``accepted + 1`` tokens (the bonus or correction token),
truncating at the
request's end.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.errors import InvariantError, ScenarioError


@dataclass(frozen=True)
class Proposal:
    """What a drafting strategy proposes at each verify step of one sequence.

    A chain of k drafts is ``Proposal(k, k)``; a static tree whose nodes at depth d all have
    ``tree_widths[d-1]`` children is ``Proposal(num_nodes, len(widths), widths)``.
    Raise ScenarioError if the numbers are inconsistent.
    """

    num_draft_tokens: int
    depth: int
    tree_widths: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.num_draft_tokens < 0 or self.depth < 0:
            raise ScenarioError(
                f"speculation: num_draft_tokens and depth must be >= 0, got "
                f"{self.num_draft_tokens} and {self.depth}"
            )
        if self.depth > self.num_draft_tokens:
            raise ScenarioError(
                f"speculation: depth {self.depth} exceeds num_draft_tokens {self.num_draft_tokens}"
            )
        if self.tree_widths is not None:
            if len(self.tree_widths) != self.depth or any(w < 1 for w in self.tree_widths):
                raise ScenarioError(
                    f"speculation.tree: widths {self.tree_widths} must be {self.depth} numbers >= 1"
                )
        elif self.num_draft_tokens != self.depth:
            raise ScenarioError(
                f"speculation: a chain proposes depth = num_draft_tokens, got depth {self.depth} "
                f"and {self.num_draft_tokens} tokens"
            )

    @classmethod
    def chain(cls, num_speculative_tokens: int) -> Proposal:
        """A chain of ``num_speculative_tokens`` drafts."""
        return cls(num_speculative_tokens, num_speculative_tokens)

    @classmethod
    def static_tree(cls, widths: tuple[int, ...] | list[int]) -> Proposal:
        """A full tree with ``widths[d]`` children under every node at depth d (e.g.
        ``(2, 2, 2)``)."""
        widths_tuple = tuple(int(w) for w in widths)
        num_nodes = int(np.sum(np.cumprod(widths_tuple))) if widths_tuple else 0
        return cls(num_nodes, len(widths_tuple), widths_tuple)

    @property
    def is_tree(self) -> bool:
        """Whether more than one candidate is verified at some depth."""
        return self.tree_widths is not None and any(w > 1 for w in self.tree_widths)


@dataclass(frozen=True)
class AcceptancePlan:
    """Proposed and accepted draft tokens of every verify step, request by request.

    Request r's steps are ``[offsets[r], offsets[r + 1])``; the accepted counts satisfy
    ``0 <= accepted <= proposed`` and ``sum(accepted + 1)`` over a request's steps covers its decode
    tokens with no step to spare. The engine reads the plan through its subclass
    :class:`sim.engine.drafter.StepPlan`, which adds the engine's lookups and no field.
    """

    offsets: np.ndarray
    proposed: np.ndarray
    accepted: np.ndarray

    @property
    def num_requests(self) -> int:
        """How many requests the plan covers."""
        return int(self.offsets.size - 1)

    def num_steps(self) -> np.ndarray:
        """Verify steps per request."""
        return np.diff(self.offsets)

    def emitted_tokens(self) -> np.ndarray:
        """Tokens emitted per request before the engine truncates the last step."""
        per_step = self.accepted.astype(np.int64) + 1
        cumulative = np.concatenate([[0], np.cumsum(per_step)])
        return cumulative[self.offsets[1:]] - cumulative[self.offsets[:-1]]

    def check_invariants(self, num_decode_tokens: np.ndarray, depth: int) -> None:
        """Check the contract the engine relies on.

        Raise InvariantError if a step accepts more than it proposed or than ``depth``, or if a
        request's steps do not cover its tokens exactly (its last step is needed, no step more).
        """
        if np.any(self.accepted < 0) or np.any(self.accepted > self.proposed):
            raise InvariantError("acceptance plan: need 0 <= accepted <= proposed at every step")
        if np.any(self.accepted > depth):
            raise InvariantError(f"acceptance plan: a step accepted more than depth {depth}")
        needed = np.asarray(num_decode_tokens, dtype=np.int64)
        emitted = self.emitted_tokens()
        if np.any(emitted < needed):
            raise InvariantError("acceptance plan: a request's steps do not cover its tokens")
        steps = self.num_steps()
        has_steps = steps > 0
        last = self.accepted[self.offsets[1:][has_steps] - 1].astype(np.int64) + 1
        if np.any(emitted[has_steps] - last >= needed[has_steps]) or np.any(steps[needed == 0]):
            raise InvariantError("acceptance plan: a request has a step more than it needs")


class AcceptanceModel(ABC):
    """How many of the proposed draft tokens the target accepts, request by request."""

    @abstractmethod
    def plan(
        self,
        num_decode_tokens: np.ndarray,
        proposal: Proposal,
        rng: np.random.Generator,
        trace_keys: np.ndarray | None = None,
    ) -> AcceptancePlan:
        """Draw every verify step of every request; the same rng state gives the same plan."""

    @abstractmethod
    def expected_acceptance_length(self, proposal: Proposal) -> float:
        """τ: expected tokens per verify step, bonus token included."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Name, parameters and provenance, for the resolved scenario and reports."""


def check_decode_tokens(num_decode_tokens: np.ndarray) -> np.ndarray:
    """The decode token counts as int64, validated.

    Raise ScenarioError if the array is not one-dimensional or has a negative entry.
    """
    needed = np.asarray(num_decode_tokens)
    if needed.ndim != 1:
        raise ScenarioError(f"num_decode_tokens must be one-dimensional, got shape {needed.shape}")
    needed = needed.astype(np.int64)
    if np.any(needed < 0):
        raise ScenarioError("num_decode_tokens must be >= 0 for every request")
    return needed


def cover_tokens(
    num_decode_tokens: np.ndarray, emitted_per_step: np.ndarray, budget_offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut each request's drawn steps at the first one that covers its tokens.

    Request r drew steps ``[budget_offsets[r], budget_offsets[r + 1])``. Returns the number of steps
    kept per request, a boolean mask over the drawn steps, and which requests ran out of drawn steps
    before covering their tokens (their counts are meaningless and must be redrawn).
    """
    cumulative = np.cumsum(emitted_per_step, dtype=np.int64)
    starts = budget_offsets[:-1]
    ends = budget_offsets[1:]
    base = np.concatenate([[0], cumulative])[starts]
    # The first step whose running total reaches base + needed is the request's last step.
    last = np.searchsorted(cumulative, base + num_decode_tokens, side="left")
    needs_steps = num_decode_tokens > 0
    short = needs_steps & (last >= ends)
    num_steps = np.where(needs_steps & ~short, last - starts + 1, 0)
    drawn = ends - starts
    position = np.arange(emitted_per_step.size) - np.repeat(starts, drawn)
    keep = position < np.repeat(num_steps, drawn)
    return num_steps, keep, short


def offsets_from_counts(num_steps: np.ndarray) -> np.ndarray:
    """Offsets ``[0, n_0, n_0 + n_1, ...]`` from per-request step counts."""
    offsets = np.zeros(num_steps.size + 1, dtype=np.int64)
    np.cumsum(num_steps, out=offsets[1:])
    return offsets
