"""A run that keeps only the step columns its summary reads has the same summary, and the same
values in those columns, as one that keeps them all."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    del full.summary["wall_time_s"], lean.summary["wall_time_s"]
    assert lean.summary == full.summary


def test_a_fleet_keeps_the_summary_columns_of_each_replica() -> None:
    path = ROOT / "scenarios" / "fleet-chat-4x-h100.yaml"
    scenario, base_dir = load_scenario(path, ["workload.num_requests=200"])
    full = run_scenario(scenario, base_dir)
    lean = run_scenario(scenario, base_dir, step_records="summary")
    assert set(lean.steps) <= set(SUMMARY_COLUMNS) | {"replica"}
    for column in SUMMARY_COLUMNS:
        assert np.array_equal(lean.steps[column], full.steps[column]), column
    del full.summary["wall_time_s"], lean.summary["wall_time_s"]
    assert lean.summary == full.summary


def test_a_recorder_refuses_columns_it_cannot_keep() -> None:
    with pytest.raises(ValueError, match="start_at_s and duration_s"):
        StepRecorder(columns=("num_seqs",))
    with pytest.raises(ValueError, match="start_at_s and duration_s"):
        StepRecorder(columns=("start_at_s", "duration_s", "no_such_column"))


def test_an_unknown_record_option_is_refused() -> None:
    scenario = validate_document(DOCUMENTS["open-loop"], "open-loop")
    with pytest.raises(ValueError, match="step_records"):
        build_simulation(scenario, Path("."), step_records="some")


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=30),
    chunk_rows=st.integers(16, 40),
    calls=st.lists(st.integers(0, 29), max_size=4),
)
def test_chunked_columns_hold_every_appended_row_in_order(
    sizes: list[int], chunk_rows: int, calls: list[int]
) -> None:
    # Appends of any size across chunk edges, with columns() read mid-run (which joins the
    # chunks) at arbitrary points: the columns are always every row appended so far, in order.
    recorder = StepRecorder(chunk_rows=chunk_rows, columns=SUMMARY_COLUMNS)
    total = 0
    for index, size in enumerate(sizes):
        rows: dict[str, object] = {name: np.arange(total, total + size) for name in SUMMARY_COLUMNS}
        rows["kv_blocks_used"] = 7  # a scalar fills every row
        recorder.append(rows)
        total += size
        assert recorder.last_duration_s() == total - 1
        if index in calls:
            columns = recorder.columns()
            assert np.array_equal(columns["start_at_s"], np.arange(total))
    columns = recorder.columns()
    assert len(recorder) == total
    assert np.array_equal(columns["duration_s"], np.arange(total))
    assert (columns["kv_blocks_used"] == 7).all()
    assert recorder.value_at("num_seqs", total - 0.5) == total - 1
    assert recorder.value_at("num_seqs", 3.5) == (3 if total > 3 else total - 1)
    assert recorder.value_at("num_seqs", -1.0) is None
