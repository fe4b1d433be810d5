"""Nothing a user wrote or computed is lost, and nothing is written outside the output folder.

Each data-loss case of the robustness review is here: a command whose output is its own input, an
``--out`` folder holding earlier results, a sweep into a folder of another sweep, a scenario name
that walks out of ``results/``, ``--out`` onto an existing file, result files readable only by
their owner, and pool workers left running after their parent was killed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.output import MAX_NAME_CHARS, atomic_write, safe_name
from specsim.cli import app

SMALL = ["--set", "workload.num_requests=20"]
ROOT = Path(__file__).resolve().parents[1]


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def _vllm_log_sample() -> str:
    spec = importlib.util.spec_from_file_location(
        "parser_samples", Path(__file__).parent / "calibration" / "conftest.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.SAMPLES["vllm_log"])


def test_calibrate_never_overwrites_its_own_input(tmp_path: Path) -> None:
    log = tmp_path / "in.log"
    log.write_text(_vllm_log_sample(), encoding="utf-8")
    before = log.read_bytes()
    for extra in ([], ["--force"]):
        code, output = _invoke("calibrate", str(log), "--out", str(log), *extra)
        assert code == 2, output
        assert "is the input" in output
        assert log.read_bytes() == before


def test_calibrate_refuses_to_replace_a_profile_without_force(tmp_path: Path) -> None:
    log = tmp_path / "in.log"
    log.write_text(_vllm_log_sample(), encoding="utf-8")
    profile = tmp_path / "profile.yaml"
    profile.write_text("kept: true\n", encoding="utf-8")
    code, output = _invoke("calibrate", str(log), "--out", str(profile))
    assert code == 2 and "exists" in output and "--force" in output
    assert profile.read_text(encoding="utf-8") == "kept: true\n"
    code, output = _invoke("calibrate", str(log), "--out", str(profile), "--force")
    assert code == 0, output
    assert "provenance" in profile.read_text(encoding="utf-8")


def test_run_into_a_folder_with_results_needs_force(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text('{"kept": true}', encoding="utf-8")
    (out / "requests.csv").write_text("kept\n", encoding="utf-8")
    code, output = _invoke("run", *SMALL, "--out", str(out))
    assert code == 2
    assert "summary.json" in output and "requests.csv" in output and "--force" in output
    assert (out / "summary.json").read_text(encoding="utf-8") == '{"kept": true}'
    code, output = _invoke("run", *SMALL, "--out", str(out), "--force")
    assert code == 0, output
    assert '"kept"' not in (out / "summary.json").read_text(encoding="utf-8")


def test_a_new_or_unrelated_folder_is_fine(tmp_path: Path) -> None:
    out = tmp_path / "notes"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n", encoding="utf-8")
    code, output = _invoke("run", *SMALL, "--out", str(out))
    assert code == 0, output
    assert (out / "notes.txt").read_text(encoding="utf-8") == "mine\n"


@pytest.mark.parametrize(
    "command",
    [
        ["run", *SMALL],
        ["analyze"],
        ["compare", *SMALL, "--methods", "none"],
        ["sweep", *SMALL, "--grid", "seed=1,2", "--workers", "1"],
        ["plan", *SMALL],
        ["schema"],
    ],
)
def test_out_onto_an_existing_file_is_refused_before_any_work(
    tmp_path: Path, command: list[str]
) -> None:
    target = tmp_path / "existing.txt"
    target.write_text("kept\n", encoding="utf-8")
    started = time.perf_counter()
    code, output = _invoke(*command, "--out", str(target))
    elapsed = time.perf_counter() - started
    assert code == 2, output
    assert "Traceback" not in output
    assert str(target) in output
    assert target.read_text(encoding="utf-8") == "kept\n"
    # Checked up front: a refused plan or sweep takes no simulation time.
    assert elapsed < 20


def test_schema_out_refuses_to_replace_a_file_without_force(tmp_path: Path) -> None:
    target = tmp_path / "schema.json"
    target.write_text("{}", encoding="utf-8")
    code, output = _invoke("schema", "--out", str(target))
    assert code == 2 and "exists" in output
    code, _ = _invoke("schema", "--out", str(target), "--force")
    assert code == 0 and "properties" in target.read_text(encoding="utf-8")


def test_a_sweep_refuses_a_folder_holding_another_sweep(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    common = ["sweep", *SMALL, "--workers", "1", "--out", str(out)]
    code, output = _invoke(*common, "--grid", "seed=1,2")
    assert code == 0, output
    points = sorted(p.name for p in (out / "points").iterdir())
    # Rerunning the same sweep resumes it; its grid written in another order is the same sweep.
    code, output = _invoke(*common, "--grid", "seed=2,1")
    assert code == 0 and "2 already finished" in output, output
    manifest = (out / "sweep.json").read_text(encoding="utf-8")
    code, output = _invoke(*common, "--grid", "seed=3,4")
    assert code == 2, output
    assert "another grid" in output and "--force" in output
    assert (out / "sweep.json").read_text(encoding="utf-8") == manifest
    assert sorted(p.name for p in (out / "points").iterdir()) == points


def test_a_sweep_refuses_a_run_folder(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert _invoke("run", *SMALL, "--out", str(out))[0] == 0
    code, output = _invoke("sweep", *SMALL, "--grid", "seed=1,2", "--out", str(out))
    assert code == 2 and "summary.json" in output


@pytest.mark.parametrize(
    "name",
    ["../../escaped", "/tmp/absolute-name", "a\x00b", "x" * 300, "..", "a/b\\c", ""],
)
def test_a_scenario_name_is_one_component_under_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    document = tmp_path / "s.yaml"
    import yaml

    document.write_text(yaml.safe_dump({"name": name, "workload": {"num_requests": 20}}))
    code, output = _invoke("run", str(document))
    assert code == 0, output
    made = list((tmp_path / "results").iterdir())
    assert len(made) == 1
    folder = made[0]
    assert folder.parent == tmp_path / "results"
    assert len(folder.name) <= MAX_NAME_CHARS + 20
    assert (folder / "summary.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results", "s.yaml"]


def test_safe_name_keeps_ordinary_names() -> None:
    assert safe_name("chat-llama31-8b-h100") == "chat-llama31-8b-h100"
    assert safe_name("../../escaped") == "escaped"
    assert "/" not in safe_name("/etc/passwd") and safe_name("/etc/passwd") == "etc-passwd"


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_files_take_the_users_umask(tmp_path: Path, mask: int) -> None:
    previous = os.umask(mask)
    try:
        path = tmp_path / "f.txt"
        atomic_write(path, lambda handle: handle.write("x"))
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask


def test_run_results_are_readable_by_the_group_under_umask_022(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        assert _invoke("run", *SMALL, "--out", str(tmp_path / "r"))[0] == 0
    finally:
        os.umask(previous)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "r").iterdir()}
    assert set(modes.values()) == {0o644}, modes


def _children(pid: int) -> list[int]:
    import psutil

    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def test_pool_workers_end_when_the_sweep_is_killed(tmp_path: Path) -> None:
    import psutil

    command = [
        sys.executable, "-m", "specsim", "sweep", "--out", str(tmp_path / "sweep"),
        "--workers", "2", "--set", "workload.num_requests=200000", "--grid", "seed=1,2,3",
    ]  # fmt: skip
    parent = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(workers) < 2:
            time.sleep(0.5)
            workers = _children(parent.pid)
        assert len(workers) >= 2, "the sweep never started its workers"
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 15
        alive = workers
        while time.monotonic() < deadline and alive:
            time.sleep(0.25)
            alive = [
                pid
                for pid in workers
                if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
            ]
        assert not alive, f"workers {alive} outlived their parent"
    finally:
        for pid in [parent.pid, *_children(parent.pid), *workers]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_run_never_replaces_its_trace(tmp_path: Path) -> None:
    trace = tmp_path / "requests.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,5\n0.5,10,5\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "workload:\n  num_requests: 2\n  arrival: {process: trace, path: requests.csv}\n"
    )
    before = trace.read_bytes()
    code, output = _invoke("run", str(scenario), "--out", str(tmp_path), "--force")
    assert code == 2 and "the input" in output
    assert trace.read_bytes() == before


def test_report_out_onto_an_existing_file_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert _invoke("run", *SMALL, "--out", str(run))[0] == 0
    target = tmp_path / "existing.html"
    target.write_text("kept\n", encoding="utf-8")
    code, output = _invoke("report", str(run), "--out", str(target))
    assert code == 2 and "is an existing file" in output, output
    assert target.read_text(encoding="utf-8") == "kept\n"


_KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
import numpy as np
from sim.results import StepStreamWriter
writer = StepStreamWriter(Path(sys.argv[1]))
writer.write({"t": np.arange(10.0)})
print(writer._tmp, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(tmp_path: Path) -> None:
    """A ``kill -9`` mid-write leaves the hidden temporary file; the next write of the same
    output removes it (its writer is gone), and leaves a live writer's file and other names."""
    from sim.output import atomic_write

    target = tmp_path / "steps.parquet"
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, str(target)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    leftover = Path(done.stdout.strip())
    assert leftover.exists() and leftover.parent == tmp_path
    live = tmp_path / f".steps.parquet.{os.getpid()}.abc123"
    live.write_text("being written")
    unrelated = tmp_path / ".steps.parquet.notes"
    unrelated.write_text("not a temporary file of ours")

    atomic_write(target, lambda f: f.write("new"))

    assert not leftover.exists()
    assert live.exists() and unrelated.exists()
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [target.name, live.name, unrelated.name]
    )


def test_yaml_dumper_writes_the_pure_python_text() -> None:
    """The resolved scenarios a run writes come out of libyaml's dumper (when built in) as the
    pure-Python safe dumper writes them, every shipped scenario's; a long double-quoted string is
    folded at other places (libyaml's choice), and reads back as the same value."""
    import yaml

    from sim.output import SAFE_DUMPER, _jsonable
    from sim.scenario import read_document

    documents = [read_document(None)[0]]
    documents += [read_document(path)[0] for path in sorted((ROOT / "scenarios").glob("*.yaml"))]
    for document in documents:
        data = _jsonable(document)
        assert yaml.dump(data, Dumper=SAFE_DUMPER, sort_keys=False) == yaml.safe_dump(
            data, sort_keys=False
        )
    odd = {"notes": "a: b # c\n  'quoted' \"twice\" é ✓ " + "long " * 40, "x": [1.5e-9, None]}
    assert yaml.safe_load(yaml.dump(odd, Dumper=SAFE_DUMPER, sort_keys=False)) == odd
