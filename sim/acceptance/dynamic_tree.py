"""EAGLE-2 dynamic draft trees: built per sequence and step from the draft's own confidence.

EAGLE-2 (Li et al. 2024, arXiv:2406.16858, §4) grows the tree where the draft is confident. Its
expansion phase runs ``num_steps`` draft forwards: the first gives the root's ``topk`` children;
each later forward expands the ``topk`` nodes of the newest level with the highest *path
confidence* (the product of the draft probabilities along the path from the root), each into its
own ``topk`` children. The rerank phase keeps the ``num_draft_tokens - 1`` nodes with the highest
path confidence among all ``topk + (num_steps - 1) · topk²`` candidates (a child never scores above
its parent, so the kept set is a tree) and the target verifies them with the root in one pass.
The parameters are SGLang's (``--speculative-num-steps``, ``--speculative-eagle-topk``,
``--speculative-num-draft-tokens``, the root counted; ``organize_draft_results`` in
``python/sglang/srt/speculative/eagle_utils.py`` takes ``num_draft_token - 1`` candidates). The
EAGLE-2 paper's "total tokens 60, depth 6, top-k 10" are 60 drafts over 6 draft levels, i.e.
``num_draft_tokens = 61, num_steps = 6`` here (its code: ``total_token`` drafts plus the root,
``depth + 1`` levels).

**The confidence model.** What the dynamic tree needs is the draft's confidence at every node and
how it relates to acceptance. EAGLE-2 §3 (Figure 6) shows the draft is well calibrated: a token
drafted with confidence ``c`` is accepted with probability close to ``c``. We take that as exact at
temperature 0 (the target's next token is one token; the children of a node are distinct tokens,
so "child r is the target's token" are exclusive events with probabilities ``c_r``). At a node at
depth ``d`` (the root is 0) the children's confidences are

    c_1 ~ Beta(κ a_{d+1}, κ (1 − a_{d+1})),   c_r = (1 − c_1)(1 − ρ) ρ^(r − 2)  for r >= 2,

where ``a_{d+1}`` is the chain's conditional acceptance rate at that depth (the mean of ``c_1``,
so a chain of top-1 drafts keeps exactly the chain's published acceptance), ``κ`` how much the
confidence varies from node to node (what a dynamic tree exploits: a static tree cannot spend its
budget where the draft is sure), and ``ρ`` how the rest of the draft's mass spreads over the
siblings. κ and ρ are two numbers fitted once (``calibration/fit_dynamic_tree.py``) to the EAGLE-2
paper's acceptance lengths, with the chain rates from the EAGLE-1 paper's n-α as input; the fit
and its out-of-sample rows are in ``sim/data/dynamic_tree_confidence.yaml``.

**Acceptance.** The target walks the tree from the root: at each node the accepted child is rank
r with probability ``c_r`` (none with ``1 − Σ c_r``); the walk goes on while the accepted child is
in the kept tree. A step emits the accepted drafts plus one token. Verify steps are independent
given the rates, so the run draws each step's accepted count from the law of the accepted count
of such a tree, tabulated from :data:`NUM_TREES` trees simulated in full (expansion, rerank and
walk) once per run: every step of every sequence is distributed as its own dynamic tree's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sim.acceptance.conversions import extend_rates
from sim.acceptance.plan import AcceptanceModel, AcceptancePlan, Proposal
from sim.errors import ScenarioError

FloatArray = NDArray[np.float64]

#: κ and ρ fitted by ``calibration/fit_dynamic_tree.py`` (a test checks these copies against
#: ``sim/data/dynamic_tree_confidence.yaml``, which holds the fit, its error and the checks).
CONFIDENCE_CONCENTRATION = 2.0
SIBLING_SHARE = 0.76
#: Trees simulated to tabulate the accepted-count law (standard error of τ about 0.02).
NUM_TREES = 10_000
#: The tabulation's own stream: the law is a property of the tree and the rates, not of a run.
TABLE_SEED = 20_240_624


@dataclass(frozen=True)
class DynamicTree:
    """SGLang's EAGLE tree parameters: ``num_steps`` draft levels, ``topk`` children per
    expanded node, ``num_draft_tokens`` verified tokens per sequence, the root included.

    Raise ScenarioError if ``topk`` or ``num_steps`` is below 1 or ``num_draft_tokens`` below 2.
    """

    topk: int
    num_steps: int
    num_draft_tokens: int

    def __post_init__(self) -> None:
        if self.topk < 1 or self.num_steps < 1 or self.num_draft_tokens < 2:
            raise ScenarioError(
                "speculation.tree: a dynamic tree needs topk >= 1, depth >= 1 and "
                f"num_draft_tokens >= 2 (the root counts), got topk {self.topk}, depth "
                f"{self.num_steps}, num_draft_tokens {self.num_draft_tokens}"
            )

    @property
    def num_drafts(self) -> int:
        """Draft tokens verified per step (the root excluded), at most the candidates."""
        candidates = self.topk + (self.num_steps - 1) * self.topk**2
        return min(self.num_draft_tokens - 1, candidates)

    @property
    def depth(self) -> int:
        """The deepest a kept node can be: the draft levels, or the drafts if fewer."""
        return min(self.num_steps, self.num_drafts)

    def proposal(self) -> Proposal:
        """What a verify step carries: ``num_drafts`` tokens, at most ``depth`` deep."""
        widths = (min(self.topk, self.num_drafts),) + (1,) * (self.depth - 1)
        return Proposal(self.num_drafts, self.depth, widths)


@dataclass(frozen=True)
class ConfidenceModel:
    """The draft's confidence at a node (module docstring): ``c_1 ~ Beta(κ a, κ (1 − a))`` with
    ``a`` the chain rate at that depth, siblings sharing ``1 − c_1`` geometrically by ``ρ``.

    Raise ScenarioError if ``concentration`` <= 0 or ``sibling_share`` is outside [0, 1).
    """

    concentration: float = CONFIDENCE_CONCENTRATION
    sibling_share: float = SIBLING_SHARE

    def __post_init__(self) -> None:
        if not self.concentration > 0.0 or not 0.0 <= self.sibling_share < 1.0:
            raise ScenarioError(
                "dynamic tree confidence: need concentration > 0 and sibling_share in [0, 1), "
                f"got {self.concentration} and {self.sibling_share}"
            )

    def children(self, rate: float, shape: tuple[int, ...], topk: int, rng: np.random.Generator
                 ) -> FloatArray:  # fmt: skip
        """Confidences of the ``topk`` best children of ``shape`` nodes (shape + (topk,))."""
        rate = min(max(float(rate), 1e-6), 1.0 - 1e-6)
        top = rng.beta(self.concentration * rate, self.concentration * (1.0 - rate), size=shape)
        share = (1.0 - self.sibling_share) * self.sibling_share ** np.arange(topk - 1)
        rest = (1.0 - top)[..., None] * share
        return np.concatenate((top[..., None], rest), axis=-1)


def simulate_accepted(
    tree: DynamicTree,
    conditional_rates: Sequence[float] | FloatArray,
    confidence: ConfidenceModel,
    num_trees: int,
    rng: np.random.Generator,
) -> NDArray[np.int64]:
    """Accepted drafts of ``num_trees`` independent dynamic trees (expansion, rerank, walk).

    Vectorised over the trees; per level the arrays are (tree × node). Raise ScenarioError if a
    rate is outside [0, 1].
    """
    k, steps = tree.topk, tree.num_steps
    rates = extend_rates(conditional_rates, steps)
    n = int(num_trees)
    rows = np.arange(n)[:, None]
    # Level 1: the root's children. ``outcome`` is the rank the target accepts at an expanded
    # node (k = none of the drafted ones): one uniform against the cumulative confidences.
    conf = confidence.children(rates[0], (n,), k, rng)
    root_outcome = _outcome(conf, rng)
    scores = [conf]  # per level: (tree × node) path confidence
    parents: list[NDArray[np.int64]] = [np.zeros((n, k), dtype=np.int64)]
    expanded_slot: list[NDArray[np.int64]] = []  # per level: node -> slot among expanded, or -1
    outcomes: list[NDArray[np.int64]] = []  # per level: (tree × expanded slot) accepted rank
    for level in range(1, steps):
        current = scores[-1]
        width = min(k, current.shape[1])
        chosen = np.argpartition(-current, width - 1, axis=1)[:, :width]
        slot = np.full(current.shape, -1, dtype=np.int64)
        slot[rows, chosen] = np.arange(width)
        expanded_slot.append(slot)
        child_conf = confidence.children(rates[level], (n, width), k, rng)
        outcomes.append(_outcome(child_conf, rng))
        scores.append((current[rows, chosen][..., None] * child_conf).reshape(n, width * k))
        parents.append(np.repeat(chosen, k, axis=1))
    # Rerank: keep the best num_drafts candidates over all levels.
    flat = np.concatenate(scores, axis=1)
    keep_count = tree.num_drafts
    kept_flat = np.zeros(flat.shape, dtype=bool)
    if keep_count >= flat.shape[1]:
        kept_flat[:] = True
    else:
        best = np.argpartition(-flat, keep_count - 1, axis=1)[:, :keep_count]
        kept_flat[rows, best] = True
    bounds = np.cumsum([0] + [s.shape[1] for s in scores])
    kept = [kept_flat[:, bounds[i] : bounds[i + 1]] for i in range(len(scores))]
    # Walk: the accepted child at level 1, then down while the accepted child was kept.
    accepted = np.zeros(n, dtype=np.int64)
    node = root_outcome.copy()  # index into level 1, or k (no child accepted)
    alive = node < k
    alive &= kept[0][np.arange(n), np.minimum(node, k - 1)]
    accepted += alive
    for level in range(1, steps):
        slot = expanded_slot[level - 1][np.arange(n), np.where(alive, node, 0)]
        alive &= slot >= 0
        rank = outcomes[level - 1][np.arange(n), np.maximum(slot, 0)]
        alive &= rank < k
        node = np.maximum(slot, 0) * k + np.minimum(rank, k - 1)
        alive &= kept[level][np.arange(n), node]
        accepted += alive
    return accepted


def _outcome(conf: FloatArray, rng: np.random.Generator) -> NDArray[np.int64]:
    """The rank of the child the target accepts (``conf.shape[-1]`` if none): exclusive events
    with probabilities ``conf`` (temperature 0: one target token)."""
    cumulative = np.cumsum(conf, axis=-1)
    u = rng.random(conf.shape[:-1])[..., None]
    return np.asarray((u >= cumulative).sum(axis=-1), dtype=np.int64)


def dynamic_tree_reach(
    tree: DynamicTree,
    conditional_rates: Sequence[float] | FloatArray,
    confidence: ConfidenceModel | None = None,
    num_trees: int = NUM_TREES,
    seed: int = TABLE_SEED,
) -> FloatArray:
    """``P(accepted >= d)`` for d = 1..depth, from ``num_trees`` simulated trees."""
    model = confidence or ConfidenceModel()
    accepted = simulate_accepted(
        tree, conditional_rates, model, num_trees, np.random.default_rng(seed)
    )
    counts = np.bincount(accepted, minlength=tree.depth + 1)[: tree.depth + 1]
    at_least = counts[::-1].cumsum()[::-1] / float(accepted.size)
    return np.asarray(at_least[1:], dtype=np.float64)


def _alpha_for_tau(
    target_tau: float, tree: DynamicTree, confidence: ConfidenceModel | None
) -> float:
    """The constant chain rate whose dynamic tree has τ = ``target_tau`` (bisection on one
    seed's trees, where τ grows with the rate). Raise ScenarioError if no rate reaches it."""

    def tau(rate: float) -> float:
        reach = dynamic_tree_reach(tree, [rate], confidence, num_trees=2000)
        return 1.0 + float(reach.sum())

    low, high = 1e-4, 1.0 - 1e-4
    if not tau(low) <= target_tau <= tau(high):
        raise ScenarioError(
            f"speculation.acceptance.mean_acceptance_length: {target_tau} is out of this "
            f"dynamic tree's reach [1, {tree.depth + 1}]"
        )
    for _ in range(16):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if tau(middle) < target_tau else (low, middle)
    return 0.5 * (low + high)


class DynamicTreeModel(AcceptanceModel):
    """Acceptance of EAGLE-2 dynamic trees: each verify step's accepted count is that of a tree
    built for it (module docstring), from the chain rates of ``chain`` (its
    ``conditional_rates``, a trace set's per-depth rates, or for a target τ the constant rate
    whose tree meets it).

    Raise ScenarioError if the chain model has no per-depth rates.
    """

    def __init__(
        self,
        chain: AcceptanceModel,
        tree: DynamicTree,
        confidence: ConfidenceModel | None = None,
    ) -> None:
        rates = getattr(chain, "conditional_rates", None)
        if rates is None and hasattr(chain, "target_tau"):
            rates = [_alpha_for_tau(float(chain.target_tau), tree, confidence)]
        if rates is None and hasattr(chain, "_conditional_rates_by_position"):
            rates = chain._conditional_rates_by_position()[: max(tree.num_steps, 1)]
        if rates is None:
            raise ScenarioError(
                "speculation.acceptance: a dynamic tree needs per-depth chain rates (alpha, "
                "per_position, a profile or a trace), not "
                f"{chain.describe().get('name', type(chain).__name__)!r}"
            )
        self.chain = chain
        self.tree = tree
        self.confidence = confidence or ConfidenceModel()
        self.conditional_rates = extend_rates(rates, tree.num_steps)
        self._reach = dynamic_tree_reach(tree, self.conditional_rates, self.confidence)

    def reach(self, proposal: Proposal | None = None) -> FloatArray:
        """``P(accepted >= d)`` of the tree, d = 1..depth (the proposal is the tree's own)."""
        del proposal
        return self._reach

    def plan(
        self,
        num_decode_tokens: np.ndarray,
        proposal: Proposal,
        rng: np.random.Generator,
        trace_keys: np.ndarray | None = None,
    ) -> AcceptancePlan:
        """Every request's steps, each with the tree's accepted-count law."""
        from sim.acceptance.models import plan_independent_steps

        del trace_keys
        return plan_independent_steps(num_decode_tokens, self.tree.proposal(), self._reach, rng)

    def expected_acceptance_length(self, proposal: Proposal | None = None) -> float:
        """τ = 1 + Σ_d P(accepted >= d)."""
        del proposal
        return float(1.0 + self._reach.sum())

    def describe(self) -> dict[str, Any]:
        """The tree, the confidence model and the chain it draws from."""
        return {
            "name": "eagle2_dynamic_tree",
            "topk": self.tree.topk,
            "num_steps": self.tree.num_steps,
            "num_draft_tokens": self.tree.num_draft_tokens,
            "confidence_concentration": self.confidence.concentration,
            "sibling_share": self.confidence.sibling_share,
            "chain": self.chain.describe(),
            "source": "EAGLE-2 (arXiv:2406.16858) expansion and rerank; confidence model "
            "fitted in sim/data/dynamic_tree_confidence.yaml",
        }
