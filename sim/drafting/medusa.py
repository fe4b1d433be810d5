"""Medusa: extra decoding heads that all read the target's last hidden state once per step.

Each head (Cai et al. 2024, arXiv:2401.10774; FasterDecoding/Medusa
``medusa/model/medusa_model.py``) is a ResBlock ``x + SiLU(Linear_{H→H}(x))`` followed by its
own ``Linear(H → V)``; head ``i`` predicts the token ``i + 1`` positions ahead. All heads run in
one pass over one position per sequence, so drafting costs a single forward whatever the depth.
The candidates form a static tree (``tree.shape``: the top-``w_d`` tokens of head ``d``) or, as
vLLM V1's Medusa proposer does, a chain of each head's top-1 token. The verify step carries the
tree's nodes.
"""

from __future__ import annotations

from sim.acceptance.plan import AcceptanceModel, Proposal
from sim.catalogue import BF16_BYTES, Model
from sim.drafting.base import BuildContext
from sim.drafting.network import DraftNetwork, NetworkCost
from sim.drafting.overheads import DraftOverheads, load_draft_overheads
from sim.drafting.proposer import Batch, Forward, ForwardProposer
from sim.errors import ScenarioError


def medusa_network(target: Model, num_heads: int) -> DraftNetwork:
    """``num_heads`` Medusa heads for ``target``: ``H·H + H`` (ResBlock) + ``H·V`` each."""
    s = target.spec
    h = s.hidden_size
    body = num_heads * (h * h + h)
    head = num_heads * s.vocab_size * h
    return DraftNetwork(
        name=f"medusa-{num_heads}/{target.name}",
        body_params=float(body),
        head_params=float(head),
        resident_bytes=float(body + head) * BF16_BYTES,
        num_layers=0,
        num_gemms=2 * num_heads,
    )


class MedusaStrategy(ForwardProposer):
    """All heads in one pass over the last hidden state of each drafting sequence."""

    name = "medusa"

    def __init__(
        self,
        proposal: Proposal,
        acceptance: AcceptanceModel,
        overheads: DraftOverheads,
        heads: NetworkCost,
        tp: int,
    ) -> None:
        super().__init__(proposal, acceptance, overheads)
        self.heads = heads
        self.tp = tp

    def forwards(self, batch: Batch) -> list[Forward]:
        # One position per sequence; each logit row goes through every head's lm_head, which
        # the network counts as head_params summed over heads.
        return [batch.step_forward(0, 1.0, self.heads.forward_s)]

    def weight_bytes_per_gpu(self) -> float:
        return self.heads.network.resident_bytes / self.tp


def build_medusa(ctx: BuildContext) -> MedusaStrategy:
    """Medusa with one head per tree level (``tree.shape``) or per chain token.

    Raise ScenarioError if the tree is a dynamic one (Medusa trees are static).
    """
    spec = ctx.scenario.speculation
    tree = spec.tree
    if tree is not None and tree.shape is None:
        raise ScenarioError(
            "speculation.tree: Medusa verifies a static tree; give tree.shape, not topk/depth"
        )
    proposal = (
        Proposal.static_tree(tree.shape)
        if tree is not None and tree.shape is not None
        else Proposal.chain(spec.num_speculative_tokens)
    )
    network = medusa_network(ctx.model, proposal.depth)
    return MedusaStrategy(
        proposal,
        ctx.acceptance(),
        load_draft_overheads(ctx.engine_preset, "medusa"),
        NetworkCost(network, ctx.cost_model, ctx.tp),
        ctx.tp,
    )
