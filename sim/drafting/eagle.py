"""EAGLE-1 and EAGLE-2: one decoder layer over the target's features, reading its lm_head.

The head (Li et al. 2024, arXiv:2401.15077; SafeAILab/EAGLE ``eagle/model/cnets1.py``) is
``fc: Linear(2H → H)`` over the concatenated token embedding and target feature, then one decoder
layer of the target's shape; its logits come from the target's own lm_head (``V × H``), read in
full every draft forward. Per speculative step it runs ``depth`` forwards:

* the first catches up the tokens the verify step accepted (``num_new_tokens``), one logit row per
  sequence;
* a chain (vLLM V1) then runs ``k − 1`` forwards of one token per sequence;
* a static tree (``tree.shape`` ``[w1, …, wd]``) runs forward ``j`` over the ``Π_{i≤j} w_i`` nodes
  of level ``j``;
* EAGLE-2's dynamic tree (Li et al. 2024, arXiv:2406.16858; ``tree: {topk, depth,
  num_draft_tokens}`` as SGLang's ``--speculative-eagle-topk``, ``--speculative-num-steps``,
  ``--speculative-num-draft-tokens``) runs ``depth − 1`` forwards over the ``topk`` expanded
  nodes per sequence, and the verify step carries the ``num_draft_tokens − 1`` best nodes and the
  root; its acceptance is that of a tree built per step from the draft's confidence
  (:mod:`sim.acceptance.dynamic_tree`).

The head's KV (one layer) lives in the target's pool; it runs at the target's TP degree.
"""

from __future__ import annotations

import numpy as np

from sim.acceptance.dynamic_tree import DynamicTree, DynamicTreeModel
from sim.acceptance.plan import AcceptanceModel, Proposal
from sim.catalogue import BF16_BYTES, Model
from sim.drafting.base import BuildContext, FloatArray
from sim.drafting.network import DraftNetwork, NetworkCost, decoder_layer_params
from sim.drafting.overheads import DraftOverheads, load_draft_overheads
from sim.drafting.proposer import Batch, Forward, ForwardProposer
from sim.drafting.tree_verify import SGLANG_DEFAULT_TREE, reads_prefix_per_node
from sim.engine.drafter import DraftWork
from sim.errors import InvariantError, ScenarioError


def head_kv_bytes_per_token(target: Model) -> float:
    """KV bytes per token of one decoder layer of the target's shape: ``2 · n_kv · d_h · 2``."""
    # K and V of n_kv heads (an MLA target's module caches one latent row instead).
    return float(target.counts.kv_elements_per_layer * BF16_BYTES)


def eagle1_network(target: Model) -> DraftNetwork:
    """EAGLE-1's head for ``target``: fc 2H→H + one decoder layer; the target's lm_head."""
    s = target.spec
    body = 2.0 * s.hidden_size * s.hidden_size + decoder_layer_params(target)
    return DraftNetwork(
        name=f"eagle-head/{target.name}",
        body_params=body,
        head_params=float(s.vocab_size * s.hidden_size),
        resident_bytes=body * BF16_BYTES,  # the lm_head is the target's own
        num_layers=1,
        num_gemms=6,  # fc, QKV, O, gate-up, down, lm_head
        kv_bytes_per_token=head_kv_bytes_per_token(target),
        num_kv_heads=s.num_kv_heads,
        attention_flops_per_pair=float(4 * s.num_heads * s.head_dim),
    )


def tree_level_nodes(proposal: Proposal) -> list[float]:
    """Nodes per sequence that each later forward (1..depth−1) expands: levels 1..depth−1."""
    widths = proposal.tree_widths or (1,) * proposal.depth
    return [float(n) for n in np.cumprod(widths)[:-1]]


def tree_proposal(
    ctx: BuildContext, acceptance: AcceptanceModel
) -> tuple[Proposal, list[float], AcceptanceModel]:
    """The proposal, per-forward nodes and acceptance for ``speculation`` (chain, static tree or
    EAGLE-2 dynamic tree; a dynamic tree's acceptance is :class:`DynamicTreeModel` over the
    chain's rates).

    Raise ScenarioError if a dynamic tree is given for a method that drafts static trees.
    """
    spec = ctx.scenario.speculation
    tree = spec.tree
    dynamic = tree is not None and tree.shape is None
    if ctx.method == "eagle2" or dynamic:
        if ctx.method not in ("eagle2", "eagle3", "mtp"):
            raise ScenarioError(
                f"speculation.tree: {ctx.method!r} verifies a chain or a static tree.shape; "
                "a dynamic tree {topk, depth, num_draft_tokens} is method 'eagle2' (or eagle3/mtp)"
            )
        if tree is None:
            topk, depth, num_draft_tokens = SGLANG_DEFAULT_TREE
        else:
            if tree.topk is None or tree.depth is None or tree.num_draft_tokens is None:
                raise InvariantError("speculation.tree: the schema let through a partial tree")
            topk, depth, num_draft_tokens = tree.topk, tree.depth, tree.num_draft_tokens
        shape = DynamicTree(topk, depth, num_draft_tokens)
        # depth − 1 forwards over the top-k nodes expanded at each level.
        return shape.proposal(), [float(topk)] * (depth - 1), DynamicTreeModel(acceptance, shape)
    if tree is not None and tree.shape is not None:
        proposal = Proposal.static_tree(tree.shape)
        return proposal, tree_level_nodes(proposal), acceptance
    proposal = Proposal.chain(spec.num_speculative_tokens)
    return proposal, tree_level_nodes(proposal), acceptance


class EagleStrategy(ForwardProposer):
    """EAGLE-family drafting: a first (catch-up) forward, then one forward per tree level."""

    def __init__(
        self,
        name: str,
        proposal: Proposal,
        acceptance: AcceptanceModel,
        overheads: DraftOverheads,
        first: NetworkCost,
        later: NetworkCost,
        level_nodes: list[float],
        tp: int,
        branch_prefix_reads: bool = False,
    ) -> None:
        super().__init__(proposal, acceptance, overheads)
        self.name = name
        self.first = first
        self.later = later
        self.level_nodes = list(level_nodes)
        self.tp = tp
        #: Each node of a later forward reads its sequence's prefix KV itself (SGLang 0.4's
        #: draft decode: sim/drafting/tree_verify.py); False: once per sequence.
        self.branch_prefix_reads = branch_prefix_reads
        # Later forwards as columns: level index l = 1..depth-1 and the nodes drafted at each.
        self._level_index = np.arange(1, len(self.level_nodes) + 1, dtype=np.float64)[:, None]
        self._level_nodes = np.asarray(self.level_nodes, dtype=np.float64)[:, None]

    def forwards(self, batch: Batch) -> list[Forward]:
        out = [batch.catch_up(self.first.forward_s)]
        for index, nodes in enumerate(self.level_nodes, start=1):
            reads = nodes if self.branch_prefix_reads else 1.0
            out.append(batch.step_forward(index, nodes, self.later.forward_s, reads))
        return out

    def draft_time_s(self, work: DraftWork) -> FloatArray:
        """:meth:`ForwardProposer.draft_time_s` for this shape of forwards, with the later
        forwards costed together as one (levels × steps) array: the same terms, fewer calls."""
        seqs = np.asarray(work.num_seqs, dtype=np.float64)
        new = np.asarray(work.num_new_tokens, dtype=np.float64)
        context = np.asarray(work.context_tokens, dtype=np.float64)
        drafting = (seqs > 0) & (np.asarray(work.num_proposed) > 0)
        # Mean context of the drafting sequences (the context sum is 0 where none drafts).
        mean = context / np.maximum(seqs, 1.0)
        seconds = self.first.forward_s(new, seqs, context, new * mean)
        if self.level_nodes:
            index, nodes = self._level_index, self._level_nodes
            tokens = nodes * seqs
            kv_read = context + index * seqs
            if self.branch_prefix_reads:
                # Every node reads its own prefix and path: nodes · (Σc + l·B) KV tokens.
                kv_read = nodes * kv_read
            later = self.later.forward_s(tokens, tokens, kv_read, tokens * (mean + index))
            seconds = seconds + later.sum(axis=0)
        # Read the overheads now, not at construction: a fit swaps them on a built strategy.
        fixed_s = self.overheads.per_step_s + (1 + len(self.level_nodes)) * (
            self.overheads.per_forward_s
        )
        return np.asarray((fixed_s + seconds) * drafting, dtype=np.float64)

    def weight_bytes_per_gpu(self) -> float:
        resident = self.first.network.resident_bytes
        if self.later.network is not self.first.network:
            resident = max(resident, self.later.network.resident_bytes)
        return resident / self.tp

    def extra_kv_bytes_per_token(self) -> float:
        return self.later.network.kv_bytes_per_token


def build_eagle(ctx: BuildContext) -> EagleStrategy:
    """EAGLE-1 (``eagle``) or EAGLE-2 (``eagle2``) for the scenario's target.

    Raise ScenarioError if the tree form does not suit the method.
    """
    proposal, level_nodes, acceptance = tree_proposal(ctx, ctx.acceptance())
    cost = NetworkCost(eagle1_network(ctx.model), ctx.cost_model, ctx.tp)
    return EagleStrategy(
        ctx.method,
        proposal,
        acceptance,
        load_draft_overheads(ctx.engine_preset, ctx.method),
        cost,
        cost,
        level_nodes,
        ctx.tp,
        branch_prefix_reads=reads_prefix_per_node(ctx.engine_preset) and proposal.is_tree,
    )
