"""Drafting strategies, one module each, chosen by ``speculation.method`` through one table."""

from __future__ import annotations

from pathlib import Path

from sim.catalogue import GPU, Model
from sim.cost_model import StepCostModel
from sim.drafting.base import NoSpeculation, Strategy
from sim.errors import ScenarioError
from sim.scenario import Scenario

__all__ = ["Strategy", "build_strategy"]


def build_strategy(
    scenario: Scenario,
    model: Model,
    gpu: GPU,
    cost_model: StepCostModel,
    engine_preset: str,
    base_dir: Path,
) -> Strategy:
    """The strategy ``scenario.speculation.method`` names, built for this node.

    Raise ScenarioError if the method, or its combination with the engine, is not supported.
    """
    method = scenario.speculation.method
    if method == "none":
        return NoSpeculation()
    raise ScenarioError(f"speculation.method: {method!r} is not supported yet")
