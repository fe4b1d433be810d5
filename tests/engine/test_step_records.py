"""A run that keeps only the step columns its summary reads has the same summary, and the same
values in those columns, as one that keeps them all."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sim.engine.recorder import STEP_COLUMNS, SUMMARY_COLUMNS, StepRecorder
from sim.run import build_simulation, execute, run_scenario
from sim.scenario import load_scenario, validate_document

ROOT = Path(__file__).resolve().parents[2]

DOCUMENTS = {
    "open-loop": {
        "seed": 3,
        "workload": {"num_requests": 60, "arrival": {"process": "poisson", "rate_per_s": 20.0}},
    },
    "eagle3-steady-window": {
        "seed": 4,
        "speculation": {"method": "eagle3"},
        "workload": {"num_requests": 60, "arrival": {"process": "poisson", "rate_per_s": 20.0}},
        "measurement": {"window": "steady", "goodput": {"ttft": 500.0}},
    },
}


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_summary_records_give_the_same_summary(name: str) -> None:
    scenario = validate_document(DOCUMENTS[name], name)
    full = execute(build_simulation(scenario, Path(".")))
    lean = execute(build_simulation(scenario, Path("."), step_records="summary"))
    assert set(full.steps) == set(STEP_COLUMNS)
    assert set(lean.steps) == set(SUMMARY_COLUMNS)
    for column in SUMMARY_COLUMNS:
        assert np.array_equal(lean.steps[column], full.steps[column]), column
    assert replace(lean.summary, wall_time_s=None) == replace(full.summary, wall_time_s=None)


def test_a_fleet_keeps_the_summary_columns_of_each_replica() -> None:
    path = ROOT / "scenarios" / "fleet-chat-4x-h100.yaml"
    scenario, base_dir = load_scenario(path, ["workload.num_requests=200"])
    full = run_scenario(scenario, base_dir)
    lean = run_scenario(scenario, base_dir, step_records="summary")
    assert set(lean.steps) <= set(SUMMARY_COLUMNS) | {"replica"}
    for column in SUMMARY_COLUMNS:
        assert np.array_equal(lean.steps[column], full.steps[column]), column
    assert replace(lean.summary, wall_time_s=None) == replace(full.summary, wall_time_s=None)


def test_a_recorder_refuses_columns_it_cannot_keep() -> None:
    with pytest.raises(ValueError, match="start_at_s and duration_s"):
        StepRecorder(columns=("num_seqs",))
    with pytest.raises(ValueError, match="start_at_s and duration_s"):
        StepRecorder(columns=("start_at_s", "duration_s", "no_such_column"))


def test_an_unknown_record_option_is_refused() -> None:
    scenario = validate_document(DOCUMENTS["open-loop"], "open-loop")
    with pytest.raises(ValueError, match="step_records"):
        build_simulation(scenario, Path("."), step_records="some")
