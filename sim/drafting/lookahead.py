"""Lookahead decoding: Jacobi iterations and an n-gram pool, with no draft model.

Fu, Bailis, Stoica, Zhang 2024 ("Break the Sequential Dependency of LLM Inference Using Lookahead
Decoding", arXiv:2402.02057, §3): each step the target itself computes two branches beside the
input token. The lookahead branch holds a window of ``W`` future positions over ``N − 1``
Jacobi levels (``W·(N − 1)`` tokens) whose outputs refill an n-gram pool; the verification branch
carries up to ``G`` pool n-grams that start with the last token, ``N − 1`` tokens each, checked
in parallel.
So the verify step computes ``1 + W·(N − 1) + G·(N − 1)`` tokens per sequence: the lookahead window
goes to the engine as ``extra_tokens_per_decode`` (budget and KV slots, never committed) and the
guesses as drafts, a tree of ``G`` disjoint chains (``widths (G, 1, …, 1)``).

Scenario keys: ``num_speculative_tokens`` is ``N − 1``; ``tree.shape: [G, 1, …]`` sets ``G`` and
``N − 1`` at once; ``W = G`` as in the paper's configurations. Without a tree, ``W = G = 15``, the
paper's setting for 7B models on an A100 (§5.1). Drafting costs only the pool update on the CPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.acceptance.plan import AcceptanceModel, Proposal
from sim.drafting.base import BuildContext, FloatArray, Strategy
from sim.drafting.overheads import DraftOverheads, load_draft_overheads
from sim.engine.drafter import DraftWork
from sim.errors import ScenarioError

#: Lookahead window and guess count when no tree is given (Fu et al. 2024, §5.1, 7B models).
DEFAULT_WINDOW = 15


class LookaheadStrategy(Strategy):
    """Jacobi window computed inside the verify step; n-gram guesses as drafts."""

    name = "lookahead"

    def __init__(
        self,
        proposal: Proposal,
        acceptance: AcceptanceModel,
        overheads: DraftOverheads,
        window: int,
        ngram_size: int,
    ) -> None:
        super().__init__(proposal, acceptance)
        self.overheads = overheads
        self.window = window
        self.ngram_size = ngram_size
        # W·(N − 1) lookahead-branch tokens per decoding sequence (Fu et al. 2024, §3.1).
        self.extra_tokens_per_decode = window * (ngram_size - 1)

    def draft_time_s(self, work: DraftWork) -> FloatArray:
        seqs = np.atleast_1d(np.asarray(work.num_seqs, dtype=np.float64))
        o = self.overheads
        return np.asarray(
            np.where(seqs > 0, o.per_step_s + o.cpu_per_seq_s * seqs, 0.0), dtype=np.float64
        )

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(
            window=self.window,
            ngram_size=self.ngram_size,
            extra_tokens_per_decode=self.extra_tokens_per_decode,
        )
        return out


def build_lookahead(ctx: BuildContext) -> LookaheadStrategy:
    """Lookahead decoding with ``N − 1 = num_speculative_tokens`` (or ``len(tree.shape)``).

    Raise ScenarioError if the tree is not ``[G, 1, …, 1]``.
    """
    spec = ctx.scenario.speculation
    tree = spec.tree
    if tree is None:
        guesses, length = DEFAULT_WINDOW, spec.num_speculative_tokens
    elif tree.shape is None or any(width != 1 for width in tree.shape[1:]):
        raise ScenarioError(
            "speculation.tree: lookahead verifies G disjoint n-grams; give tree.shape as "
            f"[G, 1, ..., 1], got {tree.shape if tree.shape is not None else 'a dynamic tree'}"
        )
    else:
        guesses, length = tree.shape[0], len(tree.shape)
    proposal = Proposal.static_tree((guesses,) + (1,) * (length - 1))
    return LookaheadStrategy(
        proposal,
        ctx.acceptance(),
        load_draft_overheads(ctx.engine_preset, "lookahead"),
        window=guesses,
        ngram_size=length + 1,
    )
