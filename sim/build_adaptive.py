"""The adaptive-speculation part of building a node: the drafter that prices every k up to the
configured one, and the plan through which ``speculation.policy`` chooses k per step
(:func:`sim.build.build_simulation` calls these when a policy is set)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sim.acceptance.traces import TraceReplayModel
from sim.catalogue import Model
from sim.cost_model import StepCostModel
from sim.drafting import Strategy, build_strategy
from sim.engine.drafter import StepPlan
from sim.engine.policies import (
    ADAPTIVE_METHODS,
    AdaptiveDrafter,
    AdaptivePlan,
    FixedPolicy,
    PositionAcceptance,
    build_policy,
    check_policy_support,
    cost_model_step_time,
)
from sim.engine.presets import get_preset
from sim.errors import ScenarioError
from sim.random_streams import RandomStreams
from sim.scenario import Scenario
from sim.workload import Workload


def adaptive_drafter(
    scenario: Scenario, strategy: Strategy, node: tuple[Model, Any, StepCostModel, Any, Path]
) -> AdaptiveDrafter:
    """The drafting cost of every k up to ``num_speculative_tokens``, each by the strategy
    built for a chain of that k (a policy may choose any of them)."""
    model, gpu, cost_model, engine, base_dir = node
    k_max = scenario.speculation.num_speculative_tokens
    by_k: dict[int, Strategy] = {k_max: strategy}
    for k in range(1, k_max):
        spec = scenario.speculation.model_copy(update={"num_speculative_tokens": k})
        chain_k = scenario.model_copy(update={"speculation": spec})
        by_k[k] = build_strategy(
            chain_k, model, gpu, cost_model, engine.name, base_dir, enforce_support=False
        )
    return AdaptiveDrafter(strategy, by_k)


def adaptive_plan(
    scenario: Scenario,
    strategy: Strategy,
    drafter: AdaptiveDrafter,
    cost_model: StepCostModel,
    workload: Workload,
    streams: RandomStreams,
    max_num_seqs: int,
) -> StepPlan:
    """The plan through which ``speculation.policy`` chooses k per step (``fixed`` below the
    configured k: the fixed-k plan it amounts to, :meth:`PositionAcceptance.fixed_plan`) (its
    acceptance drawn per output position from the ``acceptance`` stream, as the fixed plan draws
    from it). Raise ScenarioError naming the key if the method, proposal or engine rules the
    policy out."""
    spec = scenario.speculation
    assert spec.policy is not None
    _check_policy(scenario, strategy)
    assert strategy.acceptance is not None and strategy.proposal is not None
    k_max = strategy.proposal.num_draft_tokens
    needed = workload.output_tokens.astype(np.int64) - 1
    acceptance = PositionAcceptance.from_model(
        strategy.acceptance, needed, k_max, streams.stream("acceptance")
    )
    policy = build_policy(
        spec.policy.name,
        spec.policy.params,
        k_max,
        len(needed),
        cost_model_step_time(
            cost_model,
            drafter,
            strategy.extra_tokens_per_decode,
            max_num_seqs,
        ),
    )
    if isinstance(policy, FixedPolicy):
        # The same k at every step: the fixed-k plan read from the same positions (the run is
        # the policy's, record for record), on the fixed plans' fast paths.
        return acceptance.fixed_plan(policy.k, needed)
    return AdaptivePlan(acceptance, policy, k_max)


def _check_policy(scenario: Scenario, strategy: Strategy) -> None:
    """Raise ScenarioError naming the key if the method, proposal, acceptance model or engine
    rules ``speculation.policy`` out."""
    spec = scenario.speculation
    assert spec.policy is not None
    if spec.method not in ADAPTIVE_METHODS or strategy.proposal is None:
        raise ScenarioError(
            f"speculation.policy: adaptive k needs a chain method ({', '.join(ADAPTIVE_METHODS)}),"
            f" got {spec.method!r}"
        )
    if strategy.proposal.is_tree or strategy.proposal.tree_widths is not None:
        raise ScenarioError("speculation.policy: adaptive k covers chains; drop speculation.tree")
    if not spec.allow_unsupported:
        preset = get_preset(scenario.engine.preset)
        check_policy_support(spec.policy.name, preset.draft_support_from, preset.display_name)
    assert strategy.acceptance is not None
    PositionAcceptance.check_model(strategy.acceptance)


def is_fixed_at_configured_k(scenario: Scenario, strategy: Strategy) -> bool:
    """Whether ``speculation.policy`` is ``fixed`` at ``num_speculative_tokens`` on trace replay
    (checked, with its parameters, as any policy is): then the run is the fixed-k run, record
    for record, since both draw the trace keys first from the ``acceptance`` stream and walk
    them by ``min(acc_len, k + 1)``. A parametric model's fixed-k plan draws per step, not per
    position, so there the policy keeps :meth:`PositionAcceptance.fixed_plan`."""
    spec = scenario.speculation
    if spec.policy is None or spec.policy.name != "fixed":
        return False
    _check_policy(scenario, strategy)
    if not isinstance(strategy.acceptance, TraceReplayModel):
        return False
    assert strategy.proposal is not None
    k_max = strategy.proposal.num_draft_tokens
    policy = build_policy("fixed", spec.policy.params, k_max, 0, _no_step_time)
    return isinstance(policy, FixedPolicy) and policy.k == k_max


def _no_step_time(batch_size: int, k_max: int, context: int) -> NDArray[np.float64]:
    raise AssertionError("the fixed policy reads no step time")
