"""Drafting strategies, one module each, chosen by ``speculation.method``.

The methods themselves (their settings, the engines that run each and in which proposal form,
and their builders) are one table in :mod:`sim.speculation`; this package builds the strategy a
scenario names and checks that its engine runs it. A combination missing from
:data:`~sim.speculation.SUPPORT` is a ScenarioError: the simulator does not predict what no real
engine can run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Container, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from sim.catalogue import GPU, Model
from sim.cost_model import StepCostModel
from sim.drafting.base import BuildContext, Strategy
from sim.engine.presets import get_preset
from sim.errors import ScenarioError
from sim.speculation import BUILDERS as METHOD_BUILDERS
from sim.speculation import SUPPORT

if TYPE_CHECKING:
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


def _builder(path: str) -> Callable[[BuildContext], Strategy]:
    module, name = path.split(":")
    builder: Callable[[BuildContext], Strategy] = getattr(importlib.import_module(module), name)
    return builder


#: Each method's builder, resolved from :data:`sim.speculation.BUILDERS`.
BUILDERS: dict[str, Callable[[BuildContext], Strategy]] = {
    method: _builder(path) for method, path in METHOD_BUILDERS.items()
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
