"""Tests of the chain speculative sampler: invariants, exactness of one step, the broken control."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.stats import chisquare

from sim.errors import ScenarioError
from sim.theory.chain_sampling import (
    draft_chain_tokens,
    residual_distribution,
    sample_categorical,
    speculative_chain_step,
)

TARGET = np.array([0.1, 0.2, 0.3, 0.4])
DRAFT = np.array([0.5, 0.3, 0.2, 0.0])

weights = arrays(np.float64, 6, elements=st.floats(0.0, 1.0)).filter(lambda w: w.sum() > 1e-3)


def _step(draft_row, target_row, batch, k, seed, **kwargs):
    rng = np.random.default_rng(seed)
    draft_prob = np.broadcast_to(draft_row, (batch, k, draft_row.size))
    target_prob = np.broadcast_to(target_row, (batch, k + 1, target_row.size))
    tokens = draft_chain_tokens(draft_prob, rng)
    return tokens, speculative_chain_step(tokens, draft_prob, target_prob, rng, **kwargs)


@given(weights, weights)
def test_residual_is_a_distribution_supported_where_target_exceeds_draft(target_w, draft_w):
    target, draft = target_w / target_w.sum(), draft_w / draft_w.sum()
    residual = residual_distribution(target, draft)
    assert np.all(residual >= 0.0)
    assert residual.sum() == pytest.approx(1.0)
    if np.any(target > draft):
        assert np.all(residual[target <= draft] == 0.0)


def test_residual_of_equal_distributions_falls_back_to_target():
    assert np.array_equal(residual_distribution(TARGET, TARGET), TARGET)


@settings(max_examples=30)
@given(weights, st.integers(0, 2**32 - 1))
def test_sample_categorical_never_picks_a_zero_weight(weight, seed):
    drawn = sample_categorical(np.tile(weight, (200, 1)), np.random.default_rng(seed))
    assert np.all(weight[drawn] > 0.0)


def test_sample_categorical_matches_its_weights():
    drawn = sample_categorical(np.tile(TARGET * 3.0, (40_000, 1)), np.random.default_rng(1))
    counts = np.bincount(drawn, minlength=4)
    assert chisquare(counts, TARGET * drawn.size).pvalue > 1e-4


def test_sample_categorical_rejects_an_empty_row():
    with pytest.raises(ScenarioError):
        sample_categorical(np.zeros((2, 3)), np.random.default_rng(0))


@settings(max_examples=25, deadline=None)
@given(weights, weights, st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_step_invariants(target_w, draft_w, k, seed):
    tokens, result = _step(draft_w / draft_w.sum(), target_w / target_w.sum(), 64, k, seed)
    assert np.all((result.num_accepted_tokens >= 0) & (result.num_accepted_tokens <= k))
    assert np.array_equal(result.num_emitted_tokens, result.num_accepted_tokens + 1)
    assert np.array_equal(result.emitted_mask.sum(axis=1), result.num_emitted_tokens)
    assert result.accepted_histogram().sum() == 64
    # Accepted drafts are emitted unchanged, in order.
    for row in range(64):
        n = result.num_accepted_tokens[row]
        assert np.array_equal(result.emitted_tokens[row, :n], tokens[row, :n])
    # No emitted token is impossible under the target.
    assert np.all(target_w[result.emitted_tokens[result.emitted_mask]] > 0.0)


def test_identical_draft_is_always_accepted():
    _, result = _step(TARGET, TARGET, 500, 5, seed=2)
    assert np.all(result.num_accepted_tokens == 5)


def test_disjoint_draft_is_always_rejected_and_target_decides():
    draft = np.array([0.0, 0.0, 0.5, 0.5])
    target = np.array([0.5, 0.5, 0.0, 0.0])
    _, result = _step(draft, target, 500, 3, seed=3)
    assert np.all(result.num_accepted_tokens == 0)
    assert np.all(np.isin(result.emitted_tokens[:, 0], [0, 1]))


def test_first_emitted_token_is_distributed_as_the_target():
    _, result = _step(DRAFT, TARGET, 40_000, 1, seed=4)
    counts = np.bincount(result.emitted_tokens[:, 0], minlength=4)
    assert chisquare(counts, TARGET * counts.sum()).pvalue > 1e-4


def test_first_draft_is_accepted_with_probability_sum_of_min():
    # P(accept) = sum_x q(x) min(1, p(x)/q(x)) = sum_x min(p(x), q(x)) (Leviathan et al., Sec. 3).
    _, result = _step(DRAFT, TARGET, 40_000, 1, seed=5)
    overlap = np.minimum(DRAFT, TARGET).sum()
    rate = result.num_accepted_tokens.mean()
    assert abs(rate - overlap) < 5.0 * np.sqrt(overlap * (1 - overlap) / 40_000)


def test_broken_residual_gives_its_known_wrong_distribution():
    # Resampling the target on rejection emits min(p, q) + beta * p instead of p.
    _, result = _step(DRAFT, TARGET, 40_000, 1, seed=6, broken_residual=True)
    counts = np.bincount(result.emitted_tokens[:, 0], minlength=4)
    beta = 1.0 - np.minimum(DRAFT, TARGET).sum()
    wrong = np.minimum(DRAFT, TARGET) + beta * TARGET
    assert chisquare(counts, wrong * counts.sum()).pvalue > 1e-4
    assert chisquare(counts, TARGET * counts.sum()).pvalue < 1e-6


def test_same_seed_same_result():
    first = _step(DRAFT, TARGET, 100, 4, seed=7)[1]
    second = _step(DRAFT, TARGET, 100, 4, seed=7)[1]
    assert np.array_equal(first.emitted_tokens, second.emitted_tokens)


def test_shape_mismatch_is_rejected():
    rng = np.random.default_rng(0)
    with pytest.raises(ScenarioError, match="k\\+1"):
        speculative_chain_step(
            np.zeros((2, 3), dtype=int), np.full((2, 3, 4), 0.25), np.full((2, 3, 4), 0.25), rng
        )


def test_a_token_the_draft_could_not_propose_is_rejected():
    draft_prob = np.broadcast_to(DRAFT, (1, 1, 4))
    target_prob = np.broadcast_to(TARGET, (1, 2, 4))
    with pytest.raises(ScenarioError, match="draft_prob 0"):
        speculative_chain_step(np.array([[3]]), draft_prob, target_prob, np.random.default_rng(0))
