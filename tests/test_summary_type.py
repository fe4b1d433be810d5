"""The typed summary: the run produces a :class:`Summary`; every summary it writes reads back into
an equal one and out again to the same mapping, so the JSON written from either is
byte-identical; its one flat row is what sweep tables, comparisons and SLO checks read."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError
from pathlib import Path
from typing import Any

import pytest

from reports.slo import parse_slo, slo_value
from sim.output import write_json
from sim.run import run_scenario
from sim.scenario import validate_document
from sim.summary import STATS, DistributionMs, Summary

ROOT = Path(__file__).resolve().parents[1]
GOLDENS = sorted((ROOT / "tests" / "golden").glob("*.json"))


def _json(value: dict[str, Any]) -> str:
    # Goldens are stored with sorted keys (tests/golden/update_goldens.py); a run's own
    # summary.json keeps the summary's field order, which the round trip below checks.
    return json.dumps(value, indent=2, sort_keys=True)


@pytest.mark.parametrize("path", GOLDENS, ids=lambda path: path.stem)
def test_every_golden_reads_and_writes_back_byte_for_byte(path: Path) -> None:
    stored = json.loads(path.read_text(encoding="utf-8"))
    summary = Summary.from_dict(stored)
    assert _json(summary.to_dict()) == _json(stored)
    row = summary.flat()
    for metric in ("ttft", "tpot", "itl", "e2e_latency"):
        for stat in STATS:
            assert row[f"{metric}_{stat}_ms"] == stored[f"{metric}_ms"][stat]
    assert (row["measurement_start_s"], row["measurement_end_s"]) == tuple(
        stored["measurement_window_s"]
    )
    assert summary.ttft_ms.p99 == stored["ttft_ms"]["p99"]


def test_a_run_with_every_optional_section_round_trips() -> None:
    # A steady window and a goodput SLO add their keys; the run adds its wall time and version.
    document = {
        "workload": {"num_requests": 60},
        "measurement": {"window": "steady", "goodput": {"ttft": 200, "tpot": 20}},
    }
    summary = run_scenario(validate_document(document, "test"), ROOT).summary
    raw = summary.to_dict()
    assert Summary.from_dict(raw) == summary
    assert json.dumps(Summary.from_dict(raw).to_dict()) == json.dumps(raw)
    assert summary.measurement_window == "steady" and summary.goodput_ms == {
        "ttft": 200,
        "tpot": 20,
    }
    row = summary.flat()
    assert row["goodput_ttft_ms"] == 200 and row["goodput_tpot_ms"] == 20
    assert row["wall_time_s"] == raw["wall_time_s"]
    (term,) = parse_slo("tpot_p90_ms<=50")
    assert slo_value(summary, term) == raw["tpot_ms"]["p90"] == summary.tpot_ms.p90


def test_a_fleet_summary_is_typed_to_its_replicas_and_reads_back(tmp_path: Path) -> None:
    document = {
        "workload": {"num_requests": 60},
        "fleet": {"replicas": 2, "router": "least_outstanding"},
    }
    summary = run_scenario(validate_document(document, "test"), ROOT).summary
    assert summary.fleet is not None and summary.fleet.num_replicas == 2
    replicas = summary.fleet.replicas
    assert sum(r.num_routed for r in replicas) == 60
    # The fleet-wide figures that do not add up are the replicas' extremes (sim/fleet/records.py).
    assert summary.sim_duration_s == max(r.measures.sim_duration_s for r in replicas)
    assert summary.kv_cache_peak_usage == max(r.measures.kv_cache_peak_usage for r in replicas)
    write_json(tmp_path / "summary.json", summary.to_dict())
    text = (tmp_path / "summary.json").read_text(encoding="utf-8")
    again = Summary.from_dict(json.loads(text))
    assert again.fleet is not None and again.fleet.replicas[1].measures.method == summary.method
    write_json(tmp_path / "again.json", again.to_dict())
    assert (tmp_path / "again.json").read_text(encoding="utf-8") == text
    broken = json.loads(text)
    del broken["fleet"]["replicas"][0]["num_routed"]
    with pytest.raises(ValueError, match="summary: fleet"):
        Summary.from_dict(broken)


def test_a_summary_is_frozen_and_refuses_keys_it_does_not_know() -> None:
    stored = json.loads(GOLDENS[0].read_text(encoding="utf-8"))
    summary = Summary.from_dict(stored)
    with pytest.raises(FrozenInstanceError):
        summary.num_steps = 0  # type: ignore[misc]
    with pytest.raises(ValueError, match="unknown key 'ttft_p99'"):
        Summary.from_dict({**stored, "ttft_p99": 1.0})
    missing = {key: value for key, value in stored.items() if key != "num_steps"}
    with pytest.raises(ValueError, match="num_steps"):
        Summary.from_dict(missing)
    # An optional section is whole or absent: a steady window without its offered rate is not a
    # summary any run writes.
    with pytest.raises(ValueError, match="'measurement_window' comes with"):
        Summary.from_dict({**stored, "measurement_window": "steady"})
    with pytest.raises(ValueError, match="unknown metric"):
        summary.latency_ms("ttft_p99")
    with pytest.raises(ValueError, match="latency distribution"):
        DistributionMs.from_mapping({"mean": 1.0})
