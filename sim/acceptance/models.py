"""Acceptance models whose verify steps are independent draws from one per-position law.

A constant α, a list of per-position conditional rates, a target τ and a shipped profile
all come down
to conditional rates ``a_1, a_2, ...``: the target accepts draft position i with probability ``a_i``
given that it accepted positions ``1..i-1``. A step's accepted count then has
``P(accepted >= d) = c_d`` (``Π_{i<=d} a_i`` for a chain, the rank rule of ``tree.py`` for a
tree), and
one uniform ``U`` per step gives ``accepted = #{d : U < c_d}`` because ``c_d`` decreases with d.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from sim.acceptance.conversions import alpha_from_tau, extend_rates, tau_from_alpha
from sim.acceptance.plan import (
    AcceptanceModel,
    AcceptancePlan,
    Proposal,
    check_decode_tokens,
    cover_tokens,
    offsets_from_counts,
)
from sim.acceptance.tree import SIBLING_DECAY, cumulative_reach
from sim.errors import ScenarioError


def _draw_steps(
    num_steps: np.ndarray,
    reach: np.ndarray,
    num_draft_tokens: int,
    match_rate: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    total = int(num_steps.sum())
    uniform = rng.random(total)
    accepted = np.zeros(total, dtype=np.int16)
    for reach_at_depth in reach:
        accepted += uniform < reach_at_depth
    proposed = np.full(total, num_draft_tokens, dtype=np.int16)
    if match_rate < 1.0:
        # An n-gram proposer that finds no match proposes nothing; the step emits one token.
        miss = rng.random(total) >= match_rate
        proposed[miss] = 0
        accepted[miss] = 0
    return proposed, accepted


def plan_independent_steps(
    num_decode_tokens: np.ndarray,
    proposal: Proposal,
    reach: np.ndarray,
    rng: np.random.Generator,
    match_rate: float = 1.0,
) -> AcceptancePlan:
    """A plan whose steps are independent with ``P(accepted >= d) = reach[d-1]``.

    Each request first draws a budget of steps a little above its expected need (every step emits
    at least one token, so ``num_decode_tokens`` steps always suffice); the rare request the budget
    does not cover is drawn again with that safe budget.
    Raise ScenarioError if ``num_decode_tokens`` is invalid.
    """
    needed = check_decode_tokens(num_decode_tokens)
    tau = 1.0 + match_rate * float(np.sum(reach))
    budget = np.minimum(needed, np.ceil(1.3 * needed / tau + 8.0).astype(np.int64))
    budget_offsets = offsets_from_counts(budget)
    proposed, accepted = _draw_steps(budget, reach, proposal.num_draft_tokens, match_rate, rng)
    num_steps, keep, short = cover_tokens(needed, accepted.astype(np.int64) + 1, budget_offsets)
    if not np.any(short):
        return AcceptancePlan(offsets_from_counts(num_steps), proposed[keep], accepted[keep])
    # Redraw the uncovered requests with a budget of one step per token, then merge request-wise.
    retry = np.flatnonzero(short)
    retry_offsets = offsets_from_counts(needed[retry])
    retry_proposed, retry_accepted = _draw_steps(
        needed[retry], reach, proposal.num_draft_tokens, match_rate, rng
    )
    retry_steps, retry_keep, _ = cover_tokens(
        needed[retry], retry_accepted.astype(np.int64) + 1, retry_offsets
    )
    num_steps[retry] = retry_steps
    owner = np.concatenate(
        [
            np.repeat(np.arange(needed.size), budget)[keep],
            np.repeat(retry, needed[retry])[retry_keep],
        ]
    )
    order = np.argsort(owner, kind="stable")
    merged_proposed = np.concatenate([proposed[keep], retry_proposed[retry_keep]])[order]
    merged_accepted = np.concatenate([accepted[keep], retry_accepted[retry_keep]])[order]
    return AcceptancePlan(offsets_from_counts(num_steps), merged_proposed, merged_accepted)


class PositionalAcceptanceModel(AcceptanceModel):
    """Independent steps with per-position conditional acceptance rates.

    Positions beyond the list reuse its last rate. With ``match_rate < 1`` (n-gram), a step finds
    no draft with probability ``1 − match_rate`` and then proposes and accepts nothing.
    Raise ScenarioError if a rate, ``match_rate`` or ``sibling_decay`` is outside [0, 1].
    """

    def __init__(
        self,
        conditional_rates: Sequence[float],
        *,
        name: str = "per_position",
        match_rate: float = 1.0,
        sibling_decay: float = SIBLING_DECAY,
        provenance: dict[str, Any] | None = None,
    ) -> None:
        self.conditional_rates = extend_rates(conditional_rates, len(conditional_rates))
        if not 0.0 <= match_rate <= 1.0:
            raise ScenarioError(f"ngram_match_rate must be in [0, 1], got {match_rate}")
        if not 0.0 <= sibling_decay <= 1.0:
            raise ScenarioError(f"tree sibling_decay must be in [0, 1], got {sibling_decay}")
        self.name = name
        self.match_rate = float(match_rate)
        self.sibling_decay = float(sibling_decay)
        self.provenance = dict(provenance or {})

    def reach(self, proposal: Proposal) -> np.ndarray:
        """``P(accepted >= d)`` for d = 1..depth when a draft was proposed."""
        return cumulative_reach(self.conditional_rates, proposal, self.sibling_decay)

    def plan(
        self,
        num_decode_tokens: np.ndarray,
        proposal: Proposal,
        rng: np.random.Generator,
        trace_keys: np.ndarray | None = None,
    ) -> AcceptancePlan:
        """Draw every request's steps; ``trace_keys`` is ignored (steps do not depend on
        content)."""
        return plan_independent_steps(
            num_decode_tokens, proposal, self.reach(proposal), rng, self.match_rate
        )

    def expected_acceptance_length(self, proposal: Proposal) -> float:
        """``1 + match_rate · Σ_d P(accepted >= d)``."""
        return float(1.0 + self.match_rate * np.sum(self.reach(proposal)))

    def describe(self) -> dict[str, Any]:
        """The rates, the match rate, the tree rule and where they came from."""
        return {
            "name": self.name,
            "conditional_rates": [round(float(rate), 6) for rate in self.conditional_rates],
            "ngram_match_rate": self.match_rate,
            "tree_sibling_decay": self.sibling_decay,
            **self.provenance,
        }


class ConstantAlphaModel(PositionalAcceptanceModel):
    """Every draft position accepted independently with the same α (Leviathan et al. 2023).

    Raise ScenarioError if ``alpha`` is outside [0, 1).
    """

    def __init__(self, alpha: float, *, match_rate: float = 1.0) -> None:
        if not 0.0 <= alpha < 1.0:
            raise ScenarioError(f"speculation.acceptance.alpha: must be in [0, 1), got {alpha}")
        super().__init__(
            [alpha],
            name="alpha",
            match_rate=match_rate,
            provenance={"source": "constant alpha, Leviathan et al. 2023, arXiv:2211.17192"},
        )
        self.alpha = float(alpha)

    def expected_acceptance_length(self, proposal: Proposal) -> float:
        """The closed form ``(1 − α^(k+1)) / (1 − α)`` for chains, the rank rule for trees."""
        if proposal.tree_widths is None and self.match_rate == 1.0:
            return tau_from_alpha(self.alpha, proposal.depth)
        return super().expected_acceptance_length(proposal)


class TargetTauModel(AcceptanceModel):
    """A constant α solved so that the proposal's expected tokens per step equal a target τ.

    For a chain this inverts Leviathan's closed form; for a tree it solves the rank rule's τ for α.
    Raise ScenarioError if τ < 1.
    """

    def __init__(self, target_tau: float, *, match_rate: float = 1.0) -> None:
        if not math.isfinite(target_tau) or target_tau < 1.0:
            raise ScenarioError(
                f"speculation.acceptance.mean_acceptance_length: must be >= 1, got {target_tau}"
            )
        self.target_tau = float(target_tau)
        self.match_rate = float(match_rate)

    def alpha_for(self, proposal: Proposal) -> float:
        """The constant α that meets the target at this proposal.

        Raise ScenarioError if τ is outside [1, depth + 1].
        """
        depth = proposal.depth
        if not 1.0 <= self.target_tau <= depth + 1.0:
            raise ScenarioError(
                f"speculation.acceptance.mean_acceptance_length: {self.target_tau} is outside "
                f"[1, k + 1] = [1, {depth + 1}] for k = {depth}"
            )
        if proposal.tree_widths is None:
            return alpha_from_tau(self.target_tau, depth)

        def gap(alpha: float) -> float:
            reach = cumulative_reach([alpha], proposal, SIBLING_DECAY)
            return 1.0 + float(np.sum(reach)) - self.target_tau

        if self.target_tau <= 1.0:
            return 0.0
        if self.target_tau >= depth + 1.0:
            return 1.0
        from scipy.optimize import brentq  # deferred: scipy is slow to import

        return float(brentq(gap, 0.0, 1.0, xtol=1e-12))

    def _model(self, proposal: Proposal) -> PositionalAcceptanceModel:
        return PositionalAcceptanceModel([self.alpha_for(proposal)], match_rate=self.match_rate)

    def plan(
        self,
        num_decode_tokens: np.ndarray,
        proposal: Proposal,
        rng: np.random.Generator,
        trace_keys: np.ndarray | None = None,
    ) -> AcceptancePlan:
        """Draw every request's steps at the solved α."""
        return self._model(proposal).plan(num_decode_tokens, proposal, rng)

    def expected_acceptance_length(self, proposal: Proposal) -> float:
        """The target τ (scaled by the match rate for n-gram misses)."""
        return self._model(proposal).expected_acceptance_length(proposal)

    def describe(self) -> dict[str, Any]:
        """The target and how α is found."""
        return {
            "name": "mean_acceptance_length",
            "target_tau": self.target_tau,
            "ngram_match_rate": self.match_rate,
            "source": "constant alpha solved (Brent) from tau at the proposal's k, "
            "Leviathan et al. 2023, arXiv:2211.17192",
        }
