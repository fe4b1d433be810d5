"""Every scenario in ``scenarios/`` runs and reproduces its golden summary.

A failure means the simulator's results changed: ``python tests/golden/update_goldens.py NAME``
prints each changed key (old -> new); if every change is intended (and tests/test_golden_laws.py
still holds), rerun it with ``--write``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
GOLDEN_DIR = ROOT / "tests" / "golden"

_spec = importlib.util.spec_from_file_location("update_goldens", GOLDEN_DIR / "update_goldens.py")
assert _spec is not None and _spec.loader is not None
update_goldens = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(update_goldens)


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
    problems = update_goldens.differences(actual, expected, scenario_path.stem)
    assert not problems, "\n".join(problems[:20])


def test_the_diff_names_each_changed_key_with_old_and_new_values() -> None:
    old = {"a": 1.0, "b": {"p50": 2.0, "p99": 3.0}, "gone": 1, "w": [0.0, 5.0]}
    new = {"a": 1.0 + 1e-12, "b": {"p50": 2.5, "p99": 3.0}, "new": True, "w": [0.0, 6.0]}
    assert update_goldens.differences(new, old, "s") == [
        "s.b.p50: 2.0 -> 2.5",
        "s.gone: removed (was 1)",
        "s.new: added (True)",
        "s.w[1]: 5.0 -> 6.0",
    ]


def test_review_prints_the_diff_and_writes_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "static-batch-llama31-8b"
    stored = {"num_steps": 10, "ttft_ms": {"p50": 1.0}}
    (tmp_path / f"{name}.json").write_text(update_goldens.golden_text(stored), encoding="utf-8")
    monkeypatch.setattr(update_goldens, "GOLDEN_DIR", tmp_path)
    rerun = {"num_steps": 10, "ttft_ms": {"p50": 1.5}}
    monkeypatch.setattr(update_goldens, "golden_summary", lambda path: rerun)
    assert update_goldens.review([name], write=False) == 1
    assert f"  {name}.ttft_ms.p50: 1.0 -> 1.5" in capsys.readouterr().out
    assert json.loads((tmp_path / f"{name}.json").read_text(encoding="utf-8")) == stored
    assert update_goldens.review([name], write=True) == 1
    assert json.loads((tmp_path / f"{name}.json").read_text(encoding="utf-8")) == rerun
    assert update_goldens.review([name], write=False) == 0
    assert capsys.readouterr().out.endswith(f"{name}: unchanged\n")
    with pytest.raises(SystemExit, match="unknown scenario"):
        update_goldens.review(["no-such-scenario"], write=False)
