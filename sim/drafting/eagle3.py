"""EAGLE-3: fused low/mid/high target features and its own reduced-vocabulary head.

The head (Li et al. 2025, arXiv:2503.01840; SafeAILab/EAGLE ``eagle/model/cnets.py``) fuses three
target layers' features with ``fc: Linear(3H → H)`` on the first forward only; its decoder layer's
q/k/v take ``2H`` inputs (token embedding concatenated with the feature); its lm_head maps to a
reduced draft vocabulary (32,000 tokens for Llama-3, ``draft_vocab_size`` in
``eagle/traineagle3/config.json``) and a table maps draft ids back to the target's. It therefore
reads far fewer bytes per forward than EAGLE-1 (about 0.75 GB against 1.5 GB for Llama-3.1-8B).
Forwards per step are as EAGLE-1/2 (chain, static tree, or dynamic tree as in SGLang).

Resident weights: the fusion, the layer and the draft lm_head, and under vLLM the head's own token
embedding too. vLLM's EAGLE proposer (vllm/v1/spec_decode/eagle.py, ``load_model``) keeps the
draft's ``embed_tokens`` apart from the target's when the checkpoint ships one that differs, as the
published EAGLE-3 speculators do; SGLang's EAGLE worker replaces the draft's embedding with the
target's (``set_embed``). The Qwen3-32B EAGLE-3 server log of the vLLM concurrency sweep
(tomasruizt/vllm-scripts @ d94d714, docs/validation.md) counts 63.94 GiB of model weights against
61.03 GiB without the head: 2.91 GiB, the 1.46 GiB of fusion, layer and lm_head plus the
151,936 × 5,120 bf16 embedding (1.45 GiB).
"""

from __future__ import annotations

from sim.catalogue import BF16_BYTES, Model
from sim.drafting.base import BuildContext
from sim.drafting.eagle import (
    EagleStrategy,
    head_kv_bytes_per_token,
    tree_proposal,
)
from sim.drafting.network import DraftNetwork, NetworkCost, decoder_layer_params
from sim.drafting.overheads import load_draft_overheads
from sim.engine.presets import get_preset

#: Draft vocabulary of the published EAGLE-3 heads (Llama-3: 32,000 of 128,256 tokens).
EAGLE3_DRAFT_VOCAB = 32000


def eagle3_networks(
    target: Model, own_embedding: bool = False
) -> tuple[DraftNetwork, DraftNetwork]:
    """EAGLE-3's head for ``target``: the first forward (with the 3H→H fusion) and later ones.

    ``own_embedding`` keeps the head's token embedding (target vocabulary × H) resident beside the
    target's, as vLLM loads it (module docstring); it adds to the memory held, not the bytes a
    forward reads (a lookup reads a row per token).
    """
    s = target.spec
    h = s.hidden_size
    vocab = min(EAGLE3_DRAFT_VOCAB, s.vocab_size)
    layer = decoder_layer_params(target, qkv_input_multiple=2)
    fusion = 3.0 * h * h
    head = float(vocab * h)
    embedding = float(s.vocab_size * h) if own_embedding else 0.0
    resident = (fusion + layer + head + embedding) * BF16_BYTES

    def network(body: float, gemms: int, suffix: str) -> DraftNetwork:
        return DraftNetwork(
            name=f"eagle3-head/{target.name}/{suffix}",
            body_params=body,
            head_params=head,
            resident_bytes=resident,
            num_layers=1,
            num_gemms=gemms,
            kv_bytes_per_token=head_kv_bytes_per_token(target),
            num_kv_heads=s.num_kv_heads,
            attention_flops_per_pair=float(4 * s.num_heads * s.head_dim),
        )

    return network(fusion + layer, 6, "first"), network(layer, 5, "later")


def build_eagle3(ctx: BuildContext) -> EagleStrategy:
    """EAGLE-3 for the scenario's target (chain, static tree or dynamic tree).

    Raise ScenarioError if the tree form does not suit the method.
    """
    proposal, level_nodes, acceptance = tree_proposal(ctx, ctx.acceptance())
    # Whether the engine keeps the head's own embedding resident (the preset's sourced rule).
    own = get_preset(ctx.engine_preset).draft_keeps_own_embedding
    first, later = eagle3_networks(ctx.model, own_embedding=own)
    return EagleStrategy(
        "eagle3",
        proposal,
        acceptance,
        load_draft_overheads(ctx.engine_preset, "eagle3"),
        NetworkCost(first, ctx.cost_model, ctx.tp),
        NetworkCost(later, ctx.cost_model, ctx.tp),
        level_nodes,
        ctx.tp,
    )
