"""EAGLE-2 dynamic trees: closed forms, budget monotonicity and the published acceptance lengths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.acceptance.dynamic_tree import (
    CONFIDENCE_CONCENTRATION,
    SIBLING_SHARE,
    ConfidenceModel,
    DynamicTree,
    DynamicTreeModel,
    dynamic_tree_reach,
    simulate_accepted,
)
from sim.acceptance.models import PositionalAcceptanceModel, TargetTauModel
from sim.errors import ScenarioError

DATA = Path(__file__).resolve().parents[2] / "sim" / "data"
FIT = yaml.safe_load((DATA / "dynamic_tree_confidence.yaml").read_text())


def test_shipped_constants_are_the_recorded_fit() -> None:
    assert FIT["confidence_concentration"] == CONFIDENCE_CONCENTRATION
    assert FIT["sibling_share"] == SIBLING_SHARE
    low, high = FIT["sibling_share_range"]
    assert low <= SIBLING_SHARE <= high


@pytest.mark.parametrize("rates", [[0.8], [0.75, 0.67, 0.64, 0.63, 0.63], [0.3, 0.9, 0.5]])
def test_topk_one_is_a_chain_with_the_chain_closed_form(rates: list[float]) -> None:
    """With one child per node the tree is a chain; E[c_1] = a_d at every depth and nodes are
    independent, so P(accepted >= d) = Π_{i<=d} a_i (the chain law), within Monte-Carlo error."""
    steps = 5
    reach = dynamic_tree_reach(DynamicTree(1, steps, steps + 1), rates, num_trees=40_000)
    chain = PositionalAcceptanceModel(rates).conditional_rates
    expected = np.cumprod([chain[min(d, len(chain) - 1)] for d in range(steps)])
    # Binomial standard error of each reach at 40,000 trees is at most 0.0025.
    assert np.allclose(reach, expected, atol=4 * 0.0025)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 5),
    st.integers(1, 5),
    st.integers(2, 30),
    st.integers(1, 10),
    st.floats(0.2, 0.95),
)
def test_a_larger_budget_never_accepts_less_tree_by_tree(
    topk: int, steps: int, tokens: int, more: int, rate: float
) -> None:
    """Same draws (one seed): the kept set of a larger budget contains the smaller one's, so
    every simulated tree accepts at least as many drafts."""
    small, large = DynamicTree(topk, steps, tokens), DynamicTree(topk, steps, tokens + more)
    confidence = ConfidenceModel()
    a = simulate_accepted(small, [rate], confidence, 500, np.random.default_rng(7))
    b = simulate_accepted(large, [rate], confidence, 500, np.random.default_rng(7))
    assert np.all(b >= a)
    assert a.max() <= small.depth and b.max() <= large.depth


def test_dynamic_tree_beats_the_chain_of_its_depth_and_stays_below_depth_plus_one() -> None:
    rates = [0.75, 0.67, 0.64, 0.63, 0.63]
    tree = DynamicTree(10, 6, 61)
    tau = 1.0 + dynamic_tree_reach(tree, rates).sum()
    chain = 1.0 + dynamic_tree_reach(DynamicTree(1, 6, 7), rates).sum()
    assert chain < tau < tree.depth + 1


def test_bad_trees_name_the_key() -> None:
    with pytest.raises(ScenarioError, match=r"speculation\.tree"):
        DynamicTree(4, 5, 1)
    with pytest.raises(ScenarioError, match="mean_acceptance_length"):
        DynamicTreeModel(TargetTauModel(7.5), DynamicTree(4, 5, 8))


def test_a_target_tau_is_met_by_the_tree() -> None:
    model = DynamicTreeModel(TargetTauModel(3.2), DynamicTree(4, 5, 8))
    # Solved on 2,000 trees, tabulated on 10,000: within their Monte-Carlo noise.
    assert model.expected_acceptance_length() == pytest.approx(3.2, abs=0.06)


def _rows(kind: str) -> list[dict]:
    return FIT[kind]


@pytest.mark.parametrize("kind", ["fit_rows", "check_rows"])
def test_published_eagle2_acceptance_lengths(kind: str) -> None:
    """EAGLE-2 paper (arXiv:2406.16858 v2) Table 1, T = 0, top-k 10, 6 levels, 50 (13B) or 60
    (7B) drafts, from the EAGLE-1 chain rates of the same model and benchmark. The MT-bench and
    HumanEval rows fitted κ and ρ; the GSM8K and Alpaca rows did not (out of sample). The
    recorded predictions are what the shipped model computes, and the errors are those stated in
    docs/adaptive-speculation.md: fit RMS 2.5 %, out-of-sample RMS 3.7 % (worst −9 %, Vicuna-13B
    Alpaca), within the 5 % RMS this model is held to."""
    profiles = yaml.safe_load((DATA / "acceptance_profiles.yaml").read_text())["profiles"]
    errors = []
    for row in _rows(kind):
        rates = profiles[row["chain_profile"]][0]["conditional_rates"]
        assert rates == row["chain_rates"]
        tree = DynamicTree(10, 6, row["num_drafts"] + 1)
        tau = 1.0 + dynamic_tree_reach(tree, rates, num_trees=20_000).sum()
        assert tau == pytest.approx(row["predicted_tau"], abs=6e-4)
        errors.append(tau / row["published_tau"] - 1.0)
    rms = float(np.sqrt(np.mean(np.square(errors))))
    assert rms == pytest.approx(FIT[f"{kind[:-5]}_rms_relative_error"], abs=1e-4)
    assert rms < 0.05


def test_an_engine_run_draws_each_step_from_the_tree_law() -> None:
    """Steps drawn from the tabulated law average to its τ (CLT bound over 20,000 steps)."""
    model = DynamicTreeModel(PositionalAcceptanceModel([0.75, 0.67]), DynamicTree(4, 5, 8))
    plan = model.plan(np.full(2000, 400), model.tree.proposal(), np.random.default_rng(1))
    emitted = plan.accepted.astype(np.float64) + 1.0
    tau = model.expected_acceptance_length()
    # The last step of a request is kept whatever it emits; compare over every step but those.
    last = plan.offsets[1:] - 1
    inner = np.delete(emitted, last)
    assert abs(inner.mean() - tau) < 4 * inner.std() / np.sqrt(inner.size)
    assert np.all(plan.proposed == 7)  # the root is verified too: num_draft_tokens − 1 drafts
