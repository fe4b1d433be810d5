"""Tests of the tree speculative sampler: tree layout, invariants, exactness, the broken control."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from sim.errors import ScenarioError
from sim.theory.tree_sampling import StaticTree, draft_tree_tokens, speculative_tree_step

TARGET = np.array([0.1, 0.2, 0.3, 0.4])
DRAFT = np.array([0.5, 0.3, 0.2, 0.0])
tree_widths = st.lists(st.integers(1, 3), min_size=1, max_size=4)


def _step(tree, draft_row, target_row, batch, seed, **kwargs):
    rng = np.random.default_rng(seed)
    vocab = draft_row.size
    tokens = draft_tree_tokens(
        tree,
        np.zeros(batch, dtype=np.int64),
        lambda parents: np.broadcast_to(draft_row, (*parents.shape, vocab)),
        rng,
    )
    draft_prob = np.broadcast_to(draft_row, (batch, tree.num_internal_positions, vocab))
    target_prob = np.broadcast_to(target_row, (batch, tree.num_positions, vocab))
    return tokens, speculative_tree_step(tree, tokens, draft_prob, target_prob, rng, **kwargs)


def test_two_two_two_tree_has_fourteen_drafts_and_eight_paths():
    tree = StaticTree.from_widths([2, 2, 2])
    assert (tree.num_positions, tree.num_draft_tokens, tree.num_paths) == (15, 14, 8)
    assert tree.num_internal_positions == 7


@given(tree_widths)
def test_children_partition_the_non_root_positions(widths):
    tree = StaticTree.from_widths(widths)
    children = []
    for depth, width in enumerate(tree.widths):
        start = tree.first_position_at_depth(depth)
        nodes = np.arange(start, start + tree.num_nodes_at_depth(depth))
        first = tree.first_child_position(nodes, depth)
        children.extend((first[:, None] + np.arange(width)[None, :]).ravel().tolist())
    assert sorted(children) == list(range(1, tree.num_positions))
    assert tree.num_paths == int(np.prod(widths))


@pytest.mark.parametrize("widths", [[], [2, 0]])
def test_bad_widths_are_rejected(widths):
    with pytest.raises(ScenarioError):
        StaticTree.from_widths(widths)


@settings(max_examples=20, deadline=None)
@given(tree_widths, st.integers(0, 2**32 - 1))
def test_emitted_prefix_is_a_root_to_leaf_path(widths, seed):
    tree = StaticTree.from_widths(widths)
    tokens, result = _step(tree, DRAFT, TARGET, 64, seed)
    assert np.all(result.num_accepted_tokens <= tree.depth)
    assert np.array_equal(result.emitted_mask.sum(axis=1), result.num_emitted_tokens)
    for row in range(64):
        node = np.array([0])
        for depth in range(result.num_accepted_tokens[row]):
            first = int(tree.first_child_position(node, depth)[0])
            siblings = tokens[row, first : first + tree.widths[depth]]
            hits = np.flatnonzero(siblings == result.emitted_tokens[row, depth])
            assert hits.size > 0
            node = np.array([first + hits[0]])
    assert np.all(TARGET[result.emitted_tokens[result.emitted_mask]] > 0.0)


def test_identical_draft_accepts_the_first_child_at_every_depth():
    tree = StaticTree.from_widths([2, 2, 2])
    tokens, result = _step(tree, TARGET, TARGET, 300, seed=1)
    assert np.all(result.num_accepted_tokens == 3)
    assert np.array_equal(result.emitted_tokens[:, :3], tokens[:, [1, 3, 7]])


def test_disjoint_draft_is_always_rejected_and_target_decides():
    tree = StaticTree.from_widths([3, 2])
    draft = np.array([0.0, 0.0, 0.5, 0.5])
    target = np.array([0.5, 0.5, 0.0, 0.0])
    _, result = _step(tree, draft, target, 300, seed=2)
    assert np.all(result.num_accepted_tokens == 0)
    assert np.all(np.isin(result.emitted_tokens[:, 0], [0, 1]))


def _exact_rejection_probability(target, draft, width):
    # All of `width` i.i.d. candidates rejected: product of the residual masses sum(max(p - q, 0)).
    probability, current = 1.0, target.copy()
    for _ in range(width):
        residual = np.maximum(current - draft, 0.0)
        probability *= residual.sum()
        current = residual / residual.sum()
    return probability


def test_first_token_is_the_target_and_rejection_rate_is_exact():
    tree = StaticTree.from_widths([3])
    _, result = _step(tree, DRAFT, TARGET, 40_000, seed=3)
    counts = np.bincount(result.emitted_tokens[:, 0], minlength=4)
    assert chisquare(counts, TARGET * counts.sum()).pvalue > 1e-4
    rejected = _exact_rejection_probability(TARGET, DRAFT, 3)
    observed = np.mean(result.num_accepted_tokens == 0)
    assert abs(observed - rejected) < 5.0 * np.sqrt(rejected * (1 - rejected) / 40_000)
    # More candidates can only reject less often than one.
    assert rejected < 1.0 - np.minimum(TARGET, DRAFT).sum()


def test_broken_residual_gives_its_known_wrong_distribution():
    # Without residuals each of w candidates is accepted with alpha = sum(min(p, q)), emitting
    # min(p, q) / alpha; all rejected (probability (1 - alpha)^w) emits from p.
    tree = StaticTree.from_widths([2])
    _, result = _step(tree, DRAFT, TARGET, 40_000, seed=4, broken_residual=True)
    counts = np.bincount(result.emitted_tokens[:, 0], minlength=4)
    overlap = np.minimum(DRAFT, TARGET)
    all_rejected = (1.0 - overlap.sum()) ** 2
    wrong = (1.0 - all_rejected) * overlap / overlap.sum() + all_rejected * TARGET
    assert chisquare(counts, wrong * counts.sum()).pvalue > 1e-4
    assert chisquare(counts, TARGET * counts.sum()).pvalue < 1e-6


def test_same_seed_same_result():
    tree = StaticTree.from_widths([2, 2, 2])
    first = _step(tree, DRAFT, TARGET, 200, seed=5)[1]
    second = _step(tree, DRAFT, TARGET, 200, seed=5)[1]
    assert np.array_equal(first.emitted_tokens, second.emitted_tokens)


def test_shape_mismatch_is_rejected():
    tree = StaticTree.from_widths([2, 2])
    with pytest.raises(ScenarioError, match="tree_tokens"):
        speculative_tree_step(
            tree,
            np.zeros((2, 5), dtype=np.int64),
            np.full((2, 3, 4), 0.25),
            np.full((2, 6, 4), 0.25),
            np.random.default_rng(0),
        )


# --- EAGLE-2 dynamic trees: shapes chosen per row and step by the draft's confidence ----------


@pytest.mark.parametrize("dynamic_tree", [(1, 3, 4), (2, 4, 7), (4, 2, 10), (3, 5, 12)])
def test_dynamic_tree_sampler_is_lossless_for_each_shape_rule(
    dynamic_tree: tuple[int, int, int],
) -> None:
    """Chains (topk 1), deep-narrow, shallow-wide and budget-cut trees: the tokens after random
    contexts match direct sampling of the target (chi-square, as the lossless check)."""
    from sim.theory.lossless_check import run_lossless_check

    report = run_lossless_check(samples=20_000, seed=1, dynamic_tree=dynamic_tree)
    dynamic = report.checks[2]
    assert dynamic.sampler == "dynamic" and dynamic.passed, dynamic.tests


def test_dynamic_tree_shapes_differ_between_rows_and_keep_the_budget() -> None:
    from sim.theory.markov_model import markov_pair
    from sim.theory.tree_sampling import draft_dynamic_tree

    pair = markov_pair(12)
    roots = np.arange(12)
    tree = draft_dynamic_tree(3, 4, 9, roots, lambda tokens: pair.draft_prob[tokens])
    assert tree.tokens.shape == (12, 9)  # the root and num_draft_tokens - 1 drafts in every row
    assert np.all(tree.parents[:, 1:] < np.arange(1, 9))  # parents precede children
    assert len({tuple(row) for row in tree.parents.tolist()}) > 1  # shapes follow the draft
    # Siblings are distinct tokens (chosen, not sampled).
    for parents, tokens in zip(tree.parents, tree.tokens, strict=True):
        for node in range(9):
            children = tokens[parents == node]
            assert len(set(children.tolist())) == children.size
