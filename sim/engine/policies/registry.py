"""The policy names a scenario can give, which engine offers which, and :func:`build_policy`, which
checks a policy's parameters and builds it.
"""

from __future__ import annotations

from typing import Any

from sim.engine.policies.base import SpeculationPolicy, StepTime
from sim.engine.policies.goodput import GoodputPolicy
from sim.engine.policies.sglang_ema import SglangEmaPolicy
from sim.engine.policies.stateless import DisableAboveBatchPolicy, FixedPolicy, OraclePolicy
from sim.errors import ScenarioError

#: Policy names a scenario can give (``speculation.policy.name``).
POLICY_NAMES = ("fixed", "disable-above-batch", "sglang-ema", "goodput", "oracle")


#: Policies each engine's support table offers (the key of ``drafting.SUPPORT`` a preset
#: follows). vLLM: ``speculative_disable_by_batch_size`` (SpeculativeConfig,
#: ``disable_by_batch_size``); SGLang: ``--speculative-adaptive`` (PR #21599, EMA + hysteresis,
#: EAGLE with topk 1). The throughput-aware policy (SGLang PR #28045) is not merged, and no
#: engine can run the oracle: both are what-if studies (``speculation.allow_unsupported``).
POLICY_SUPPORT: dict[str, tuple[str, ...]] = {
    "vllm-v0": ("fixed", "disable-above-batch"),
    "vllm-v1": ("fixed", "disable-above-batch"),
    "sglang": ("fixed", "sglang-ema"),
}


def check_policy_support(name: str, support_table: str, display_name: str) -> None:
    """Raise ScenarioError naming ``speculation.policy.name`` if the engine does not offer it."""
    from sim.drafting import where_offered

    offered = POLICY_SUPPORT.get(support_table, ("fixed",))
    if name not in offered:
        where = where_offered(name, POLICY_SUPPORT)
        raise ScenarioError(
            f"speculation.policy.name: {display_name} does not offer {name!r} ({where}); "
            f"{display_name} offers: {', '.join(offered)} (set speculation.allow_unsupported "
            "for a what-if study)"
        )


def build_policy(
    name: str,
    params: dict[str, Any],
    k_max: int,
    num_requests: int,
    step_time: StepTime,
) -> SpeculationPolicy:
    """The policy ``name`` with ``params`` for chains of at most ``k_max`` drafts.

    Raise ScenarioError naming the key if a parameter is unknown or out of range.
    """
    allowed: dict[str, tuple[str, ...]] = {
        "fixed": ("k",),
        "disable-above-batch": ("k", "max_batch_size"),
        "sglang-ema": (
            "candidate_steps",
            "ema_alpha",
            "update_interval",
            "warmup_batches",
            "down_hysteresis",
            "up_hysteresis",
            "batch_slots",
        ),
        "goodput": ("prior_alpha", "ema_alpha", "update_interval"),
        "oracle": (),
    }
    if name not in allowed:
        raise ScenarioError(
            f"speculation.policy.name: unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}"
        )
    for key in params:
        if key not in allowed[name]:
            known = ", ".join(allowed[name]) or "none"
            raise ScenarioError(
                f"speculation.policy.params.{key}: not a parameter of {name!r} (known: {known})"
            )
    if name == "disable-above-batch" and "max_batch_size" not in params:
        raise ScenarioError("speculation.policy.params.max_batch_size: required by "
                            "'disable-above-batch'")  # fmt: skip
    try:
        if name == "fixed":
            return FixedPolicy(k_max, **params)
        if name == "disable-above-batch":
            return DisableAboveBatchPolicy(k_max, **params)
        if name == "sglang-ema":
            return SglangEmaPolicy(k_max, **params)
        if name == "goodput":
            return GoodputPolicy(k_max, num_requests, step_time, **params)
    except (TypeError, ValueError) as error:  # a list or a word where a number belongs
        raise ScenarioError(f"speculation.policy.params: {error}") from error
    return OraclePolicy(k_max)
