"""Adaptive speculation: how many drafts each sequence proposes, chosen step by step.

A fixed-k plan (:mod:`sim.acceptance.plan`) draws every verify step of a request before the run.
Here the acceptance is drawn per output position instead, once, before the run
(:class:`PositionAcceptance`): ``acc_len[pos]`` is how many tokens a verify step starting at
output position ``pos`` emits with a long enough chain, bonus token included. A chain of k drafts
starting there emits ``min(acc_len[pos], k + 1)`` tokens and the next step starts that many
positions on, so any k at any step is replayed exactly, and every policy compared on one seed
sees the same content (common random numbers). The source is a request's acceptance trace
(:mod:`sim.acceptance.traces`, the SpecDecode-Bench convention) or, for the parametric models,
one uniform per request position through the chain's reach ``P(accepted >= d)`` (inverse CDF:
``acc_len = 1 + #{d : u < reach_d}``), which gives each k its model's distribution.

A :class:`SpeculationPolicy` sees the batch (its size, the sequences, their positions and each
sequence's recent acceptance) and returns k per sequence (0: no drafts this step). The engine
asks through :class:`AdaptivePlan`, which stands where the fixed plan stands; a policy says how
many steps its choice holds (:meth:`SpeculationPolicy.holds_for`) and whether the batch size
enters it, so the stretch planner keeps fast-forwarding where the choice is stable. A policy
that can be copied (:meth:`SpeculationPolicy.fork`) is played forward inside a stretch; the
engine then adopts the copy's state at its last decision before the cut
(:meth:`SpeculationPolicy.adopt`), which is where stepping one step at a time would leave it.

Policies and their sources (one module a family; the interface in :mod:`.base`, names and
parameters in :mod:`.registry`, the engine's side in :mod:`.adaptive_plan`):

- ``fixed``: today's k at every step (with trace replay, the records equal the fixed-k plan's).
- ``disable-above-batch``: k while the batch holds at most ``max_batch_size`` sequences, none
  above, as vLLM's ``speculative_disable_by_batch_size`` (vLLM SpeculativeConfig docs: "disable
  speculative decoding for new incoming requests when the number of enqueued requests is larger
  than this value").
- ``sglang-ema``: SGLang's adaptive ``speculative_num_steps`` (sgl-project/sglang PR #21599;
  one controller per batch-size range, PR #24055): an EMA of the batch's accepted drafts with
  hysteresis (the rule and its defaults: :mod:`.sglang_ema`).
- ``goodput``: every ``update_interval`` steps, the k that maximises expected tokens per second
  of the batch from the cost model's own step time and each sequence's recent acceptance
  (SmartSpec, Liu et al. 2024, arXiv:2406.14066: goodput = E[generated tokens] / step time).
- ``oracle``: each sequence proposes exactly what the target will accept (an upper bound on
  what any k-policy saves in wasted drafts; no engine can do it).
"""

from sim.engine.policies.adaptive_plan import AdaptiveDrafter, AdaptivePlan
from sim.engine.policies.base import (
    HOLDS_FOREVER,
    BatchView,
    PositionAcceptance,
    SpeculationPolicy,
    StepTime,
)
from sim.engine.policies.goodput import GoodputPolicy, TabulatedStepTime, cost_model_step_time
from sim.engine.policies.registry import (
    POLICY_NAMES,
    POLICY_SUPPORT,
    build_policy,
    check_policy_support,
)
from sim.engine.policies.sglang_ema import SglangEmaPolicy
from sim.engine.policies.stateless import DisableAboveBatchPolicy, FixedPolicy, OraclePolicy
from sim.speculation import ADAPTIVE_METHODS

__all__ = [
    "ADAPTIVE_METHODS",
    "HOLDS_FOREVER",
    "POLICY_NAMES",
    "POLICY_SUPPORT",
    "AdaptiveDrafter",
    "AdaptivePlan",
    "BatchView",
    "DisableAboveBatchPolicy",
    "FixedPolicy",
    "GoodputPolicy",
    "OraclePolicy",
    "PositionAcceptance",
    "SglangEmaPolicy",
    "SpeculationPolicy",
    "StepTime",
    "TabulatedStepTime",
    "build_policy",
    "check_policy_support",
    "cost_model_step_time",
]
