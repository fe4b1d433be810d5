"""Regenerate golden summaries one scenario at a time, and show what changed before writing.

``python tests/golden/update_goldens.py [NAME ...]`` reruns the named scenarios of
``scenarios/`` (all of them without a name) and prints, per scenario, every key whose value
moved beyond the golden tolerance as ``key.path: old -> new`` (and keys added or removed). It
writes nothing: read the diff, and if every change is intended, rerun with ``--write`` to
replace just the goldens that changed. Exit code 1 when a golden differs and ``--write`` was
not given, so a script can tell a clean tree from a changed one.

``tests/test_golden_laws.py`` states why the stored numbers are right; a change here that breaks
one of those laws is a bug, not a new golden.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_DIR = Path(__file__).resolve().parent
#: Summary keys that depend on the machine, not on the model.
VOLATILE_KEYS = ("wall_time_s", "specsim_version")
#: Same seed, same arithmetic: only the platform's last-bit rounding may differ.
REL_TOL, ABS_TOL = 1e-9, 1e-12


def golden_summary(scenario_path: Path) -> dict[str, Any]:
    """The summary of one scenario without its machine-dependent keys."""
    from sim.run import run_scenario
    from sim.scenario import load_scenario

    scenario, base_dir = load_scenario(scenario_path)
    summary = run_scenario(scenario, base_dir).summary.to_dict()
    return {k: v for k, v in summary.items() if k not in VOLATILE_KEYS}


def differences(actual: Any, expected: Any, path: str) -> list[str]:
    """Every place ``actual`` differs from ``expected``, as ``path: old -> new`` lines.

    Floats are equal within REL_TOL/ABS_TOL; mappings name added and removed keys.
    """
    if isinstance(expected, dict) and isinstance(actual, dict):
        lines = [
            f"{path}.{key}: removed (was {expected[key]!r})"
            for key in expected.keys() - actual.keys()
        ]
        lines += [
            f"{path}.{key}: added ({actual[key]!r})" for key in actual.keys() - expected.keys()
        ]
        for key in sorted(expected.keys() & actual.keys()):
            lines += differences(actual[key], expected[key], f"{path}.{key}")
        return sorted(lines)
    if isinstance(expected, list) and isinstance(actual, list) and len(actual) == len(expected):
        return [
            line
            for i, (new, old) in enumerate(zip(actual, expected, strict=True))
            for line in differences(new, old, f"{path}[{i}]")
        ]
    if (
        isinstance(expected, float)
        and isinstance(actual, int | float)
        and not isinstance(actual, bool)
        and math.isclose(actual, expected, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    ):
        return []
    return [] if actual == expected else [f"{path}: {expected!r} -> {actual!r}"]


def golden_text(summary: dict[str, Any]) -> str:
    """A golden file's text: sorted keys, two-space indent, one final newline."""
    return json.dumps(summary, indent=2, sort_keys=True) + "\n"


def review(names: list[str], write: bool) -> int:
    """Rerun the scenarios ``names`` (all when empty), print each one's diff, write if asked.

    Return the number of goldens that differ (or are missing). Raise SystemExit naming an
    unknown scenario.
    """
    scenarios = {path.stem: path for path in sorted((ROOT / "scenarios").glob("*.yaml"))}
    unknown = [name for name in names if name not in scenarios]
    if unknown:
        raise SystemExit(f"unknown scenario {', '.join(unknown)}; known: {', '.join(scenarios)}")
    changed = 0
    for name in names or list(scenarios):
        target = GOLDEN_DIR / f"{name}.json"
        summary = json.loads(json.dumps(golden_summary(scenarios[name])))
        if target.is_file():
            lines = differences(summary, json.loads(target.read_text(encoding="utf-8")), name)
        else:
            lines = [f"{name}: no golden yet"]
        if not lines:
            print(f"{name}: unchanged")
            continue
        changed += 1
        print(f"{name}: {len(lines)} change{'s' if len(lines) > 1 else ''}")
        for line in lines:
            print(f"  {line}")
        if write:
            target.write_text(golden_text(summary), encoding="utf-8")
            print(f"  wrote {target.name}")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("names", nargs="*", help="scenario names (file stems); default: all")
    parser.add_argument("--write", action="store_true", help="replace the goldens that changed")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    changed = review(args.names, args.write)
    return 1 if changed and not args.write else 0


if __name__ == "__main__":
    raise SystemExit(main())
