"""A separate small draft model: k sequential forwards with its own KV cache.

The classic scheme (Leviathan et al. 2023, arXiv:2211.17192; Chen et al. 2023, arXiv:2302.01318):
a catalogue model with the target's vocabulary drafts k tokens one forward at a time. Per step
the first forward catches up the tokens the verify step accepted (``num_new_tokens``), the next
``k − 1`` forwards take one token per sequence, and when every draft of a sequence was accepted
one more forward writes the last draft's KV so the draft cache stays in step with the target
(gpt-fast ``speculative_decode``). Each forward is costed by the draft model's own
:class:`~sim.cost_model.StepCostModel` at its TP degree ``draft_tp`` (vLLM accepts 1 or the
target's degree), on the same GPUs and efficiencies as the target. Its weights and KV cache take
GPU memory beside the target's.
"""

from __future__ import annotations

import numpy as np

from sim.acceptance.plan import AcceptanceModel, Proposal
from sim.catalogue import Model, get_model
from sim.cost_model import StepCostModel
from sim.drafting.base import BuildContext, FloatArray
from sim.drafting.overheads import DraftOverheads, load_draft_overheads
from sim.drafting.proposer import Batch, Forward, ForwardProposer
from sim.errors import ScenarioError


class DraftModelStrategy(ForwardProposer):
    """k forwards of a small model per step, plus the catch-up forward after a full accept."""

    name = "draft_model"

    def __init__(
        self,
        proposal: Proposal,
        acceptance: AcceptanceModel,
        overheads: DraftOverheads,
        draft: StepCostModel,
        target_tp: int,
        target_kv_shards: int,
    ) -> None:
        super().__init__(proposal, acceptance, overheads)
        self.draft = draft
        self.target_tp = target_tp
        self.target_kv_shards = target_kv_shards
        self.depth = proposal.depth

    @property
    def draft_model(self) -> Model:
        """The draft model."""
        return self.draft.model

    def _cost(
        self, tokens: FloatArray, logits: FloatArray, kv_read: FloatArray, pairs: FloatArray
    ) -> FloatArray:
        return np.asarray(self.draft.forward_time(0, tokens, kv_read, pairs, logits))

    def forwards(self, batch: Batch) -> list[Forward]:
        out = [batch.catch_up(self._cost)]
        for index in range(1, self.depth):
            out.append(batch.step_forward(index, 1.0, self._cost))
        # Full accept: the last draft token was never fed to the draft model; one more forward
        # over those sequences only (gpt-fast, speculative_decode).
        full = batch.num_full_accept
        out.append(
            Forward(
                full,
                full.copy(),
                batch.mean_context * full,
                full * batch.mean_context,
                batch.drafting & (full > 0),
                self._cost,
            )
        )
        return out

    def num_forwards(self) -> int:
        return self.depth

    def weight_bytes_per_gpu(self) -> float:
        # With draft_tp below the target's, the draft sits on the first draft_tp GPUs; memory is
        # planned for the fullest GPU.
        return self.draft_model.weight_bytes / self.draft.tp

    def extra_kv_bytes_per_token(self) -> float:
        # The engine divides extra KV by the target's KV shards; the draft's KV per token is
        # split over its own min(draft_tp, n_kv) shards, so scale to charge the fullest GPU.
        shards = min(self.draft.tp, self.draft_model.spec.num_kv_heads)
        return self.draft_model.kv_bytes_per_token * self.target_kv_shards / shards


def build_draft_model(ctx: BuildContext) -> DraftModelStrategy:
    """The draft-model strategy for ``speculation.draft_model`` at ``speculation.draft_tp``.

    Raise ScenarioError if no draft model is named, its vocabulary differs from the target's, or
    ``draft_tp`` is neither 1 nor the target's degree (vLLM's rule).
    """
    spec = ctx.scenario.speculation
    if spec.draft_model is None:
        raise ScenarioError(
            "speculation.draft_model: method 'draft_model' needs a draft model (a catalogue "
            "name such as llama-3.2-1b, or an inline architecture)"
        )
    draft = get_model(spec.draft_model)
    if draft.spec.vocab_size != ctx.model.spec.vocab_size:
        raise ScenarioError(
            f"speculation.draft_model: {draft.name} has a vocabulary of {draft.spec.vocab_size} "
            f"tokens but the target {ctx.model.name} has {ctx.model.spec.vocab_size}; draft and "
            "target must share a tokenizer"
        )
    draft_tp = 1 if spec.draft_tp is None else spec.draft_tp
    if draft_tp not in (1, ctx.tp):
        raise ScenarioError(
            f"speculation.draft_tp: {draft_tp} must be 1 or the target's tensor-parallel degree "
            f"{ctx.tp} (vLLM SpeculativeConfig: draft_tensor_parallel_size)"
        )
    if draft.spec.num_heads % draft_tp != 0:
        raise ScenarioError(
            f"speculation.draft_tp: {draft_tp} does not divide {draft.name}'s "
            f"{draft.spec.num_heads} attention heads"
        )
    if spec.tree is not None:
        raise ScenarioError("speculation.tree: a draft model proposes a chain; remove tree")
    base = ctx.cost_model
    # The draft model runs in the verifier's engine: the same CUDA-graph capture and launch costs.
    draft_cost = StepCostModel(
        draft, base.gpu, draft_tp, base.efficiency, 0.0, 0.0, host=base.host_costs
    )
    return DraftModelStrategy(
        Proposal.chain(spec.num_speculative_tokens),
        ctx.acceptance(),
        load_draft_overheads(ctx.engine_preset, "draft_model"),
        draft_cost,
        ctx.tp,
        min(ctx.tp, ctx.model.spec.num_kv_heads),
    )
