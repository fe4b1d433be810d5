"""docs/scenario-reference.md is what the schema gives today: regenerate it with
``python -m tools.scenario_reference --write`` when a key, default or limit changes."""

from __future__ import annotations

from sim.scenario import Scenario
from tools.scenario_reference import PAGE, scenario_reference


def test_the_scenario_reference_is_current() -> None:
    assert PAGE.read_text(encoding="utf-8") == scenario_reference(), (
        "docs/scenario-reference.md is stale: run python -m tools.scenario_reference --write"
    )


def test_every_top_level_key_is_documented() -> None:
    text = scenario_reference()
    for key in Scenario.model_fields:
        assert f"| `{key}` |" in text
    # A nested key with its limits: workload.num_requests is capped (a typo cannot ask for
    # terabytes of records).
    assert "| `num_requests` | integer | `1000` | >= 1 and <= 10,000,000 |" in text
