"""Tests of the lossless check: it passes for the exact samplers and catches the broken residual."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from sim.errors import ScenarioError
from sim.theory.lossless_check import homogeneity_test, run_lossless_check
from sim.theory.markov_model import markov_pair


@pytest.fixture(scope="module")
def exact_report():
    return run_lossless_check(samples=50_000, seed=0)


@pytest.fixture(scope="module")
def broken_report():
    return run_lossless_check(samples=50_000, seed=0, broken_residual=True)


def test_exact_samplers_pass(exact_report):
    assert [check.sampler for check in exact_report.checks] == ["chain", "tree", "dynamic"]
    assert exact_report.passed
    for check in exact_report.checks:
        assert all(test.dof == test.num_cells - 1 for test in check.tests)


def test_broken_residual_is_caught_for_chain_and_trees(broken_report):
    assert not broken_report.passed
    for check in broken_report.checks:
        assert not check.passed
        assert check.min_p_value < 1e-6


def test_acceptance_is_partial_so_the_residual_is_exercised(exact_report):
    # A draft accepted always or never would leave the residual untested.
    assert 0.3 < exact_report.target_acceptance_rate < 0.9
    chain, tree, dynamic = exact_report.checks
    assert 0.0 < chain.mean_accepted_tokens_per_step < exact_report.k
    assert 0.0 < tree.mean_accepted_tokens_per_step < len(exact_report.tree_widths)
    assert 0.0 < dynamic.mean_accepted_tokens_per_step < exact_report.dynamic_tree[1]


def test_same_seed_same_report():
    first = run_lossless_check(samples=2_000, seed=3)
    second = run_lossless_check(samples=2_000, seed=3)
    assert replace(first, wall_time_s=0.0) == replace(second, wall_time_s=0.0)


def test_report_serialises_and_prints(exact_report):
    as_dict = json.loads(json.dumps(exact_report.to_dict()))
    assert as_dict["passed"] is True
    assert len(as_dict["checks"][1]["tests"]) == 3
    text = exact_report.format_text()
    assert "chain   PASS" in text
    assert "tree    PASS" in text
    assert "dynamic PASS" in text


def test_identical_samples_are_homogeneous():
    cells = np.arange(1_000) % 4
    result = homogeneity_test("x", cells, cells, np.full(4, 0.25), 1_000)
    assert result.statistic == pytest.approx(0.0)
    assert result.p_value == pytest.approx(1.0)


def test_rare_cells_are_pooled():
    cells = np.array([0, 1] * 499 + [2, 3])
    result = homogeneity_test("x", cells, cells, np.array([0.499, 0.499, 0.001, 0.001]), 1_000)
    assert result.num_cells == 3


def test_synthetic_model_rows_are_distributions():
    pair = markov_pair(12)
    assert np.allclose(pair.target_prob.sum(axis=1), 1.0)
    assert np.allclose(pair.draft_prob.sum(axis=1), 1.0)
    assert np.all(pair.target_prob > 0.0)


@pytest.mark.parametrize(
    "kwargs",
    [{"samples": 10}, {"vocab_size": 2}, {"k": 0}, {"significance_level": 1.5}],
)
def test_invalid_arguments_are_rejected(kwargs):
    with pytest.raises(ScenarioError):
        run_lossless_check(**kwargs)
