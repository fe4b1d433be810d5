"""Plans from the independent-step models: invariants, exact coverage, Monte-Carlo
against formulas."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.acceptance.conversions import tau_from_alpha
from sim.acceptance.models import ConstantAlphaModel, PositionalAcceptanceModel, TargetTauModel
from sim.acceptance.plan import AcceptancePlan, Proposal
from sim.errors import InvariantError, ScenarioError

proposals = st.one_of(
    st.integers(0, 8).map(Proposal.chain),
    st.lists(st.integers(1, 4), min_size=1, max_size=4).map(Proposal.static_tree),
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 400), min_size=1, max_size=40),
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6),
    st.floats(0.0, 1.0),
    proposals,
    st.integers(0, 2**32 - 1),
)
def test_plans_respect_the_engine_contract(
    needed: list[int], rates: list[float], match_rate: float, proposal: Proposal, seed: int
) -> None:
    model = PositionalAcceptanceModel(rates, match_rate=match_rate)
    tokens = np.array(needed)
    plan = model.plan(tokens, proposal, np.random.default_rng(seed))
    plan.check_invariants(tokens, proposal.depth)
    assert plan.offsets.dtype == np.int64 and plan.offsets[0] == 0
    assert plan.proposed.dtype == np.int16 and plan.accepted.dtype == np.int16
    assert np.all((plan.proposed == 0) | (plan.proposed == proposal.num_draft_tokens))


def test_check_invariants_catches_a_spare_step() -> None:
    plan = AcceptancePlan(np.array([0, 2]), np.array([3, 3], np.int16), np.array([3, 0], np.int16))
    with pytest.raises(InvariantError, match="step more"):
        plan.check_invariants(np.array([4]), 3)
    plan.check_invariants(np.array([5]), 3)


def test_same_rng_state_gives_identical_plan() -> None:
    model = ConstantAlphaModel(0.7)
    tokens = np.random.default_rng(3).integers(0, 500, 300)
    first = model.plan(tokens, Proposal.chain(4), np.random.default_rng(11))
    second = model.plan(tokens, Proposal.chain(4), np.random.default_rng(11))
    for name in ("offsets", "proposed", "accepted"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))


def _monte_carlo_tau(plan: AcceptancePlan) -> tuple[float, float]:
    emitted = plan.accepted.astype(np.float64) + 1.0
    return float(emitted.mean()), float(emitted.std() / np.sqrt(emitted.size))


@pytest.mark.parametrize(("alpha", "k"), [(0.5, 1), (0.7, 3), (0.8, 5), (0.9, 7)])
def test_constant_alpha_monte_carlo_matches_closed_form(alpha: float, k: int) -> None:
    model = ConstantAlphaModel(alpha)
    plan = model.plan(np.full(2000, 400), Proposal.chain(k), np.random.default_rng(5))
    mean, error = _monte_carlo_tau(plan)
    # Wald's identity: the stopping rule does not bias the pooled mean beyond O(1/steps).
    assert abs(mean - tau_from_alpha(alpha, k)) < 5 * error + 2e-3
    assert model.expected_acceptance_length(Proposal.chain(k)) == tau_from_alpha(alpha, k)


def test_per_position_histogram_matches_the_rates() -> None:
    rates = [0.8, 0.6, 0.4]
    model = PositionalAcceptanceModel(rates)
    plan = model.plan(np.full(1000, 500), Proposal.chain(5), np.random.default_rng(2))
    reach = [float(np.mean(plan.accepted >= d)) for d in range(1, 6)]
    expected = np.cumprod([0.8, 0.6, 0.4, 0.4, 0.4])
    np.testing.assert_allclose(reach, expected, atol=0.01)


def test_ngram_misses_propose_nothing_at_the_match_rate() -> None:
    model = PositionalAcceptanceModel([0.6], match_rate=0.3)
    plan = model.plan(np.full(500, 300), Proposal.chain(3), np.random.default_rng(4))
    assert np.mean(plan.proposed == 0) == pytest.approx(0.7, abs=0.01)
    assert np.all(plan.accepted[plan.proposed == 0] == 0)


def test_zero_token_requests_have_no_steps_and_big_ones_are_covered() -> None:
    model = ConstantAlphaModel(0.95)
    tokens = np.array([0, 1, 0, 5000, 2])
    plan = model.plan(tokens, Proposal.chain(20), np.random.default_rng(0))
    assert list(plan.num_steps()[[0, 2]]) == [0, 0]
    plan.check_invariants(tokens, 20)


def test_budget_shortfall_is_redrawn_without_breaking_order() -> None:
    # α close to 1 and a tiny first budget relative to variance exercise the redraw path.
    model = PositionalAcceptanceModel([1.0, 1.0, 0.0])
    tokens = np.random.default_rng(1).integers(0, 3000, 400)
    plan = model.plan(tokens, Proposal.chain(30), np.random.default_rng(1))
    plan.check_invariants(tokens, 30)
    assert np.all(plan.accepted == 2)


@pytest.mark.parametrize("proposal", [Proposal.chain(3), Proposal.static_tree((3, 2, 2, 1))])
def test_target_tau_model_hits_its_target(proposal: Proposal) -> None:
    model = TargetTauModel(2.6)
    assert model.expected_acceptance_length(proposal) == pytest.approx(2.6, abs=1e-8)
    plan = model.plan(np.full(2000, 400), proposal, np.random.default_rng(8))
    mean, error = _monte_carlo_tau(plan)
    assert abs(mean - 2.6) < 5 * error + 2e-3


def test_target_tau_outside_range_names_the_key() -> None:
    with pytest.raises(ScenarioError, match="mean_acceptance_length"):
        TargetTauModel(4.5).plan(np.array([10]), Proposal.chain(3), np.random.default_rng(0))
