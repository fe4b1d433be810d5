"""Tree verification: how much longer the accepted path gets when siblings are verified too.

The rule is Sequoia's positional acceptance assumption (Chen et al. 2024, arXiv:2402.12374, §3.1):
the chance that a candidate is accepted depends only on its rank among its siblings. We give it one
parameter. At a depth where the top-ranked candidate would be accepted with the chain's conditional
rate ``a_d``, the candidate of rank ``r`` (1 = top) is accepted with probability

    q_r = a_d · β^(r − 1)    given that ranks 1..r−1 were rejected,

so rank r is the accepted child with probability ``π_r = q_r · Π_{j<r} (1 − q_j)`` and the walk
advances past depth d with probability ``1 − Π_{r<=w} (1 − q_r)``. ``β = 0`` is a chain; ``β = 1``
makes every sibling as good as the top candidate. β is fitted by
``tools/build_acceptance_data.py``
from EAGLE-1's chain n-α rates paired with its tree τ (Li et al. 2024, arXiv:2401.15077,
Tables 2 and 8),
and the fit is recorded in ``sim/data/acceptance_profiles.yaml`` under ``tree_rule``.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from sim.acceptance.conversions import extend_rates
from sim.acceptance.plan import Proposal
from sim.errors import ScenarioError

# The fitted β and the reference conditional rate (mean EAGLE-1 n-α at T = 0); the build script
# writes both to acceptance_profiles.yaml and a test checks that these copies agree with it.
SIBLING_DECAY = 0.6358
REFERENCE_RATE = 0.7034

# EAGLE-1's default static tree (SafeAILab/EAGLE, eagle/model/choices.py,
# ``mc_sim_7b_63``): 25 nodes,
# each the list of sibling ranks (0 = top) along its path from the root.
EAGLE1_DEFAULT_TREE: tuple[tuple[int, ...], ...] = (
    (0,), (1,), (2,), (3,), (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0),
    (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 0, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2), (0, 0, 0, 0, 0), (0, 0, 0, 0, 1),
)  # fmt: skip


def _check_decay(sibling_decay: float) -> None:
    if not 0.0 <= sibling_decay <= 1.0:
        raise ScenarioError(f"tree sibling_decay must be in [0, 1], got {sibling_decay}")


def rank_probabilities(top_rate: float, num_candidates: int, sibling_decay: float) -> np.ndarray:
    """``π_r``: the probability that the rank-r candidate is the accepted child, r = 1..w.

    Raise ScenarioError if ``sibling_decay`` is outside [0, 1].
    """
    _check_decay(sibling_decay)
    q = top_rate * sibling_decay ** np.arange(num_candidates, dtype=np.float64)
    survive = np.concatenate([[1.0], np.cumprod(1.0 - q)[:-1]])
    return np.asarray(q * survive)


def advance_probabilities(
    conditional_rates: np.ndarray, widths: Sequence[int], sibling_decay: float
) -> np.ndarray:
    """Per depth, the probability that one of ``widths[d]`` candidates is accepted.

    ``1 − Π_{r<=w} (1 − a_d β^(r−1))``. Raise ScenarioError if ``sibling_decay`` is outside [0, 1].
    """
    _check_decay(sibling_decay)
    return np.array(
        [
            1.0 - np.prod(1.0 - rate * sibling_decay ** np.arange(width, dtype=np.float64))
            for rate, width in zip(conditional_rates, widths, strict=True)
        ]
    )


def rescue_probabilities(
    conditional_rates: np.ndarray, widths: Sequence[int], sibling_decay: float
) -> np.ndarray:
    """Per depth, the probability that a sibling is accepted given that the top candidate was not.

    ``1 − Π_{2<=r<=w} (1 − a_d β^(r−1))``.
    Raise ScenarioError if ``sibling_decay`` is outside [0, 1].
    """
    _check_decay(sibling_decay)
    return np.array(
        [
            1.0 - np.prod(1.0 - rate * sibling_decay ** np.arange(1, width, dtype=np.float64))
            for rate, width in zip(conditional_rates, widths, strict=True)
        ]
    )


def cumulative_reach(
    conditional_rates: Sequence[float] | np.ndarray, proposal: Proposal, sibling_decay: float
) -> np.ndarray:
    """``P(accepted >= d)`` for d = 1..depth under the rank rule (a chain when there are no widths).

    Raise ScenarioError if a rate or ``sibling_decay`` is outside [0, 1].
    """
    if proposal.depth == 0:
        return np.zeros(0)
    rates = extend_rates(conditional_rates, proposal.depth)
    if proposal.tree_widths is None:
        return np.cumprod(rates)
    return np.cumprod(advance_probabilities(rates, proposal.tree_widths, sibling_decay))


def tree_tau_from_paths(
    conditional_rates: Sequence[float] | np.ndarray,
    paths: Sequence[Sequence[int]],
    sibling_decay: float,
) -> float:
    """Expected tokens per step (bonus included) of a static tree given as rank paths.

    Each node's reach probability is the product of ``π_rank`` along its path, and
    ``τ = 1 + Σ_nodes reach`` (Sequoia, arXiv:2402.12374, eq. 1 with positional acceptance).
    Raise ScenarioError if a path is empty or a rate is outside [0, 1].
    """
    if any(len(path) == 0 for path in paths):
        raise ScenarioError("tree paths must be non-empty")
    depth = max((len(path) for path in paths), default=0)
    if depth == 0:
        return 1.0
    rates = extend_rates(conditional_rates, depth)
    widest = max(max(path) for path in paths) + 1
    table = [rank_probabilities(rate, widest, sibling_decay) for rate in rates]
    total = 1.0
    for path in paths:
        total += float(np.prod([table[level][rank] for level, rank in enumerate(path)]))
    return total


def eagle2_effective_proposal(
    topk: int,
    depth: int,
    num_draft_tokens: int,
    conditional_rates: Sequence[float] | None = None,
    sibling_decay: float = SIBLING_DECAY,
) -> Proposal:
    """The static-width tree that stands in for an EAGLE-2 dynamic tree ``(topk, depth, tokens)``.

    EAGLE-2 (Li et al. 2024, arXiv:2406.16858) expands the most confident nodes and keeps the
    ``num_draft_tokens`` nodes with the highest path confidence, which the paper shows tracks the
    acceptance probability. We take the reach probability under the rank rule as that confidence,
    keep the best ``num_draft_tokens`` rank paths (ranks below ``topk``, at most
    ``depth`` deep), and
    return the widths along the most likely path: the number of kept siblings at each depth. The
    approximation assumes the subtree under an accepted sibling is as wide as under the top path,
    which overstates the gain of deep rescues a little; the draft cost still counts every kept node.
    Rates default to a constant ``REFERENCE_RATE``.
    Raise ScenarioError if ``topk``, ``depth`` or ``num_draft_tokens`` is < 1.
    """
    if topk < 1 or depth < 1 or num_draft_tokens < 1:
        raise ScenarioError(
            f"speculation.tree: topk, depth and num_draft_tokens must be >= 1, got "
            f"{topk}, {depth}, {num_draft_tokens}"
        )
    rates = extend_rates(
        [REFERENCE_RATE] if conditional_rates is None else conditional_rates, depth
    )
    table = [rank_probabilities(rate, topk, sibling_decay) for rate in rates]

    # Best-first search: a node's first child and next sibling never score higher than the node.
    def reach(path: tuple[int, ...]) -> float:
        return float(np.prod([table[level][rank] for level, rank in enumerate(path)]))

    heap: list[tuple[float, tuple[int, ...]]] = [(-reach((0,)), (0,))]
    widths = [0] * depth
    for _ in range(num_draft_tokens):
        if not heap:
            break
        _, path = heapq.heappop(heap)
        if all(rank == 0 for rank in path[:-1]):
            widths[len(path) - 1] += 1
        if path[-1] + 1 < topk:
            sibling = (*path[:-1], path[-1] + 1)
            heapq.heappush(heap, (-reach(sibling), sibling))
        if len(path) < depth:
            child = (*path, 0)
            heapq.heappush(heap, (-reach(child), child))
    kept_widths = tuple(width for width in widths if width > 0)
    return Proposal(num_draft_tokens, len(kept_widths), kept_widths)
