"""Suffix decoding (vLLM ``method: suffix``, Arctic Inference; Oliaro et al., SuffixDecoding,
arXiv:2411.04975): drafts from a suffix tree of the prompt and earlier outputs, on the CPU.

Like n-gram lookup it needs no draft network: the tree matches the sequence's last tokens and
proposes the most frequent continuation, up to ``num_speculative_tokens`` (vLLM suggests 16-32;
it speculates fewer where the tree's counts are low). A step without a match proposes nothing,
drawn by the acceptance model's match rate as for n-gram. The lookup walks the tree from the
last tokens, so its CPU time grows with the sequences, not their context:

``T_draft = per_step_s + cpu_per_seq_s · B`` (``sim/data/draft_overheads.yaml``, an assumption:
no absolute timing of the lookup was found).
"""

from __future__ import annotations

from sim.drafting.base import BuildContext
from sim.drafting.ngram import NgramStrategy, build_lookup


class SuffixStrategy(NgramStrategy):
    """Suffix-tree drafting: CPU time per drafting sequence (the n-gram strategy's terms)."""

    name = "suffix"


def build_suffix(ctx: BuildContext) -> SuffixStrategy:
    """Suffix decoding of up to ``num_speculative_tokens`` tokens.

    Raise ScenarioError if a tree is given (the lookup proposes one continuation here).
    """
    strategy: SuffixStrategy = build_lookup(ctx, SuffixStrategy, "suffix decoding")
    return strategy
