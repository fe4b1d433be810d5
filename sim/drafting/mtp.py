"""Multi-token prediction: the target's own MTP modules draft the extra tokens.

DeepSeek-V3's MTP module (DeepSeek-AI 2024, arXiv:2412.19437, §2.2) is one decoder layer of the
target's shape fed by ``Linear(2H → H)`` over the normalised token embedding and the previous
hidden state; it shares the target's embedding and output head. Serving engines run it like an
EAGLE head: one module forward per extra token, the first catching up the accepted tokens (vLLM
reuses the last module when more tokens are asked for than modules exist). The modules ship in the
checkpoint (``num_nextn_predict_layers``), so only models with ``num_mtp_modules >= 1`` can use it.
"""

from __future__ import annotations

from sim.catalogue import BF16_BYTES, Model, get_model, model_names
from sim.drafting.base import BuildContext
from sim.drafting.eagle import (
    EagleStrategy,
    head_kv_bytes_per_token,
    tree_proposal,
)
from sim.drafting.network import DraftNetwork, NetworkCost, decoder_layer_params
from sim.drafting.overheads import load_draft_overheads
from sim.errors import ScenarioError


def mtp_network(target: Model) -> DraftNetwork:
    """One MTP module of ``target``: eh_proj 2H→H, two input norms, one decoder layer; the
    target's lm_head. Resident bytes count every shipped module (routed experts included)."""
    s = target.spec
    h = s.hidden_size
    body = 2.0 * h * h + 2.0 * h + decoder_layer_params(target)
    moe = s.num_experts > 1
    stored_layer = (
        target.attention_params_per_layer
        + (target.moe_always_on_params_per_layer if moe else 0)
        + s.num_experts * target.expert_params_per_layer
        + target.norm_params_per_layer
    )
    resident = s.num_mtp_modules * (2.0 * h * h + 2.0 * h + stored_layer) * BF16_BYTES
    return DraftNetwork(
        name=f"mtp-module/{target.name}",
        body_params=body,
        head_params=float(s.vocab_size * h),
        resident_bytes=resident,
        num_layers=1,
        num_gemms=6,
        kv_bytes_per_token=head_kv_bytes_per_token(target),
        num_kv_heads=s.num_kv_heads,
        attention_flops_per_pair=float(target.counts.pair_flops_per_layer_decode),
    )


def build_mtp(ctx: BuildContext) -> EagleStrategy:
    """MTP drafting with the target's own modules.

    Raise ScenarioError naming ``model`` if the target ships no MTP module.
    """
    if ctx.model.spec.num_mtp_modules < 1:
        shipped = [name for name in model_names() if _has_mtp(name)]
        raise ScenarioError(
            f"speculation.method: 'mtp' needs a model that ships multi-token-prediction modules "
            f"(model.num_mtp_modules >= 1, e.g. DeepSeek-V3/R1, Qwen3-Next, GLM-4.5, MiMo); "
            f"{ctx.model.name} has none. Catalogue models with MTP: "
            f"{', '.join(shipped) or 'none'}; give the model inline with num_mtp_modules set"
        )
    proposal, level_nodes, acceptance = tree_proposal(ctx, ctx.acceptance())
    cost = NetworkCost(mtp_network(ctx.model), ctx.cost_model, ctx.tp)
    return EagleStrategy(
        "mtp",
        proposal,
        acceptance,
        load_draft_overheads(ctx.engine_preset, "mtp"),
        cost,
        cost,
        level_nodes,
        ctx.tp,
    )


def _has_mtp(name: str) -> bool:
    return get_model(name).spec.num_mtp_modules >= 1
