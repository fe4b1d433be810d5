"""Exact speculative sampling over a static tree of draft tokens, verified in one target pass.

Each node of the tree has ``widths[depth]`` children drawn i.i.d. from the draft distribution at
that node (e.g. ``widths = (2, 2, 2)``: 14 draft tokens, 8 root-to-leaf paths). The verifier walks
down from the root with the multi-step speculative sampling of SpecInfer (Miao et al., "SpecInfer:
Accelerating Large Language Model Serving with Tree-based Speculative Inference and Verification",
arXiv:2305.09781, Algorithm "VerifyStochastic"): try the children in order; accept child ``x`` with
``min(1, target_prob(x) / draft_prob(x))`` against the current residual target; on rejection replace
the target by ``normalize(max(target_prob - draft_prob, 0))`` and keep ``draft_prob`` unchanged (the
candidates are independent draws from it); when every child is rejected emit one token from the last
residual; when a leaf is accepted emit a bonus token from the target at that leaf.

Why it is lossless: let ``p`` be the current target and ``x ~ q`` independent of everything tried
before. One trial emits ``y`` directly with probability ``q(y) min(1, p(y)/q(y)) = min(p(y), q(y))``
and is rejected with probability ``beta = sum(max(p - q, 0))``; the rest of the procedure emits from
``max(p - q, 0) / beta`` by induction (the last step samples that residual outright), so the total
is ``min(p, q) + max(p - q, 0) = p``. Accepting a child hands over to the same procedure one level
down, whose children were drawn from the draft given that child, so the whole path is distributed as
the target. Without i.i.d. candidates (e.g. drawn without replacement) ``q`` would have to be
updated too.

Layout: tree positions are numbered breadth first, position 0 being the root (the last accepted
token, which the target pass also reads). ``tree_tokens`` is ``[batch, num_positions]`` (column 0
the root), ``target_prob`` is ``[batch, num_positions, vocab]`` (the target's next-token
distribution after each position), ``draft_prob`` is ``[batch, num_internal_positions, vocab]`` (the
distribution the children of each non-leaf position were drawn from; non-leaf positions come first).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from sim.errors import ScenarioError
from sim.theory.chain_sampling import residual_distribution, sample_categorical


@dataclass(frozen=True, slots=True)
class StaticTree:
    """A draft tree in which every node at depth ``d`` has ``widths[d]`` children.

    Raise ScenarioError if ``widths`` is empty or a width is below one.
    """

    widths: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.widths) == 0 or any(int(w) < 1 for w in self.widths):
            raise ScenarioError(
                f"tree widths must be a non-empty list of ints >= 1, got {self.widths}"
            )

    @classmethod
    def from_widths(cls, widths: Sequence[int]) -> StaticTree:
        """A tree from a list of per-depth widths such as ``[2, 2, 2]``."""
        return cls(tuple(int(w) for w in widths))

    @property
    def depth(self) -> int:
        """Draft tokens on each root-to-leaf path."""
        return len(self.widths)

    def num_nodes_at_depth(self, depth: int) -> int:
        """Positions at ``depth`` (the root is depth 0)."""
        return int(np.prod(self.widths[:depth], dtype=np.int64))

    def first_position_at_depth(self, depth: int) -> int:
        """The breadth-first number of the first position at ``depth``."""
        return sum(self.num_nodes_at_depth(d) for d in range(depth))

    @property
    def num_positions(self) -> int:
        """Root plus draft tokens: the tokens the target reads in its one verification pass."""
        return self.first_position_at_depth(self.depth + 1)

    @property
    def num_draft_tokens(self) -> int:
        """Draft tokens in the tree (positions other than the root)."""
        return self.num_positions - 1

    @property
    def num_internal_positions(self) -> int:
        """Positions that have children, which all come before the leaves."""
        return self.first_position_at_depth(self.depth)

    @property
    def num_paths(self) -> int:
        """Root-to-leaf paths, i.e. candidate continuations."""
        return self.num_nodes_at_depth(self.depth)

    def first_child_position(self, position: np.ndarray, depth: int) -> np.ndarray:
        """The first child of each ``position`` lying at ``depth``; its siblings follow it."""
        local = position - self.first_position_at_depth(depth)
        return self.first_position_at_depth(depth + 1) + local * self.widths[depth]


@dataclass(frozen=True, slots=True)
class TreeStepResult:
    """What one tree verification produced, per batch row.

    ``num_accepted_tokens`` counts accepted draft tokens along the chosen path (bonus excluded);
    ``num_emitted_tokens`` is that plus one. ``emitted_tokens[b, :num_emitted_tokens[b]]`` are the
    tokens appended to row ``b``; ``emitted_mask`` marks them.
    """

    num_accepted_tokens: np.ndarray
    num_emitted_tokens: np.ndarray
    emitted_tokens: np.ndarray
    emitted_mask: np.ndarray


def draft_tree_tokens(
    tree: StaticTree,
    root_tokens: np.ndarray,
    draft_prob_after: Callable[[np.ndarray], np.ndarray],
    rng: np.random.Generator,
) -> np.ndarray:
    """Draft a tree depth by depth: the children of a node are i.i.d. draws given that node's token.

    ``draft_prob_after(tokens)`` maps ``[batch, n]`` node tokens to ``[batch, n, vocab]`` draft
    distributions of the next token (a context-free draft simply ignores its argument's values).
    Returns ``tree_tokens`` ``[batch, num_positions]`` with the roots in column 0. Raise
    ScenarioError if ``root_tokens`` is not one-dimensional.
    """
    if root_tokens.ndim != 1:
        raise ScenarioError(f"root_tokens must be [batch], got shape {root_tokens.shape}")
    tokens = np.zeros((root_tokens.size, tree.num_positions), dtype=np.int64)
    tokens[:, 0] = root_tokens
    for depth, width in enumerate(tree.widths):
        start = tree.first_position_at_depth(depth)
        parents = tokens[:, start : start + tree.num_nodes_at_depth(depth)]
        children = sample_categorical(draft_prob_after(np.repeat(parents, width, axis=1)), rng)
        child_start = tree.first_position_at_depth(depth + 1)
        tokens[:, child_start : child_start + children.shape[1]] = children
    return tokens


def speculative_tree_step(
    tree: StaticTree,
    tree_tokens: np.ndarray,
    draft_prob: np.ndarray,
    target_prob: np.ndarray,
    rng: np.random.Generator,
    *,
    broken_residual: bool = False,
) -> TreeStepResult:
    """Verify a batch of draft trees against one target pass and return what each row emits.

    ``broken_residual=True`` is a deliberately wrong variant kept as a negative control: it never
    forms the residual, testing every child against ``target_prob`` and sampling ``target_prob``
    when all children are rejected; the lossless check must catch it. Raise ScenarioError if the
    array shapes do not match ``tree`` or a drafted token has zero draft probability.
    """
    batch = tree_tokens.shape[0]
    vocab = target_prob.shape[-1]
    if (
        tree_tokens.shape != (batch, tree.num_positions)
        or target_prob.shape != (batch, tree.num_positions, vocab)
        or draft_prob.shape != (batch, tree.num_internal_positions, vocab)
    ):
        raise ScenarioError(
            f"speculative_tree_step: tree {list(tree.widths)} needs tree_tokens [batch, "
            f"{tree.num_positions}], target_prob [batch, {tree.num_positions}, vocab], draft_prob "
            f"[batch, {tree.num_internal_positions}, vocab]; got {tree_tokens.shape}, "
            f"{target_prob.shape}, {draft_prob.shape}"
        )
    node = np.zeros(batch, dtype=np.int64)
    active = np.ones(batch, dtype=bool)
    num_accepted = np.zeros(batch, dtype=np.int64)
    emitted = np.zeros((batch, tree.depth + 1), dtype=np.int64)

    for depth, width in enumerate(tree.widths):
        rows = np.flatnonzero(active)
        if rows.size == 0:
            break
        local = np.arange(rows.size)
        current_target = target_prob[rows, node[rows]]
        draft = draft_prob[rows, node[rows]]
        first_child = tree.first_child_position(node[rows], depth)
        undecided = np.ones(rows.size, dtype=bool)
        chosen_child = first_child.copy()
        for sibling in range(width):
            child = first_child + sibling
            token = tree_tokens[rows, child]
            draft_prob_of_token = draft[local, token]
            if np.any(draft_prob_of_token[undecided] <= 0.0):
                raise ScenarioError("speculative_tree_step: a draft token has draft_prob 0")
            # Accept with min(1, target_prob / draft_prob) against the current residual target.
            uniform = rng.random(rows.size)
            accept = undecided & (uniform * draft_prob_of_token < current_target[local, token])
            chosen_child[accept] = child[accept]
            undecided &= ~accept
            if not broken_residual and np.any(undecided):
                # Rejected: p <- normalize(max(p - q, 0)); q is unchanged for i.i.d. candidates.
                current_target[undecided] = residual_distribution(
                    current_target[undecided], draft[undecided]
                )
        accepted_rows = rows[~undecided]
        emitted[accepted_rows, depth] = tree_tokens[accepted_rows, chosen_child[~undecided]]
        node[accepted_rows] = chosen_child[~undecided]
        num_accepted[accepted_rows] += 1
        rejected_rows = rows[undecided]
        if rejected_rows.size:
            # All children rejected: one token from the final residual ends this row's step.
            emitted[rejected_rows, depth] = sample_categorical(current_target[undecided], rng)
            active[rejected_rows] = False

    leaf_rows = np.flatnonzero(active)
    if leaf_rows.size:
        # A leaf was accepted: the target's distribution after it gives the bonus token.
        emitted[leaf_rows, tree.depth] = sample_categorical(
            target_prob[leaf_rows, node[leaf_rows]], rng
        )

    emitted_mask = np.arange(tree.depth + 1)[None, :] <= num_accepted[:, None]
    return TreeStepResult(
        num_accepted_tokens=num_accepted,
        num_emitted_tokens=num_accepted + 1,
        emitted_tokens=emitted,
        emitted_mask=emitted_mask,
    )
