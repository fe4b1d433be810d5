"""The drafting methods a scenario can name, in one place: each method's settings (the
``speculation:`` section, a union discriminated on ``method``), the engines that run it and in
which proposal form (:data:`SUPPORT`), and the function that builds its strategy
(:data:`BUILDERS`, resolved by :mod:`sim.drafting`).

Methods that every engine runs only as a chain of drafts take :class:`ChainSpeculationConfig`,
which refuses a ``tree`` when the scenario is loaded (``speculation.tree: ...``); the others take
:class:`TreeSpeculationConfig`. Which engine runs which tree form is still checked when the run is
built (:func:`sim.drafting.check_support`), since it depends on ``engine.preset``.

Support, per engine:

* vLLM V1: the speculative decoding docs list EAGLE/EAGLE-3, MTP, draft models, n-gram and Medusa
  proposers (docs.vllm.ai, features/speculative_decoding); all draft chains. Static trees exist only
  behind the experimental tree-attention backend (``speculative_token_tree``, vllm-project/vllm PR
  #20401, EAGLE proposer); there is no dynamic (EAGLE-2) tree.
* SGLang: ``--speculative-algorithm`` EAGLE (EAGLE-2: dynamic tree, or a chain with topk 1),
  EAGLE3, MTP (NextN, on the EAGLE machinery), STANDALONE (draft model) and NGRAM
  (docs.sglang.io, advanced_features/speculative_decoding); no Medusa.
* Lookahead decoding (Fu et al. 2024) is in neither engine; TensorRT-LLM runs it (below).
* Suffix decoding (``suffix``) and parallel drafting (``p_eagle``) are vLLM V1's only; SGLang
  announced suffix decoding as coming (Snowflake engineering blog, 2026).
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, Tag, field_validator, model_validator

from sim.acceptance.config import AcceptanceConfig
from sim.catalogue import ModelSpec
from sim.inputs import SCHEMA_CONFIG
from sim.model_names import catalogue_model

_STRICT = SCHEMA_CONFIG

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

#: Draft trees: EAGLE-2's published trees hold 60 draft tokens (Li et al. 2024) and Medusa's
#: default sparse tree 63 (``mc_sim_7b_63``); a thousand nodes per verify step is past both.
MAX_TREE_WIDTH = 64
MAX_TREE_DEPTH = 64
MAX_TREE_NODES = 1024

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
    (``speculation.policy``, :mod:`sim.acceptance.policies`) may change the chain's length.
    ``proposes_on_match``: it drafts by looking the context up and proposes nothing where the
    lookup finds no match (``speculation.acceptance.ngram_match_rate`` applies).
    ``trace_field``: the field of the shipped Llama-3.1-8B traces that measured its acceptance
    (SpecDecode-Bench, arXiv:2601.11580: ``acc_eagle`` EAGLE-3 drafts, ``acc_ngram`` n-gram
    lookup), or None.
    ``fitted_draft_overhead``: its fixed drafting overheads are fitted to measured TPOTs
    (``calibration.draft_overhead``: vLLM issue #20780, EAGLE-1 and EAGLE-3 chains at batch 1).
    """

    builder: str
    chain_only: bool
    reads_hidden_states: bool
    adaptive_k: bool
    proposes_on_match: bool
    trace_field: str | None
    fitted_draft_overhead: bool


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
    ),
    "draft_model": MethodFacts(
        builder="sim.drafting.draft_model:build_draft_model",
        chain_only=True,
        reads_hidden_states=False,
        adaptive_k=True,
        proposes_on_match=False,
        trace_field=None,
        fitted_draft_overhead=False,
    ),
    "ngram": MethodFacts(
        builder="sim.drafting.ngram:build_ngram",
        chain_only=True,
        reads_hidden_states=False,
        adaptive_k=False,
        proposes_on_match=True,
        trace_field="acc_ngram",
        fitted_draft_overhead=False,
    ),
    "medusa": MethodFacts(
        builder="sim.drafting.medusa:build_medusa",
        chain_only=False,
        reads_hidden_states=False,
        adaptive_k=False,
        proposes_on_match=False,
        trace_field=None,
        fitted_draft_overhead=False,
    ),
    "eagle": MethodFacts(
        builder="sim.drafting.eagle:build_eagle",
        chain_only=False,
        reads_hidden_states=True,
        adaptive_k=True,
        proposes_on_match=False,
        trace_field=None,
        fitted_draft_overhead=True,
    ),
    "eagle2": MethodFacts(
        builder="sim.drafting.eagle:build_eagle",
        chain_only=False,
        reads_hidden_states=True,
        adaptive_k=False,
        proposes_on_match=False,
        trace_field=None,
        fitted_draft_overhead=False,
    ),
    "eagle3": MethodFacts(
        builder="sim.drafting.eagle3:build_eagle3",
        chain_only=False,
        reads_hidden_states=True,
        adaptive_k=True,
        proposes_on_match=False,
        trace_field="acc_eagle",
        fitted_draft_overhead=True,
    ),
    "mtp": MethodFacts(
        builder="sim.drafting.mtp:build_mtp",
        chain_only=False,
        reads_hidden_states=True,
        adaptive_k=True,
        proposes_on_match=False,
        trace_field=None,
        fitted_draft_overhead=False,
    ),
    "lookahead": MethodFacts(
        builder="sim.drafting.lookahead:build_lookahead",
        chain_only=False,
        reads_hidden_states=False,
        adaptive_k=False,
        proposes_on_match=False,
        trace_field=None,
        fitted_draft_overhead=False,
    ),
    "suffix": MethodFacts(
        builder="sim.drafting.suffix:build_suffix",
        chain_only=True,
        reads_hidden_states=False,
        adaptive_k=False,
        proposes_on_match=True,
        trace_field=None,
        fitted_draft_overhead=False,
    ),
    "p_eagle": MethodFacts(
        builder="sim.drafting.parallel:build_parallel_eagle",
        chain_only=True,
        reads_hidden_states=False,
        adaptive_k=False,
        proposes_on_match=False,
        trace_field=None,
        fitted_draft_overhead=False,
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


class TreeConfig(BaseModel):
    """A draft tree: a static shape (children per node at each depth) or an EAGLE-2 dynamic tree."""

    model_config = _STRICT
    shape: list[int] | None = Field(default=None, max_length=MAX_TREE_DEPTH)
    topk: int | None = Field(default=None, ge=1, le=MAX_TREE_WIDTH)
    depth: int | None = Field(default=None, ge=1, le=MAX_TREE_DEPTH)
    num_draft_tokens: int | None = Field(default=None, ge=1, le=MAX_TREE_NODES)

    @model_validator(mode="after")
    def _one_form(self) -> TreeConfig:
        dynamic = (self.topk, self.depth, self.num_draft_tokens)
        if self.shape is not None:
            if any(v is not None for v in dynamic):
                raise ValueError("give either shape or topk/depth/num_draft_tokens, not both")
            if not self.shape or any(not 1 <= w <= MAX_TREE_WIDTH for w in self.shape):
                raise ValueError(
                    f"shape must be a non-empty list of widths in [1, {MAX_TREE_WIDTH}]"
                )
            if math.prod(self.shape) > MAX_TREE_NODES:
                raise ValueError(
                    f"shape: the deepest level alone holds more than {MAX_TREE_NODES} nodes"
                )
        elif any(v is None for v in dynamic):
            raise ValueError("a dynamic tree needs topk, depth and num_draft_tokens")
        return self


class PolicyConfig(BaseModel):
    """How many drafts each verify step carries, chosen per step (:mod:`sim.acceptance.policies`):
    ``name`` one of its policies, ``params`` that policy's settings."""

    model_config = _STRICT
    name: str
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        from sim.acceptance.policies import POLICY_NAMES

        if value not in POLICY_NAMES:
            raise ValueError(f"unknown policy {value!r}; known: {', '.join(POLICY_NAMES)}")
        return value


class _SpeculationSettings(BaseModel):
    """The settings every method takes: how many tokens it drafts, the draft model where one
    drafts, how often drafts are accepted, and a per-step policy for k."""

    model_config = _STRICT
    method: str = "none"
    num_speculative_tokens: int = Field(default=3, ge=1, le=32)
    draft_model: str | ModelSpec | None = None
    draft_tp: int | None = Field(default=None, ge=1, le=8)
    tree: TreeConfig | None = None
    acceptance: AcceptanceConfig | None = None
    #: k chosen per step by a policy; absent: ``num_speculative_tokens`` at every step. With a
    #: policy, ``num_speculative_tokens`` is the most drafts a step may carry.
    policy: PolicyConfig | None = None
    #: Run a method the chosen engine does not implement (a what-if study; results say so).
    allow_unsupported: bool = False

    @field_validator("draft_model")
    @classmethod
    def _known_draft(cls, value: str | ModelSpec | None) -> str | ModelSpec | None:
        return catalogue_model(value)


class ChainSpeculationConfig(_SpeculationSettings):
    """Which drafting strategy, how many tokens it drafts, and how often they are accepted.

    For the methods every engine runs as a chain of drafts (none, draft_model, ngram, suffix,
    p_eagle): a ``tree`` is refused.
    """

    method: ChainMethodName = "none"
    tree: None = None

    @field_validator("tree", mode="before")
    @classmethod
    def _no_tree(cls, value: Any, info: Any) -> None:
        if value is not None:
            method = info.data.get("method", "none")
            raise ValueError(
                f"method {method!r} drafts a chain on every engine; no engine verifies its "
                f"drafts as a tree (tree methods: {', '.join(typing.get_args(TreeMethodName))})"
            )
        return None


class TreeSpeculationConfig(_SpeculationSettings):
    """Which drafting strategy, how many tokens it drafts, and how often they are accepted.

    For the methods some engine verifies as a tree of drafts (medusa, eagle, eagle2, eagle3,
    mtp) and lookahead: ``tree`` gives a static shape or an EAGLE-2 dynamic tree (lookahead's
    ``[G, 1, ..., 1]``: G guesses of N − 1 tokens).
    """

    method: TreeMethodName
    tree: TreeConfig | None = None


def _method_family(value: Any) -> str | None:
    """The union tag of a ``speculation`` value by its method (``none`` when absent): None for
    an unknown method (the scenario reports it naming every known one) or a value that is not
    a mapping."""
    if isinstance(value, dict):
        method = value.get("method", "none")
    elif isinstance(value, _SpeculationSettings):
        method = value.method
    else:
        return None  # not a mapping: the scenario says so
    if method in CHAIN_ONLY_METHODS:
        return CHAIN_TAG
    return TREE_TAG if method in METHODS else None


#: The union tags (never a scenario key, so error messages can leave them out of key paths).
CHAIN_TAG, TREE_TAG = "chain-method", "tree-method"
#: The error type of an unknown ``speculation.method``.
UNKNOWN_METHOD = "unknown_method"

#: The ``speculation:`` section: one settings model per method family, chosen by ``method``.
SpeculationConfig = Annotated[
    Annotated[ChainSpeculationConfig, Tag(CHAIN_TAG)]
    | Annotated[TreeSpeculationConfig, Tag(TREE_TAG)],
    Discriminator(
        _method_family,
        custom_error_type=UNKNOWN_METHOD,
        custom_error_message="unknown method",
    ),
]


def no_speculation() -> ChainSpeculationConfig:
    """The default ``speculation`` section: method ``none``."""
    return ChainSpeculationConfig()
