"""N-gram (prompt lookup) drafting: a CPU search of the sequence's own tokens, no GPU work.

The proposer (Saxena 2023, "prompt lookup decoding"; vLLM ``NgramProposer``) looks for the last
``n`` tokens (``prompt_lookup_min ≤ n ≤ prompt_lookup_max``) earlier in the prompt and output and
proposes the ``k`` tokens that followed the match. A step without a match proposes nothing; the
acceptance plan already draws those misses (``ngram_match_rate`` or the traces' ``acc_ngram``).

Its cost is CPU time the GPU waits for between steps (vLLM V1 runs it after sampling, before the
next step is scheduled):

``T_draft = per_step_s + cpu_per_seq_s · B + cpu_per_context_token_s · Σ n_i``

The values are stated assumptions in ``sim/data/draft_overheads.yaml`` (no published timing of the
lookup was found): a linear scan of a numba-compiled KMP match over each context.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.acceptance.plan import AcceptanceModel, Proposal
from sim.drafting.base import BuildContext, FloatArray, Strategy
from sim.drafting.overheads import DraftOverheads, load_draft_overheads
from sim.engine.drafter import DraftWork
from sim.errors import ScenarioError


class NgramStrategy(Strategy):
    """Prompt-lookup drafting: CPU time per drafting sequence and per context token."""

    name = "ngram"

    def __init__(
        self, proposal: Proposal, acceptance: AcceptanceModel, overheads: DraftOverheads
    ) -> None:
        super().__init__(proposal, acceptance)
        self.overheads = overheads

    def draft_time_s(self, work: DraftWork) -> FloatArray:
        seqs = np.atleast_1d(np.asarray(work.num_seqs, dtype=np.float64))
        context = np.atleast_1d(np.asarray(work.context_tokens, dtype=np.float64))
        o = self.overheads
        cpu = o.per_step_s + o.cpu_per_seq_s * seqs + o.cpu_per_context_token_s * context
        # Every sequence that goes on decoding is searched, whether or not it finds a match.
        return np.asarray(np.where(seqs > 0, cpu, 0.0), dtype=np.float64)

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["draft_overheads"] = {
            "per_step_s": self.overheads.per_step_s,
            "cpu_per_seq_s": self.overheads.cpu_per_seq_s,
            "cpu_per_context_token_s": self.overheads.cpu_per_context_token_s,
        }
        return out


def build_ngram(ctx: BuildContext) -> NgramStrategy:
    """N-gram drafting of ``num_speculative_tokens`` tokens.

    Raise ScenarioError if a tree is given (the lookup proposes one continuation).
    """
    return build_lookup(ctx, NgramStrategy, "n-gram lookup")


def build_lookup(ctx: BuildContext, kind: type[NgramStrategy], what: str) -> Any:
    """A CPU-lookup strategy of class ``kind`` (its ``name`` keys its draft overheads) drafting
    a chain of ``num_speculative_tokens``. Raise ScenarioError naming ``what`` if a tree is given.
    """
    spec = ctx.scenario.speculation
    if spec.tree is not None:
        raise ScenarioError(f"speculation.tree: {what} proposes a chain; remove tree")
    return kind(
        Proposal.chain(spec.num_speculative_tokens),
        ctx.acceptance(),
        load_draft_overheads(ctx.engine_preset, kind.name),
    )
