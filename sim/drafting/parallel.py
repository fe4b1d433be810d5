"""Parallel drafting (P-EAGLE): one draft forward proposes all k tokens.

An EAGLE-3 head drafts its k tokens with k sequential forwards; a parallel-capable head (P-EAGLE,
vLLM ``"parallel_drafting": true`` with ``method: eagle3`` since vLLM 0.16, PR #32887; heads
published for gpt-oss-20b/120b and Qwen3-Coder-30B-A3B) feeds the catch-up tokens and ``k − 1``
placeholder positions through the head at once and reads all ``k`` drafts from that one pass. Its
cost is one forward of ``t_i + k − 1`` tokens per sequence, each of the ``k`` last positions with a
logit row, instead of ``k`` forwards: the later forwards' fixed costs (weight reads of the head and
its reduced lm_head, launch) are paid once. A chain only: the single pass yields one path.
"""

from __future__ import annotations

from sim.drafting.base import BuildContext, FloatArray
from sim.drafting.eagle import EagleStrategy, tree_proposal
from sim.drafting.eagle3 import eagle3_networks
from sim.drafting.network import NetworkCost
from sim.drafting.overheads import load_draft_overheads
from sim.drafting.proposer import Batch, Forward, ForwardProposer
from sim.engine.drafter import DraftWork
from sim.errors import ScenarioError


class ParallelEagleStrategy(EagleStrategy):
    """EAGLE-3 heads drafting every position in one forward (module docstring)."""

    def forwards(self, batch: Batch) -> list[Forward]:
        assert self.proposal is not None  # built with a chain by build_parallel_eagle
        k = float(self.proposal.num_draft_tokens)
        placeholders = (k - 1.0) * batch.num_seqs
        tokens = batch.num_new_tokens + placeholders
        rows = batch.num_seqs * k
        return [
            Forward(
                tokens,
                rows,
                batch.context_tokens + placeholders,
                tokens * batch.mean_context + placeholders * k / 2.0,
                batch.drafting,
                self.first.forward_s,
            )
        ]

    def draft_time_s(self, work: DraftWork) -> FloatArray:
        """One forward per step (the generic per-forward sum of the proposer)."""
        return ForwardProposer.draft_time_s(self, work)


def build_parallel_eagle(ctx: BuildContext) -> ParallelEagleStrategy:
    """P-EAGLE drafting of ``num_speculative_tokens`` tokens in one head forward.

    Raise ScenarioError if a tree is given.
    """
    if ctx.scenario.speculation.tree is not None:
        raise ScenarioError(
            "speculation.tree: parallel drafting proposes one chain per pass; remove tree"
        )
    proposal, _, acceptance = tree_proposal(ctx, ctx.acceptance())
    first, _later = eagle3_networks(ctx.model)
    cost = NetworkCost(first, ctx.cost_model, ctx.tp)
    return ParallelEagleStrategy(
        "p_eagle",
        proposal,
        acceptance,
        load_draft_overheads(ctx.engine_preset, "eagle3"),
        cost,
        cost,
        [],
        ctx.tp,
    )
