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

    return _bonus_and_result(tree.depth, emitted, num_accepted, active, node, target_prob, rng)


def _bonus_and_result(
    depth: int,
    emitted: np.ndarray,
    num_accepted: np.ndarray,
    active: np.ndarray,
    node: np.ndarray,
    target_prob: np.ndarray,
    rng: np.random.Generator,
) -> TreeStepResult:
    """End of a tree walk: rows still ``active`` accepted a leaf at ``depth``, and the target's
    distribution after it gives their bonus token."""
    leaf_rows = np.flatnonzero(active)
    if leaf_rows.size:
        emitted[leaf_rows, depth] = sample_categorical(target_prob[leaf_rows, node[leaf_rows]], rng)
    emitted_mask = np.arange(depth + 1)[None, :] <= num_accepted[:, None]
    return TreeStepResult(
        num_accepted_tokens=num_accepted,
        num_emitted_tokens=num_accepted + 1,
        emitted_tokens=emitted,
        emitted_mask=emitted_mask,
    )


@dataclass(frozen=True, slots=True)
class DraftedTree:
    """Draft trees whose shape differs per row (EAGLE-2's dynamic trees): ``num_positions``
    positions per row, position 0 the root; ``parents[b, i] < i`` (−1 for the root) and
    ``tokens[b, i]``. The children of a node are distinct tokens, in descending draft
    probability."""

    parents: np.ndarray
    tokens: np.ndarray
    depth: int


def draft_dynamic_tree(
    topk: int,
    num_steps: int,
    num_draft_tokens: int,
    root_tokens: np.ndarray,
    draft_prob_after: Callable[[np.ndarray], np.ndarray],
) -> DraftedTree:
    """EAGLE-2's expansion and rerank (Li et al. 2024, arXiv:2406.16858, §4) from the draft's
    own probabilities, per row: level 1 is the root's ``topk`` most probable tokens; each later
    level expands the ``topk`` nodes of the newest level with the highest path probability (the
    product along the path) into their ``topk`` most probable tokens; the ``num_draft_tokens − 1``
    candidates of highest path probability are kept (SGLang's ``organize_draft_results``). The
    candidates are chosen, not sampled, so verification must use :func:`verify_drafted_tree`.

    Raise ScenarioError if ``topk`` exceeds the vocabulary or a count is below one.
    """
    if root_tokens.ndim != 1:
        raise ScenarioError(f"root_tokens must be [batch], got shape {root_tokens.shape}")
    batch = root_tokens.size
    rows = np.arange(batch)[:, None]
    first = draft_prob_after(root_tokens[:, None])[:, 0]
    if not 1 <= topk <= first.shape[-1] or num_steps < 1 or num_draft_tokens < 2:
        raise ScenarioError(
            f"draft_dynamic_tree: need 1 <= topk <= vocab, num_steps >= 1 and num_draft_tokens "
            f">= 2, got {topk}, {num_steps}, {num_draft_tokens}"
        )
    order = np.argsort(-first, axis=-1, kind="stable")[:, :topk]
    tokens, scores = [order], [np.take_along_axis(first, order, axis=-1)]
    parents = [np.full((batch, topk), -1, dtype=np.int64)]  # candidate index of the parent
    offset = topk
    level_start = 0
    for _ in range(1, num_steps):
        current = scores[-1]
        width = min(topk, current.shape[1])
        chosen = np.argsort(-current, axis=1, kind="stable")[:, :width]
        probs = draft_prob_after(np.take_along_axis(tokens[-1], chosen, axis=1))
        child = np.argsort(-probs, axis=-1, kind="stable")[..., :topk]
        child_prob = np.take_along_axis(probs, child, axis=-1)
        parent_score = np.take_along_axis(current, chosen, axis=1)[..., None]
        tokens.append(child.reshape(batch, -1))
        scores.append((parent_score * child_prob).reshape(batch, -1))
        parents.append(np.repeat(level_start + chosen, topk, axis=1))
        level_start = offset
        offset += width * topk
    all_tokens = np.concatenate(tokens, axis=1)
    all_scores = np.concatenate(scores, axis=1)
    all_parents = np.concatenate(parents, axis=1)
    keep = min(num_draft_tokens - 1, all_scores.shape[1])
    kept = np.sort(np.argsort(-all_scores, axis=1, kind="stable")[:, :keep], axis=1)
    # Position of each kept candidate (root = 0); a parent always scores at least its child.
    position = np.full(all_scores.shape, -1, dtype=np.int64)
    position[rows, kept] = np.arange(1, keep + 1)
    parent_candidate = all_parents[rows, kept]
    parent_position = np.where(
        parent_candidate < 0, 0, position[rows, np.maximum(parent_candidate, 0)]
    )
    if np.any(parent_position < 0):
        raise ScenarioError("draft_dynamic_tree: a kept node's parent was not kept")
    out_parents = np.concatenate((np.full((batch, 1), -1), parent_position), axis=1)
    out_tokens = np.concatenate((root_tokens[:, None], all_tokens[rows, kept]), axis=1)
    depth = np.zeros(out_parents.shape, dtype=np.int64)
    for i in range(1, keep + 1):
        depth[:, i] = depth[np.arange(batch), out_parents[:, i]] + 1
    return DraftedTree(out_parents, out_tokens, int(depth.max()))


def verify_drafted_tree(
    tree: DraftedTree,
    target_prob: np.ndarray,
    rng: np.random.Generator,
    *,
    broken_residual: bool = False,
) -> TreeStepResult:
    """Verify chosen (not sampled) candidates against one target pass: at each node try the
    children in order; accept token ``x`` with probability ``p(x)`` under the current residual
    target ``p`` (the rule above with the draft a point mass on ``x``:
    ``min(1, p(x) / 1)``); on rejection ``p <- normalize(p with x removed)``; when every child is
    rejected emit one token from ``p``; after an accepted leaf, a bonus token. Lossless for any
    tree the draft builds, since the shape does not read the target (SGLang's
    ``tree_speculative_sampling_target_only`` verifies EAGLE-2 trees this way).

    ``broken_residual=True`` (negative control) never removes a rejected token.
    ``target_prob`` is ``[batch, num_positions, vocab]``.
    """
    batch = tree.tokens.shape[0]
    node = np.zeros(batch, dtype=np.int64)
    active = np.ones(batch, dtype=bool)
    num_accepted = np.zeros(batch, dtype=np.int64)
    emitted = np.zeros((batch, tree.depth + 1), dtype=np.int64)
    for level in range(tree.depth):
        rows = np.flatnonzero(active)
        if rows.size == 0:
            break
        current = target_prob[rows, node[rows]].copy()
        is_child = tree.parents[rows] == node[rows][:, None]
        rank = np.cumsum(is_child, axis=1)
        undecided = np.ones(rows.size, dtype=bool)
        chosen = np.zeros(rows.size, dtype=np.int64)
        for slot in range(1, int(is_child.sum(axis=1).max(initial=0)) + 1):
            has = is_child & (rank == slot)
            trying = undecided & has.any(axis=1)
            position = has.argmax(axis=1)
            token = tree.tokens[rows, position]
            accept = trying & (rng.random(rows.size) < current[np.arange(rows.size), token])
            chosen[accept] = position[accept]
            undecided &= ~accept
            rejected = trying & ~accept
            if not broken_residual and np.any(rejected):
                local = np.flatnonzero(rejected)
                current[local, token[local]] = 0.0
                current[local] /= current[local].sum(axis=1, keepdims=True)
        accepted_rows = rows[~undecided]
        emitted[accepted_rows, level] = tree.tokens[accepted_rows, chosen[~undecided]]
        node[accepted_rows] = chosen[~undecided]
        num_accepted[accepted_rows] += 1
        stopped = rows[undecided]
        if stopped.size:
            emitted[stopped, level] = sample_categorical(current[undecided], rng)
            active[stopped] = False
    return _bonus_and_result(tree.depth, emitted, num_accepted, active, node, target_prob, rng)
