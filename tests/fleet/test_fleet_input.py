"""Bad fleet input: one message naming the key path, exit code 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from specsim.cli import app
from tests.fleet.helpers import document


def _run_cli(tmp_path: Path, fleet: dict, *extra: str) -> tuple[int, str]:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(document(fleet, num_requests=20)), encoding="utf-8")
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out"), *extra])
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("fleet", "needle"),
    [
        ({"replicas": 2, "router": "fastest"}, "fleet.router.policy"),
        ({"replicas": 0}, "fleet.replicas"),
        ({"replicas": [{"count": 1, "hardware": {"gpu": "tpu-v5"}}]}, "fleet.replicas.0.hardware"),
        ({"replicas": 2, "disaggregation": {}}, "give either replicas or disaggregation"),
        ({"replicas": 2, "router": "session_affinity"}, "fleet.router.num_sessions"),
    ],
)
def test_bad_fleet_is_one_message_and_exit_2(tmp_path: Path, fleet: dict, needle: str) -> None:
    code, output = _run_cli(tmp_path, fleet)
    assert code == 2
    assert needle in output
    assert "Traceback" not in output


def test_a_replica_that_cannot_hold_the_model_names_its_group(tmp_path: Path) -> None:
    fleet = {
        "replicas": [{"count": 1}, {"count": 1, "hardware": {"gpu": "a100-80gb", "num_gpus": 1}}]
    }
    path = tmp_path / "fleet.yaml"
    doc = document(fleet, num_requests=20)
    doc["model"] = "llama-3.1-70b"
    doc["hardware"] = {"gpu": "h200", "num_gpus": 2}
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "fleet.replicas.1 (a100-80gb x1)" in result.output
    assert "Traceback" not in result.output


def test_closed_loop_behind_a_router_is_refused(tmp_path: Path) -> None:
    fleet = {"replicas": 2}
    path = tmp_path / "fleet.yaml"
    doc = document(fleet, num_requests=20, arrival={"process": "closed_loop", "concurrency": 4})
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "workload.arrival.process" in result.output


def test_fleet_run_writes_the_assignment(tmp_path: Path) -> None:
    code, output = _run_cli(tmp_path, {"replicas": 2, "router": "least_outstanding"})
    assert code == 0, output
    import pandas as pd

    frame = pd.read_csv(tmp_path / "out" / "requests.csv")
    assert set(frame["replica"]) == {0, 1}
    summary = yaml.safe_load((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    assert summary["fleet"]["num_replicas"] == 2
    assert len(summary["fleet"]["replicas"]) == 2
