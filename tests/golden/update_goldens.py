"""Rewrite the golden summaries of every scenario in ``scenarios/``.

Run after a deliberate change of the simulator's results:
``python tests/golden/update_goldens.py`` (then review the diff of ``tests/golden/*.json``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_DIR = Path(__file__).resolve().parent
#: Summary keys that depend on the machine, not on the model.
VOLATILE_KEYS = ("wall_time_s", "specsim_version")


def golden_summary(scenario_path: Path) -> dict:
    """The summary of one scenario without its machine-dependent keys."""
    from sim.run import run_scenario
    from sim.scenario import load_scenario

    scenario, base_dir = load_scenario(scenario_path)
    summary = run_scenario(scenario, base_dir).summary
    return {k: v for k, v in summary.items() if k not in VOLATILE_KEYS}


def main() -> None:
    sys.path.insert(0, str(ROOT))
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        summary = golden_summary(path)
        target = GOLDEN_DIR / f"{path.stem}.json"
        target.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {target.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
