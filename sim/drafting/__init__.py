"""Drafting strategies, one module each, chosen by ``speculation.method`` through one table.

:data:`BUILDERS` maps each method to the function that builds its strategy; :data:`SUPPORT` says
which engine runs which method with which proposal form (a chain, a static ``tree.shape``, an
EAGLE-2 dynamic tree). A combination missing from :data:`SUPPORT` is a ScenarioError: the simulator
does not predict what no real engine can run. Sources, per engine:

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

from collections.abc import Callable, Container, Mapping
from pathlib import Path

from sim.catalogue import GPU, Model
from sim.cost_model import StepCostModel
from sim.drafting.base import BuildContext, NoSpeculation, Strategy
from sim.drafting.draft_model import build_draft_model
from sim.drafting.eagle import build_eagle
from sim.drafting.eagle3 import build_eagle3
from sim.drafting.lookahead import build_lookahead
from sim.drafting.medusa import build_medusa
from sim.drafting.mtp import build_mtp
from sim.drafting.ngram import build_ngram
from sim.drafting.parallel import build_parallel_eagle
from sim.drafting.suffix import build_suffix
from sim.engine.presets import get_preset
from sim.errors import ScenarioError
from sim.scenario import Scenario

__all__ = [
    "BUILDERS",
    "SUPPORT",
    "BuildContext",
    "Strategy",
    "build_strategy",
    "check_support",
    "proposal_form",
]

#: Each method's builder.
BUILDERS: dict[str, Callable[[BuildContext], Strategy]] = {
    "none": lambda ctx: NoSpeculation(),
    "draft_model": build_draft_model,
    "ngram": build_ngram,
    "medusa": build_medusa,
    "eagle": build_eagle,
    "eagle2": build_eagle,
    "eagle3": build_eagle3,
    "mtp": build_mtp,
    "lookahead": build_lookahead,
    "suffix": build_suffix,
    "p_eagle": build_parallel_eagle,
}

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


def proposal_form(scenario: Scenario) -> str:
    """``chain``, ``static_tree`` or ``dynamic_tree``: what the verify step carries.

    EAGLE-2 drafts a dynamic tree even when ``tree`` is omitted (SGLang's defaults).
    """
    spec = scenario.speculation
    if spec.tree is None:
        return "dynamic_tree" if spec.method == "eagle2" else "chain"
    return "static_tree" if spec.tree.shape is not None else "dynamic_tree"


def where_offered(name: str, tables: Mapping[str, Container[str]]) -> str:
    """Which engines' tables hold ``name``, for an error message."""
    runs = [engine for engine, table in tables.items() if name in table]
    return f"it runs on {', '.join(runs)}" if runs else "no engine preset implements it"


def check_support(scenario: Scenario) -> str:
    """The support level of the scenario's method and proposal form on its engine.

    Raise ScenarioError naming ``speculation.method`` if the engine does not run the method, or
    ``speculation.tree`` if it runs the method but not that tree form.
    """
    # Each preset names the engine whose support table it follows (engine_presets.yaml).
    chosen = get_preset(scenario.engine.preset)
    preset = chosen.draft_support_from
    method = scenario.speculation.method
    engine = SUPPORT.get(preset)
    if engine is None:
        raise ScenarioError(f"engine.preset: no drafting support table for {preset!r}")
    name = chosen.display_name
    if method not in engine:
        where = where_offered(method, SUPPORT)
        raise ScenarioError(
            f"speculation.method: {name} does not support {method!r} ({where}); "
            f"{name} supports: {', '.join(m for m in engine if m != 'none')}"
        )
    form = proposal_form(scenario)
    if form not in engine[method]:
        raise ScenarioError(
            f"speculation.tree: {name} runs {method!r} only as "
            f"{' or '.join(f.replace('_', ' ') for f in engine[method])}, not as a "
            f"{form.replace('_', ' ')}"
        )
    return engine[method][form]


def build_strategy(
    scenario: Scenario,
    model: Model,
    gpu: GPU,
    cost_model: StepCostModel,
    engine_preset: str,
    base_dir: Path,
    *,
    enforce_support: bool = True,
) -> Strategy:
    """The strategy ``scenario.speculation.method`` names, built for this node.

    ``enforce_support=False`` builds combinations no engine runs (for studies and tests only).
    Raise ScenarioError if the method, or its combination with the engine, is not supported, or
    if its settings are inconsistent.
    """
    level = check_support(scenario) if enforce_support else "unchecked"
    context = BuildContext(scenario, model, gpu, cost_model, engine_preset, base_dir)
    strategy = BUILDERS[scenario.speculation.method](context)
    strategy.support_level = level
    return strategy
