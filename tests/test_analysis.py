"""Tests of the acceptance analysis: closed form, optimum, simulation and the lesson check."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from matplotlib.figure import Figure

from sim.errors import ScenarioError
from sim.theory.chain_acceptance import (
    constant_acceptance_pair,
    expected_tokens_per_step,
    lesson_comparison,
    monte_carlo_tokens_per_step,
    optimal_k,
    speedup,
    time_per_token,
    tokens_per_step_figure,
    tokens_per_step_table,
)

alphas = st.floats(0.0, 0.999)
ks = st.integers(0, 40)


@given(alphas, ks)
def test_partial_sum_equals_the_closed_form(alpha, k):
    closed_form = (1.0 - alpha ** (k + 1)) / (1.0 - alpha)
    assert expected_tokens_per_step(alpha, k) == pytest.approx(closed_form, rel=1e-9)


@given(ks)
def test_limits(k):
    assert expected_tokens_per_step(1.0, k) == k + 1
    assert expected_tokens_per_step(0.0, k) == 1.0
    assert expected_tokens_per_step(0.7, 0) == 1.0


@given(alphas, ks)
def test_more_acceptance_or_more_drafts_never_emit_fewer_tokens(alpha, k):
    base = expected_tokens_per_step(alpha, k)
    assert expected_tokens_per_step(min(alpha + 0.01, 1.0), k) >= base
    assert expected_tokens_per_step(alpha, k + 1) >= base
    assert base <= 1.0 / (1.0 - alpha) + 1e-9


@given(alphas, ks, st.floats(0.0, 1.0))
def test_speedup_is_the_inverse_of_time_per_token(alpha, k, c):
    assert speedup(alpha, k, c) * time_per_token(alpha, k, c) == pytest.approx(1.0)


@given(alphas, st.floats(0.001, 1.0))
def test_optimal_k_beats_every_other_k(alpha, c):
    best = optimal_k(alpha, c, k_max=40)
    assert all(speedup(alpha, best, c) >= speedup(alpha, k, c) for k in range(41))


def test_no_acceptance_means_no_speculation():
    assert optimal_k(0.0, 0.05) == 0


@pytest.mark.parametrize(
    ("alpha", "k", "c", "tokens", "speedup_value"),
    # Worked by hand: E(0.6, 5) = (1 - 0.6^6) / 0.4; 3.09 = E(0.8, 8) / (8 * 0.05 + 1).
    [(0.6, 5, 0.0, 2.38, 2.38), (0.9, 5, 0.0, 4.69, 4.69), (0.8, 8, 0.05, 4.33, 3.09)],
)
def test_known_values(alpha, k, c, tokens, speedup_value):
    assert expected_tokens_per_step(alpha, k) == pytest.approx(tokens, abs=0.005)
    assert speedup(alpha, k, c) == pytest.approx(speedup_value, abs=0.005)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.8, 1.0])
def test_constant_acceptance_pair_has_the_requested_overlap(alpha):
    draft_prob, target_prob = constant_acceptance_pair(alpha)
    assert draft_prob.sum() == pytest.approx(1.0)
    assert target_prob.sum() == pytest.approx(1.0)
    assert np.minimum(draft_prob, target_prob).sum() == pytest.approx(alpha)


@pytest.mark.parametrize(("alpha", "k"), [(0.3, 2), (0.6, 5), (0.8, 4), (0.95, 12)])
def test_monte_carlo_agrees_with_the_closed_form(alpha, k):
    mean, error = monte_carlo_tokens_per_step(alpha, k, 20_000, np.random.default_rng(11))
    assert error > 0.0
    assert abs(mean - expected_tokens_per_step(alpha, k)) < 4.5 * error


@pytest.mark.parametrize(("alpha", "expected"), [(0.0, 1.0), (1.0, 7.0)])
def test_monte_carlo_is_exact_at_the_extremes(alpha, expected):
    mean, error = monte_carlo_tokens_per_step(alpha, 6, 2_000, np.random.default_rng(0))
    assert (mean, error) == (expected, 0.0)


def test_table_and_figure():
    table = tokens_per_step_table(alphas=(0.6, 0.9), ks=(1, 5))
    assert table.to_numpy()[1, 1] == pytest.approx(expected_tokens_per_step(0.9, 5))
    assert list(table.index) == [0.6, 0.9]
    assert list(table.columns) == [1, 5]
    assert table.shape == (2, 2)
    figure = tokens_per_step_figure(table)
    assert isinstance(figure, Figure)
    assert len(figure.axes[0].lines) == 2 + 2  # one curve and one asymptote per alpha
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    assert buffer.getvalue().startswith(b"\x89PNG")


@pytest.fixture(scope="module")
def lesson():
    return lesson_comparison(num_steps=20_000, seed=0)


def _row(lesson, claim_start, quantity_start):
    (row,) = [
        r
        for r in lesson.rows
        if r.claim.startswith(claim_start) and r.quantity.startswith(quantity_start)
    ]
    return row


def test_lesson_formula_values(lesson):
    # The values the formula gives for the lesson's claims, to the rounding they are quoted with.
    assert _row(lesson, "alpha 0.8", "optimal k").formula == 8
    assert round(_row(lesson, "alpha 0.8", "speedup at optimum").formula, 1) == 3.1
    assert round(_row(lesson, "k 5", "tokens/step, alpha 0.6").formula, 2) == 2.38
    assert round(_row(lesson, "k 5", "tokens/step, alpha 0.9").formula, 2) == 4.69
    assert _row(lesson, "alpha 0.95", "optimal k").formula == 31
    assert round(_row(lesson, "alpha 0.95", "speedup at optimum").formula) == 10
    assert round(_row(lesson, "alpha 0.95", "speedup at k=10").formula, 1) == 7.2


def test_lesson_simulation_agrees_with_the_formula(lesson):
    for row in lesson.rows:
        if row.simulation_std_error is not None:
            assert abs(row.simulation - row.formula) < 4.5 * row.simulation_std_error
        else:
            # The optimum is flat: the simulated argmax must be as good as the formula's to 1%.
            formula_best = speedup(row.alpha, int(row.formula), row.c)
            assert speedup(row.alpha, int(row.simulation), row.c) > 0.99 * formula_best


def test_lesson_report_serialises_and_is_deterministic(lesson):
    assert json.loads(json.dumps(lesson.to_dict()))["rows"][0]["lesson"] == "5-7"
    assert "optimal k" in lesson.format_text()
    assert lesson_comparison(num_steps=500, seed=4) == lesson_comparison(num_steps=500, seed=4)


@pytest.mark.parametrize(
    "call",
    [
        lambda: expected_tokens_per_step(1.2, 3),
        lambda: expected_tokens_per_step(0.5, -1),
        lambda: time_per_token(0.5, 3, -0.1),
        lambda: optimal_k(0.5, 0.1, k_max=0),
        lambda: monte_carlo_tokens_per_step(0.5, 3, 0, np.random.default_rng(0)),
    ],
)
def test_invalid_arguments_are_rejected(call):
    with pytest.raises(ScenarioError):
        call()
