"""The Python path's step durations, which the compiled evaluator must match bit for bit, and the
terms the evaluator reads from a drafter: whether its time is priced from CPU terms, from its
draft networks' forwards or by the drafter itself, and each network's constant and linear terms.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from sim.cost_model import StepCostModel, StepShape, smooth_max
from sim.engine.cost_eval import (
    DRAFT_CPU,
    DRAFT_GIVEN,
    DRAFT_NETWORKS,
    DRAFT_NONE,
)
from sim.engine.drafter import Drafter, DraftWork

FloatArray = NDArray[np.float64]


def python_durations(
    cost_model: StepCostModel,
    drafter: Drafter,
    speculative: bool,
    shape: StepShape,
    work: DraftWork,
) -> tuple[FloatArray, dict[str, FloatArray]]:
    """Each step's duration and breakdown by the Python cost model: its parts, then the
    drafting time when the steps draft, summed in a fixed order so that every path rounds
    alike."""
    parts = cost_model.breakdown(shape)
    if speculative:
        parts["draft_s"] = np.asarray(drafter.draft_time_s(work), dtype=np.float64)
    total = (
        parts["fixed_s"]
        + parts["linear_s"]
        + parts["attention_s"]
        + parts["allreduce_s"]
        + parts["sampling_s"]
        + parts["draft_s"]
    )
    return total, parts


def _draft_terms(drafter: Drafter) -> tuple[int, tuple[float, float, float], list[Any]]:
    """How ``drafter``'s time is priced: in the evaluator from its CPU terms (the lookup
    strategies, whose ``draft_time_s`` is ``where(seqs > 0, per_step + per_seq·seqs (+
    per_context_token·context), 0)``) or its draft networks' forwards (EAGLE, EAGLE-3, MTP:
    :class:`~sim.drafting.eagle.EagleStrategy`), or by the drafter itself. Also the constant
    terms and, for networks, the two :class:`~sim.drafting.network.NetworkCost`."""
    from sim.drafting.base import NoSpeculation
    from sim.drafting.eagle import EagleStrategy
    from sim.drafting.lookahead import LookaheadStrategy
    from sim.drafting.ngram import NgramStrategy

    kind = type(drafter)
    if kind is NoSpeculation:
        return DRAFT_NONE, (0.0, 0.0, 0.0), []
    if issubclass(kind, NgramStrategy) and kind.draft_time_s is NgramStrategy.draft_time_s:
        o = drafter.overheads  # type: ignore[attr-defined]
        return DRAFT_CPU, (o.per_step_s, o.cpu_per_seq_s, o.cpu_per_context_token_s), []
    if kind is LookaheadStrategy:
        o = drafter.overheads  # type: ignore[attr-defined]
        return DRAFT_CPU, (o.per_step_s, o.cpu_per_seq_s, 0.0), []
    if kind is EagleStrategy:
        assert isinstance(drafter, EagleStrategy)
        o = drafter.overheads
        fixed_s = o.per_step_s + (1 + len(drafter.level_nodes)) * o.per_forward_s
        return DRAFT_NETWORKS, (fixed_s, 0.0, 0.0), [drafter.first, drafter.later]
    return DRAFT_GIVEN, (0.0, 0.0, 0.0), []


def _branch_prefix_reads(drafter: Any) -> bool:
    """Whether an EAGLE-family drafter's later forwards read each node's prefix KV on its own
    (:attr:`~sim.drafting.eagle.EagleStrategy.branch_prefix_reads`)."""
    return bool(getattr(drafter, "branch_prefix_reads", False))


def _chain_by_k(drafter: Any) -> tuple[Any, list[int], list[float]] | None:
    """For a drafter whose chain length a policy chooses per step
    (:class:`~sim.engine.policies.AdaptiveDrafter`) over EAGLE-family chains that share
    their networks and overheads: the longest chain's strategy, and per k (index k, 0 unused)
    the later forwards and the fixed drafting seconds of a chain of k drafts, whose levels are
    the first of the longest's. None for any other drafter (it prices itself)."""
    from sim.drafting.eagle import EagleStrategy

    by_k = getattr(drafter, "by_k", None)
    if type(drafter).__name__ != "AdaptiveDrafter" or not isinstance(by_k, dict):
        return None
    longest = by_k[max(by_k)]
    if type(longest) is not EagleStrategy:
        return None
    levels = [0] * (max(by_k) + 1)
    fixed = [0.0] * (max(by_k) + 1)
    for k, strategy in by_k.items():
        if (
            type(strategy) is not EagleStrategy
            or strategy.level_nodes != longest.level_nodes[: len(strategy.level_nodes)]
            or strategy.overheads != longest.overheads
            or _network_key(strategy.first) != _network_key(longest.first)
            or _network_key(strategy.later) != _network_key(longest.later)
        ):
            return None
        o = strategy.overheads
        levels[k] = len(strategy.level_nodes)
        fixed[k] = o.per_step_s + (1 + len(strategy.level_nodes)) * o.per_forward_s
    return longest, levels, fixed


def _network_key(network: Any) -> list[float]:
    """Every term of a draft network's forward the evaluator reads (two networks with equal
    keys price every forward alike)."""
    linear = [network._flop_s_per_token, network._flop_s_per_logit, network._weight_s]
    return [*_network_terms(network), *linear, network._p, network._sampling_s_per_logit]


def _network_terms(network: Any) -> list[float]:
    """The constant terms of a draft network's forward (``NetworkCost.forward_s``), in the
    order the evaluator reads them: KV seconds per token, seconds per causal pair, fixed
    seconds, whether it launches eagerly outside CUDA graphs, its launch time, and a spare
    (the evaluator sets the later network's to 1.0 when each node reads its prefix KV itself)."""
    launch = network._host.costs.eager_launch_s_per_layer * network.network.num_layers
    return [
        network._kv_s_per_token,
        network._attention_s_per_pair,
        network._fixed_s,
        1.0 if network._eager else 0.0,
        launch,
        0.0,
    ]


def _network_linear(network: Any, n: FloatArray, n_logits: FloatArray) -> FloatArray:
    """A draft network's linear layers and sampling (``NetworkCost.forward_s``'s terms that
    are not arithmetic)."""
    flop_s = network._flop_s_per_token * n + network._flop_s_per_logit * n_logits
    linear = smooth_max(network._weight_s, flop_s, network._p)
    return np.asarray(linear + network._sampling_s_per_logit * n_logits, dtype=np.float64)
