"""The plan's search driven by stand-in verdicts: where it stops, how it lengthens probes, what
an interrupted or hopeless plan leaves behind. No simulation runs here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import reports.capacity as capacity
from reports.probes import ProbeRan
from sim.errors import ScenarioError
from sim.scenario import read_document


@pytest.fixture(autouse=True)
def _no_saturation_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a saturation throughput the search starts from the scenario's rate, doubling."""
    monkeypatch.setattr(capacity, "run_saturation", lambda *args: "not measured in this test")


def _verdict_by_rate(threshold: float, calls: list[tuple[float, int, int]]) -> Any:
    def fake(document: dict[str, Any], base_dir: str, source: str, targets: Any, **_: Any) -> Any:
        rate = float(document["workload"]["arrival"]["rate_per_s"])
        calls.append((rate, int(document["seed"]), int(document["workload"]["num_requests"])))
        verdict = "holds" if rate <= threshold else "fails"
        check = {"name": "ttft_p99_ms", "value": 1.0, "low": 0.5, "high": 2.0,
                 "limit": "<= 2000", "verdict": verdict}  # fmt: skip
        judgement = {"verdict": verdict, "point_verdict": verdict, "stability": "holds",
                     "offered_rate_req_s": rate,
                     "served_rate_req_s": rate, "checks": [check]}  # fmt: skip
        summary = {"output_throughput_tok_s": 100.0 * rate}
        return ProbeRan(judgement, summary, int(document["workload"]["num_requests"]))

    return fake


def _plan(tmp_path: Path, **options: Any) -> dict[str, Any]:
    document, base_dir, source = read_document(None)
    settings: dict[str, Any] = {
        "slo_text": None, "methods_text": "none", "target_qps": None, "gpu_hour_usd": None,
        "num_seeds": 2, "num_requests": 500, "tolerance": 0.05, "workers": 1,
        "out_dir": tmp_path,
    }  # fmt: skip
    settings.update(options)
    return capacity.plan_capacity(document, base_dir, source, **settings)


def test_the_search_stops_at_the_threshold_within_the_tolerance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[float, int, int]] = []
    monkeypatch.setattr(capacity, "run_probe", _verdict_by_rate(21.0, calls))
    plan = _plan(tmp_path)
    (row,) = plan["methods"]
    assert row["max_rate_per_s"] <= 21.0 < row["bracket_high_per_s"]
    assert row["bracket_high_per_s"] - row["max_rate_per_s"] <= 0.05 * row["bracket_high_per_s"]
    assert row["per_seed_max_rate_per_s"] == [row["max_rate_per_s"]] * 2
    # Decided verdicts never lengthen a probe; a failing seed stops the probe. The answer
    # runs again at the longest length (10 x 500) in every seed, and holds there; the first
    # rate above it in its failing seed, and fails there.
    assert {length for _, _, length in calls} == {500, 5000}
    assert sorted((r, s) for r, s, n in calls if n == 5000) == [
        (row["max_rate_per_s"], 0),
        (row["max_rate_per_s"], 1),
        (row["first_rate_above_per_s"], 0),
    ]
    assert row["resolution"] <= 0.05 / 0.95 and row["undecided_rates_per_s"] == []
    assert plan["complete"] and not plan["interrupted"]


def test_from_the_saturation_throughput_the_search_takes_few_probes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Saturation 22/s, threshold 21/s: 22 fails, 22/1.05 = 20.95 holds, and that bracket is
    # 4.8% wide, within the 5% tolerance: two probes where doubling from 4/s takes eight (the
    # second then runs again at the longest length to confirm it).
    calls: list[tuple[float, int, int]] = []
    monkeypatch.setattr(capacity, "run_probe", _verdict_by_rate(21.0, calls))
    monkeypatch.setattr(capacity, "run_saturation", lambda *args: 22.0)
    (row,) = _plan(tmp_path)["methods"]
    assert row["saturation_rate_per_s"] == 22.0 and row["num_probes"] == 2
    assert row["max_rate_per_s"] == pytest.approx(22.0 / 1.05) and row["bracket_high_per_s"] == 22
    assert sorted({rate for rate, _, _ in calls}) == pytest.approx([22.0 / 1.05, 22.0])


def test_a_longest_run_that_refutes_the_answer_sends_the_search_below_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Short runs hold up to 21/s, the longest (5000 requests) only up to 20/s: the answer found
    # on short runs is refuted when confirmed, and the plan ends on a rate confirmed at 5000.
    calls: list[tuple[float, int, int]] = []
    short, long = _verdict_by_rate(21.0, calls), _verdict_by_rate(20.0, calls)

    def by_length(document: dict[str, Any], *args: Any, **_: Any) -> Any:
        fake = long if document["workload"]["num_requests"] == 5000 else short
        return fake(document, *args)

    monkeypatch.setattr(capacity, "run_probe", by_length)
    (row,) = _plan(tmp_path)["methods"]
    assert row["max_rate_per_s"] <= 20.0 < row["bracket_high_per_s"] <= 21.0
    assert row["requests_per_seed_at_max"] == [5000, 5000]


def test_an_interrupted_plan_keeps_what_it_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[float, int, int]] = []
    inner = _verdict_by_rate(21.0, calls)

    def interrupting(*args: Any, **_: Any) -> Any:
        if len(calls) == 5:
            raise KeyboardInterrupt
        return inner(*args)

    monkeypatch.setattr(capacity, "run_probe", interrupting)
    plan = _plan(tmp_path)
    assert plan["interrupted"] and not plan["complete"]
    saved = json.loads((tmp_path / "plan.json").read_text())
    assert saved["interrupted"] and saved["methods"][0]["status"] == "interrupted"
    probes = pd.read_csv(tmp_path / "probes.csv")
    assert len(probes) == 4 and set(probes["rate_per_s"]) == {4.0, 8.0}


def test_undecided_seeds_run_longer_and_a_rate_never_shown_to_hold_is_no_stable_rate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[float, int, int]] = []
    decided = _verdict_by_rate(0.0, calls)

    def undecided(*args: Any, **_: Any) -> Any:
        outcome = decided(*args)
        outcome.judgement["verdict"] = "undecided"
        outcome.judgement["point_verdict"] = "undecided"
        return outcome

    monkeypatch.setattr(capacity, "run_probe", undecided)
    with pytest.raises(ScenarioError, match="no stable rate"):
        _plan(tmp_path, max_requests=2000)
    assert sorted({length for _, _, length in calls}) == [500, 2000]
    row = json.loads((tmp_path / "plan.json").read_text())["methods"][0]
    assert row["status"] == "no_stable_rate" and row["max_rate_per_s"] is None


def test_a_rate_whose_short_runs_lean_to_hold_is_not_lengthened_until_it_is_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Short runs below 21/s are undecided with point figures that hold; only the longest runs
    # (5000 requests) decide. Such a rate is taken to hold for now: no seed runs 2000 requests
    # (the fourfold lengthening) anywhere, and only the answer runs the longest length in every
    # seed, where it holds; a provisional rate below the answer never runs again.
    calls: list[tuple[float, int, int]] = []
    decided = _verdict_by_rate(21.0, calls)

    def leaning(document: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        outcome = decided(document, *args, **kwargs)
        judgement = outcome.judgement
        if document["workload"]["num_requests"] < 5000 and judgement["verdict"] == "holds":
            judgement["verdict"] = "undecided"
        return outcome

    monkeypatch.setattr(capacity, "run_probe", leaning)
    (row,) = _plan(tmp_path)["methods"]
    assert row["max_rate_per_s"] <= 21.0 < row["first_rate_above_per_s"]
    assert {length for _, _, length in calls} == {500, 5000}
    at_longest = sorted((rate, seed) for rate, seed, n in calls if n == 5000)
    assert at_longest[:2] == [(row["max_rate_per_s"], 0), (row["max_rate_per_s"], 1)]
    assert row["decided_by_at_max"] == ["interval", "interval"]
    probes = pd.read_csv(tmp_path / "probes.csv")
    below = probes[probes["rate_per_s"] < row["max_rate_per_s"]]
    assert len(below) and below["provisional"].all() and (below["num_requests"] == 500).all()
