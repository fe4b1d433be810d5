"""A run folder, typed: what the writer puts there is what the loader reads back, field for field,
and every file the writer makes is one ``--out`` refuses to replace."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from sim.errors import OutputError
from sim.results import check_run_output, save_result
from sim.run import ScenarioResult, run_scenario
from sim.run_folder import RUN_FILES, SUMMARY_FILE, RunFolder
from sim.scenario import validate_document
from sim.vllm_bench import vllm_bench_result

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def result() -> ScenarioResult:
    document = {"workload": {"num_requests": 40}, "speculation": {"method": "eagle3"}}
    return run_scenario(validate_document(document, "test"), ROOT)


def test_a_saved_run_loads_back_as_it_was_written(result: ScenarioResult, tmp_path: Path) -> None:
    save_result(result, tmp_path)
    saved = RunFolder(tmp_path).load()
    assert saved.summary == result.summary
    assert saved.resolved_scenario == result.resolved_scenario
    assert saved.requests is not None and saved.steps is not None
    for name, column in result.requests.items():
        assert np.array_equal(saved.requests[name].to_numpy(), column, equal_nan=True), name
    assert np.array_equal(saved.steps["duration_s"].to_numpy(), result.steps["duration_s"])
    bench = vllm_bench_result(result)
    assert saved.vllm_bench is not None
    assert {k: v for k, v in saved.vllm_bench.items() if k != "date"} == {
        k: v for k, v in json.loads(json.dumps(bench)).items() if k != "date"
    }
    # The pool's size is the one the run built, not recovered from usage figures.
    assert saved.num_kv_blocks == result.memory.num_blocks


def test_every_file_the_writer_makes_is_guarded(result: ScenarioResult, tmp_path: Path) -> None:
    save_result(result, tmp_path)
    written = {path.name for path in tmp_path.iterdir()}
    assert written <= set(RUN_FILES)
    for name in written:
        folder = tmp_path / f"only-{name}"
        folder.mkdir()
        (folder / name).write_text("{}", encoding="utf-8")
        with pytest.raises(OutputError, match=re.escape(name)):
            check_run_output(folder, force=False)


def test_a_folder_without_a_summary_or_with_a_broken_file_is_refused(
    result: ScenarioResult, tmp_path: Path
) -> None:
    with pytest.raises(OutputError, match=re.escape(f"no {SUMMARY_FILE}; not a run folder")):
        RunFolder(tmp_path).load()
    save_result(result, tmp_path, write_steps=False)
    assert RunFolder(tmp_path).steps() is None
    assert RunFolder(tmp_path).load().steps is None
    folder = RunFolder(tmp_path)
    folder.summary.write_text('{"num_steps": 1}', encoding="utf-8")
    with pytest.raises(OutputError, match=re.escape("summary.json: not a run summary")):
        folder.load()
    save_result(result, tmp_path, write_steps=False)
    folder.scenario.write_text("- a list\n", encoding="utf-8")
    with pytest.raises(OutputError, match=re.escape("scenario.resolved.yaml: cannot read")):
        folder.load()
