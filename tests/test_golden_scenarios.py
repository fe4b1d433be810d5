"""Every scenario in ``scenarios/`` runs and reproduces its golden summary.

A failure means the simulator's results changed: if the change is intended, regenerate the
goldens with ``python tests/golden/update_goldens.py`` and review the diff.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
GOLDEN_DIR = ROOT / "tests" / "golden"

_spec = importlib.util.spec_from_file_location("update_goldens", GOLDEN_DIR / "update_goldens.py")
assert _spec is not None and _spec.loader is not None
update_goldens = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(update_goldens)


def _compare(actual: Any, expected: Any, path: str) -> list[str]:
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or set(actual) != set(expected):
            return [
                f"{path}: keys {sorted(actual) if isinstance(actual, dict) else actual} "
                f"!= {sorted(expected)}"
            ]
        return [
            e for key in expected for e in _compare(actual[key], expected[key], f"{path}.{key}")
        ]
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{path}: {actual} != {expected}"]
        return [
            e
            for i, (a, b) in enumerate(zip(actual, expected, strict=True))
            for e in _compare(a, b, f"{path}[{i}]")
        ]
    if isinstance(expected, float) and isinstance(actual, int | float):
        # Same seed, same arithmetic: only the platform's last-bit rounding may differ.
        if math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-12):
            return []
        return [f"{path}: {actual} != {expected}"]
    return [] if actual == expected else [f"{path}: {actual!r} != {expected!r}"]


def test_every_scenario_has_a_golden() -> None:
    goldens = {p.stem for p in GOLDEN_DIR.glob("*.json")}
    assert {p.stem for p in SCENARIOS} == goldens


def test_default_scenario_is_the_shipped_chat_scenario() -> None:
    from sim.scenario import default_scenario_text

    shipped = (ROOT / "scenarios" / "chat-llama31-8b-h100.yaml").read_text(encoding="utf-8")
    assert default_scenario_text() == shipped


@pytest.mark.parametrize("scenario_path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_reproduces_its_golden_summary(scenario_path: Path) -> None:
    golden_path = GOLDEN_DIR / f"{scenario_path.stem}.json"
    expected = json.loads(golden_path.read_text(encoding="utf-8"))
    actual = json.loads(json.dumps(update_goldens.golden_summary(scenario_path)))
    problems = _compare(actual, expected, scenario_path.stem)
    assert not problems, "\n".join(problems[:20])
