"""The sibling rank rule for tree verification and the EAGLE-2 effective tree."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from sim.acceptance.conversions import tau_from_conditional
from sim.acceptance.models import PositionalAcceptanceModel
from sim.acceptance.plan import Proposal
from sim.acceptance.tree import (
    EAGLE1_DEFAULT_TREE,
    REFERENCE_RATE,
    SIBLING_DECAY,
    cumulative_reach,
    eagle2_effective_proposal,
    rank_probabilities,
    tree_tau_from_paths,
)

PROFILES = Path(__file__).resolve().parents[2] / "sim" / "data" / "acceptance_profiles.yaml"
rates = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=5)
widths = st.lists(st.integers(1, 3), min_size=1, max_size=4)


def _full_tree_paths(tree_widths: list[int]) -> list[tuple[int, ...]]:
    paths: list[tuple[int, ...]] = []
    level: list[tuple[int, ...]] = [()]
    for width in tree_widths:
        level = [(*path, rank) for path in level for rank in range(width)]
        paths.extend(level)
    return paths


@given(rates, widths, st.floats(0.0, 1.0))
def test_widths_formula_equals_path_sum_for_full_trees(
    conditional: list[float], tree_widths: list[int], decay: float
) -> None:
    proposal = Proposal.static_tree(tree_widths)
    by_widths = 1.0 + cumulative_reach(conditional, proposal, decay).sum()
    by_paths = tree_tau_from_paths(conditional, _full_tree_paths(tree_widths), decay)
    assert by_widths == pytest.approx(by_paths, rel=1e-9)


@given(rates, widths)
def test_zero_decay_is_a_chain_and_more_decay_never_hurts(
    conditional: list[float], tree_widths: list[int]
) -> None:
    proposal = Proposal.static_tree(tree_widths)
    chain = tau_from_conditional(conditional, len(tree_widths))
    assert 1.0 + cumulative_reach(conditional, proposal, 0.0).sum() == pytest.approx(chain)
    taus = [1.0 + cumulative_reach(conditional, proposal, d).sum() for d in (0.2, 0.5, 0.9)]
    assert taus[0] <= taus[1] + 1e-12 <= taus[2] + 2e-12


@given(st.floats(0.0, 1.0), st.integers(1, 10), st.floats(0.0, 1.0))
def test_rank_probabilities_are_a_sub_distribution(rate: float, width: int, decay: float) -> None:
    probabilities = rank_probabilities(rate, width, decay)
    assert np.all(probabilities >= 0) and probabilities.sum() <= 1 + 1e-12
    assert probabilities[0] == pytest.approx(rate)


def test_shipped_constants_match_the_fitted_rule() -> None:
    rule = yaml.safe_load(PROFILES.read_text())["tree_rule"]
    assert rule["sibling_decay"] == SIBLING_DECAY
    assert rule["reference_rate"] == REFERENCE_RATE
    # The fit must explain EAGLE-1's chain-to-tree gain on the rows it was fitted to.
    assert rule["fit_rms_relative_error"] < 0.05
    assert len(EAGLE1_DEFAULT_TREE) == 25


def test_eagle2_effective_tree_spends_its_budget_sensibly() -> None:
    proposal = eagle2_effective_proposal(10, 8, 60)
    assert proposal.num_draft_tokens == 60 and 1 <= proposal.depth <= 8
    assert proposal.tree_widths is not None
    assert all(1 <= width <= 10 for width in proposal.tree_widths)
    assert list(proposal.tree_widths) == sorted(proposal.tree_widths, reverse=True)
    small = eagle2_effective_proposal(1, 5, 5)
    assert small.tree_widths == (1, 1, 1, 1, 1)


def test_tree_plans_match_expected_length() -> None:
    model = PositionalAcceptanceModel([0.7, 0.6])
    proposal = Proposal.static_tree((3, 2, 2))
    plan = model.plan(np.full(2000, 400), proposal, np.random.default_rng(3))
    plan.check_invariants(np.full(2000, 400), proposal.depth)
    assert np.all(plan.proposed == proposal.num_draft_tokens)
    emitted = plan.accepted + 1.0
    error = emitted.std() / np.sqrt(emitted.size)
    assert abs(emitted.mean() - model.expected_acceptance_length(proposal)) < 5 * error + 2e-3
