"""The drafting methods and what the simulator knows of each, stated once: the method names,
the proposal forms each engine runs (:data:`SUPPORT`) and one row of facts per method
(:data:`METHOD_TABLE`: builder, chain-only settings, hidden-state drafter, adaptive k, context
lookup, trace field, fitted overheads), from which every method list is derived.
:mod:`sim.speculation` builds the ``speculation:`` settings on them and re-exports every name.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Literal

#: Drafting strategies a scenario can name (``speculation.method``): the type, and its values.
MethodName = Literal[
    "none",
    "draft_model",
    "ngram",
    "medusa",
    "eagle",
    "eagle2",
    "eagle3",
    "mtp",
    "lookahead",
    "suffix",
    "p_eagle",
]
METHODS: tuple[str, ...] = typing.get_args(MethodName)


#: Proposal forms each engine runs, per method: "supported" or "experimental" (runs behind an
#: experimental engine flag; results say so). Anything absent is refused.
SUPPORT: dict[str, dict[str, dict[str, str]]] = {
    # vLLM 0.5-0.6 (V0 spec-decode worker): draft models, n-gram lookup, Medusa and EAGLE heads
    # proposing chains (vLLM v0.6.0 docs, "Speculative decoding"); no trees, no EAGLE-3, no MTP.
    "vllm-v0": {
        "none": {"chain": "supported"},
        "draft_model": {"chain": "supported"},
        "ngram": {"chain": "supported"},
        "medusa": {"chain": "supported"},
        "eagle": {"chain": "supported"},
    },
    "vllm-v1": {
        "none": {"chain": "supported"},
        "draft_model": {"chain": "supported"},
        "ngram": {"chain": "supported"},
        "medusa": {
            "chain": "supported",
            # vLLM's tree-attention backend verifies static trees (PR #20401); its Medusa
            # proposer drafts top-1 chains, so a Medusa tree is the Medusa paper's tree on it.
            "static_tree": "experimental",
        },
        "eagle": {"chain": "supported", "static_tree": "experimental"},
        "eagle3": {"chain": "supported", "static_tree": "experimental"},
        "mtp": {"chain": "supported"},
        # vLLM docs, features/speculative_decoding/suffix (Arctic Inference plugin).
        "suffix": {"chain": "supported"},
        # P-EAGLE: method eagle3 with "parallel_drafting": true, vLLM 0.16+ (PR #32887).
        "p_eagle": {"chain": "supported"},
    },
    # TensorRT-LLM 1.0: the PyTorch backend drafts chains with draft models, EAGLE-3, n-gram
    # and MTP (docs features/speculative-decoding: "a single sequence of draft tokens"); the
    # TensorRT engine backend runs Medusa trees (medusa_choices), EAGLE-1/2 trees and lookahead
    # (docs advanced/speculative-decoding, 0.18).
    "trtllm": {
        "none": {"chain": "supported"},
        "draft_model": {"chain": "supported"},
        "ngram": {"chain": "supported"},
        "medusa": {"chain": "supported", "static_tree": "supported"},
        "eagle": {"static_tree": "supported"},
        "eagle2": {"dynamic_tree": "supported"},
        "eagle3": {"chain": "supported"},
        "mtp": {"chain": "supported"},
        "lookahead": {"chain": "supported"},
    },
    # llama.cpp: llama-server drafts with a second, smaller model (--model-draft,
    # examples/speculative and the server's speculative decoding), a chain.
    "llamacpp": {
        "none": {"chain": "supported"},
        "draft_model": {"chain": "supported"},
    },
    "sglang": {
        "none": {"chain": "supported"},
        "draft_model": {"chain": "supported"},
        "ngram": {"chain": "supported"},
        "eagle": {"chain": "supported"},
        "eagle2": {"dynamic_tree": "supported"},
        "eagle3": {"chain": "supported", "dynamic_tree": "supported"},
        "mtp": {"chain": "supported", "dynamic_tree": "supported"},
    },
}


@dataclass(frozen=True)
class MethodFacts:
    """What the simulator knows of one drafting method, stated once (every fact is required, so
    a method added to :data:`METHOD_TABLE` must state each).

    ``builder``: its strategy's builder, ``module:function`` (imported by :mod:`sim.drafting`
    when it is loaded: the builders' modules import the scenario, which imports this module).
    ``chain_only``: every engine runs it as a chain of drafts, so its settings take no ``tree``
    (:data:`ChainMethodName`; each form :data:`SUPPORT` lists for it is ``chain``).
    ``reads_hidden_states``: its drafter reads the target's hidden states (vLLM's
    ``SpeculativeConfig.use_eagle()``: eagle, eagle3, mtp in vllm/config/speculative.py; EAGLE-2
    trees run as eagle there).
    ``adaptive_k``: it drafts a chain one token per draft forward, so a per-step policy
    (``speculation.policy``, :mod:`sim.engine.policies`) may change the chain's length.
    ``proposes_on_match``: it drafts by looking the context up and proposes nothing where the
    lookup finds no match (``speculation.acceptance.ngram_match_rate`` applies).
    ``trace_field``: the field of the shipped Llama-3.1-8B traces that measured its acceptance
    (SpecDecode-Bench, arXiv:2601.11580: ``acc_eagle`` EAGLE-3 drafts, ``acc_ngram`` n-gram
    lookup), or None.
    ``fitted_draft_overhead``: its fixed drafting overheads are fitted to measured TPOTs
    (``calibration.draft_overhead``: vLLM issue #20780, EAGLE-1 and EAGLE-3 chains at batch 1).
    ``profile_method``: the method whose shipped acceptance profiles describe its drafts (itself,
    but EAGLE-2 drafts with EAGLE-1's heads and only changes the tree: Li et al. 2024,
    arXiv:2406.16858, so it reads EAGLE-1's chain rates).
    """

    builder: str
    chain_only: bool
    reads_hidden_states: bool
    adaptive_k: bool
    proposes_on_match: bool
    trace_field: str | None
    fitted_draft_overhead: bool
    profile_method: str


#: The method table: one row per method of :data:`MethodName`, in its order.
METHOD_TABLE: dict[str, MethodFacts] = {
    "none": MethodFacts(
        builder="sim.drafting.base:build_no_speculation",
        chain_only=True,
        reads_hidden_states=False,
        adaptive_k=False,
        proposes_on_match=False,
        trace_field=None,
        fitted_draft_overhead=False,
        profile_method="none",
    ),
    "draft_model": MethodFacts(
        builder="sim.drafting.draft_model:build_draft_model",
        chain_only=True,
        reads_hidden_states=False,
        adaptive_k=True,
        proposes_on_match=False,
        trace_field=None,
        fitted_draft_overhead=False,
        profile_method="draft_model",
    ),
    "ngram": MethodFacts(
        builder="sim.drafting.ngram:build_ngram",
        chain_only=True,
        reads_hidden_states=False,
        adaptive_k=False,
        proposes_on_match=True,
        trace_field="acc_ngram",
        fitted_draft_overhead=False,
        profile_method="ngram",
    ),
    "medusa": MethodFacts(
        builder="sim.drafting.medusa:build_medusa",
        chain_only=False,
        reads_hidden_states=False,
        adaptive_k=False,
        proposes_on_match=False,
        trace_field=None,
        fitted_draft_overhead=False,
        profile_method="medusa",
    ),
    "eagle": MethodFacts(
        builder="sim.drafting.eagle:build_eagle",
        chain_only=False,
        reads_hidden_states=True,
        adaptive_k=True,
        proposes_on_match=False,
        trace_field=None,
        fitted_draft_overhead=True,
        profile_method="eagle",
    ),
    "eagle2": MethodFacts(
        builder="sim.drafting.eagle:build_eagle",
        chain_only=False,
        reads_hidden_states=True,
        adaptive_k=False,
        proposes_on_match=False,
        trace_field=None,
        fitted_draft_overhead=False,
        profile_method="eagle",
    ),
    "eagle3": MethodFacts(
        builder="sim.drafting.eagle3:build_eagle3",
        chain_only=False,
        reads_hidden_states=True,
        adaptive_k=True,
        proposes_on_match=False,
        trace_field="acc_eagle",
        fitted_draft_overhead=True,
        profile_method="eagle3",
    ),
    "mtp": MethodFacts(
        builder="sim.drafting.mtp:build_mtp",
        chain_only=False,
        reads_hidden_states=True,
        adaptive_k=True,
        proposes_on_match=False,
        trace_field=None,
        fitted_draft_overhead=False,
        profile_method="mtp",
    ),
    "lookahead": MethodFacts(
        builder="sim.drafting.lookahead:build_lookahead",
        chain_only=False,
        reads_hidden_states=False,
        adaptive_k=False,
        proposes_on_match=False,
        trace_field=None,
        fitted_draft_overhead=False,
        profile_method="lookahead",
    ),
    "suffix": MethodFacts(
        builder="sim.drafting.suffix:build_suffix",
        chain_only=True,
        reads_hidden_states=False,
        adaptive_k=False,
        proposes_on_match=True,
        trace_field=None,
        fitted_draft_overhead=False,
        profile_method="suffix",
    ),
    "p_eagle": MethodFacts(
        builder="sim.drafting.parallel:build_parallel_eagle",
        chain_only=True,
        reads_hidden_states=False,
        adaptive_k=False,
        proposes_on_match=False,
        trace_field=None,
        fitted_draft_overhead=False,
        profile_method="p_eagle",
    ),
}


def _methods_where(fact: str) -> tuple[str, ...]:
    return tuple(method for method, facts in METHOD_TABLE.items() if getattr(facts, fact))


#: Each method's builder, as ``module:function`` (the table's ``builder`` column).
BUILDERS: dict[str, str] = {method: facts.builder for method, facts in METHOD_TABLE.items()}

#: Methods whose settings take no ``tree``: every engine runs them as a chain of drafts (each
#: form :data:`SUPPORT` lists for them is ``chain``; a test holds this, and that the table's
#: ``chain_only`` column is this type's values).
ChainMethodName = Literal["none", "draft_model", "ngram", "suffix", "p_eagle"]
CHAIN_ONLY_METHODS: tuple[str, ...] = _methods_where("chain_only")
#: Methods whose settings take a ``tree``: some engine verifies their drafts as a tree, or the
#: method reads its own shape from it (lookahead: ``tree.shape: [G, 1, ..., 1]``, G guesses).
TreeMethodName = Literal["medusa", "eagle", "eagle2", "eagle3", "mtp", "lookahead"]
#: Methods whose drafter reads the target's hidden states.
HIDDEN_STATE_DRAFTERS: tuple[str, ...] = _methods_where("reads_hidden_states")
#: Methods whose chain length a per-step policy may change.
ADAPTIVE_METHODS: tuple[str, ...] = _methods_where("adaptive_k")
#: Methods that propose nothing where their context lookup finds no match.
LOOKUP_METHODS: tuple[str, ...] = _methods_where("proposes_on_match")
#: The shipped-trace field that measured each method's acceptance, for the methods one did.
TRACE_METHODS: dict[str, str] = {
    method: facts.trace_field
    for method, facts in METHOD_TABLE.items()
    if facts.trace_field is not None
}


def default_trace_field(method: str) -> str:
    """The trace field a ``speculation.acceptance.trace`` without ``trace_field`` is read from:
    the one that measured ``method``'s acceptance, else EAGLE-3's (``acc_eagle``)."""
    return TRACE_METHODS.get(method, "acc_eagle")


#: Methods whose drafting overheads ``calibration.draft_overhead`` fits, in the order it reads
#: their measured rows.
FITTED_OVERHEAD_METHODS: tuple[str, ...] = _methods_where("fitted_draft_overhead")

#: Methods that read another method's acceptance profiles, and whose (EAGLE-2: EAGLE-1's).
PROFILE_METHOD: dict[str, str] = {
    method: facts.profile_method
    for method, facts in METHOD_TABLE.items()
    if facts.profile_method != method
}
