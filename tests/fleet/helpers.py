"""Small fleets for the fleet tests: the default node, a short uniform workload, a fleet section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim.run import ScenarioResult, run_scenario
from sim.scenario import Scenario, validate_document


def document(
    fleet: dict[str, Any] | None, speculation: dict[str, Any] | None = None, **workload: Any
) -> dict[str, Any]:
    """A scenario mapping: Llama-3.1-8B on H100s, ``workload`` keys over a short default."""
    out: dict[str, Any] = {
        "name": "fleet-test",
        "seed": 3,
        "speculation": speculation or {"method": "none"},
        "workload": {
            "num_requests": 240,
            "arrival": {"process": "poisson", "rate_per_s": 40.0},
            "prompt_tokens": {"distribution": "uniform", "low": 20, "high": 1500},
            "output_tokens": {"distribution": "uniform", "low": 1, "high": 300},
            **workload,
        },
    }
    if fleet is not None:
        out["fleet"] = fleet
    return out


def scenario(
    fleet: dict[str, Any] | None, speculation: dict[str, Any] | None = None, **workload: Any
) -> Scenario:
    return validate_document(document(fleet, speculation, **workload), "fleet-test")


def run(
    fleet: dict[str, Any] | None, speculation: dict[str, Any] | None = None, **workload: Any
) -> ScenarioResult:
    return run_scenario(scenario(fleet, speculation, **workload), Path("."))
