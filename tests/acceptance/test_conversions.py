"""Conversions between acceptance metrics: round trips and the closed form."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sim.acceptance.conversions import (
    alpha_from_tau,
    conditional_to_cumulative,
    cumulative_from_taus,
    cumulative_to_conditional,
    tau_from_alpha,
    tau_from_conditional,
    tau_from_vllm085_mean_acceptance_length,
    vllm085_mean_acceptance_length_from_tau,
)
from sim.errors import ScenarioError

rates = st.lists(st.floats(0.01, 1.0), min_size=1, max_size=10)


@given(rates)
def test_conditional_cumulative_round_trip(conditional: list[float]) -> None:
    cumulative = conditional_to_cumulative(conditional)
    assert np.all(np.diff(cumulative) <= 1e-12)
    np.testing.assert_allclose(cumulative_to_conditional(cumulative), conditional, rtol=1e-9)


@given(st.floats(0.0, 0.999), st.integers(1, 12))
def test_constant_rates_match_leviathan_closed_form(alpha: float, k: int) -> None:
    assert tau_from_conditional([alpha], k) == pytest.approx(tau_from_alpha(alpha, k), rel=1e-12)
    assert tau_from_alpha(alpha, k) == pytest.approx(sum(alpha**i for i in range(k + 1)), rel=1e-12)


@given(st.floats(0.0, 0.99), st.integers(1, 12))
def test_alpha_from_tau_inverts_closed_form(alpha: float, k: int) -> None:
    tau = tau_from_alpha(alpha, k)
    assert tau_from_alpha(alpha_from_tau(tau, k), k) == pytest.approx(tau, abs=1e-9)


@given(st.floats(1.0, 9.0), st.integers(1, 8))
def test_alpha_from_tau_is_a_valid_probability_or_an_error(tau: float, k: int) -> None:
    if tau > k + 1:
        with pytest.raises(ScenarioError, match="k \\+ 1"):
            alpha_from_tau(tau, k)
    else:
        assert 0.0 <= alpha_from_tau(tau, k) <= 1.0


@given(st.floats(0.0, 20.0))
def test_vllm085_definition_round_trip(value: float) -> None:
    tau = tau_from_vllm085_mean_acceptance_length(value)
    assert tau == pytest.approx(value + 1.0)
    assert vllm085_mean_acceptance_length_from_tau(tau) == pytest.approx(value)


@given(rates)
# Rates a rounding step below 1: the closed form's quotient cancelled there, and the inverted
# rate of the first gap came out 7e-9 short, too little reach for the next gap's whole token.
@example([0.9999999999999999, 0.9999999999999999, 1.0])
def test_cumulative_from_taus_recovers_rates_from_every_k(conditional: list[float]) -> None:
    taus = {k: tau_from_conditional(conditional, k) for k in range(1, len(conditional) + 1)}
    np.testing.assert_allclose(
        cumulative_from_taus(taus), conditional_to_cumulative(conditional), atol=1e-9
    )


@given(rates, st.integers(2, 6))
# A chain whose rate jumps after a run of tiny ones: the constant rate of the first gaps leaves
# the next gap less reach than its tokens need, which must be refused, not met short.
@example(conditional=[0.01, 0.01, 0.01, 0.75], step=2)
def test_cumulative_from_sparse_taus_meets_every_published_tau_or_says_why(
    conditional: list[float], step: int
) -> None:
    ks = list(range(step, 13, step))
    taus = {k: tau_from_conditional(conditional, k) for k in ks}
    try:
        cumulative = cumulative_from_taus(taus)
    except ScenarioError as error:
        # A constant rate within one gap can leave too little reach for the next gap.
        assert "inconsistent" in str(error)
        return
    for k in ks:
        assert 1.0 + cumulative[:k].sum() == pytest.approx(taus[k], abs=1e-6)


def test_invalid_inputs_are_rejected() -> None:
    with pytest.raises(ScenarioError):
        cumulative_to_conditional([0.5, 0.6])
    with pytest.raises(ScenarioError):
        conditional_to_cumulative([1.2])
    with pytest.raises(ScenarioError):
        tau_from_alpha(1.5, 3)
    with pytest.raises(ScenarioError):
        alpha_from_tau(0.5, 3)
    with pytest.raises(ScenarioError):
        cumulative_from_taus({2: 1.5, 3: 1.2})
