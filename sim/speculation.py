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
from typing import Annotated, Any

from pydantic import BaseModel, Discriminator, Field, Tag, field_validator, model_validator

from sim.acceptance.config import AcceptanceConfig
from sim.catalogue import ModelSpec
from sim.inputs import SCHEMA_CONFIG
from sim.method_table import (
    ADAPTIVE_METHODS,
    BUILDERS,
    CHAIN_ONLY_METHODS,
    FITTED_OVERHEAD_METHODS,
    HIDDEN_STATE_DRAFTERS,
    LOOKUP_METHODS,
    METHOD_TABLE,
    METHODS,
    PROFILE_METHOD,
    SUPPORT,
    TRACE_METHODS,
    ChainMethodName,
    MethodFacts,
    MethodName,
    TreeMethodName,
    default_trace_field,
)
from sim.model_names import draft_catalogue_model

#: The method facts are read through this module as well (from :mod:`sim.method_table`).
__all__ = [
    "ADAPTIVE_METHODS",
    "BUILDERS",
    "CHAIN_ONLY_METHODS",
    "FITTED_OVERHEAD_METHODS",
    "HIDDEN_STATE_DRAFTERS",
    "LOOKUP_METHODS",
    "MAX_TREE_DEPTH",
    "MAX_TREE_NODES",
    "MAX_TREE_WIDTH",
    "METHODS",
    "METHOD_TABLE",
    "PROFILE_METHOD",
    "SUPPORT",
    "TRACE_METHODS",
    "UNKNOWN_METHOD",
    "ChainMethodName",
    "ChainSpeculationConfig",
    "MethodFacts",
    "MethodName",
    "PolicyConfig",
    "SpeculationConfig",
    "TreeConfig",
    "TreeMethodName",
    "TreeSpeculationConfig",
    "default_trace_field",
    "no_speculation",
]

_STRICT = SCHEMA_CONFIG

#: Draft trees: EAGLE-2's published trees hold 60 draft tokens (Li et al. 2024) and Medusa's
#: default sparse tree 63 (``mc_sim_7b_63``); a thousand nodes per verify step is past both.
MAX_TREE_WIDTH = 64
MAX_TREE_DEPTH = 64
MAX_TREE_NODES = 1024


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
    """How many drafts each verify step carries, chosen per step (:mod:`sim.engine.policies`):
    ``name`` one of its policies, ``params`` that policy's settings."""

    model_config = _STRICT
    name: str
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        from sim.engine.policies import POLICY_NAMES

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
        return draft_catalogue_model(value)


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
