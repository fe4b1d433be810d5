"""The published JSON Schema of scenario files: valid, and in agreement with the validator."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from sim.scenario import scenario_json_schema
from specsim.cli import app

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))


def test_the_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(scenario_json_schema())


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_shipped_scenario_satisfies_the_schema(path: Path) -> None:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(scenario_json_schema()).validate(document)


@pytest.mark.parametrize(
    "document",
    [
        {"hardware": {"gpu": "h100-sxm", "num_gpus": 1, "colour": "blue"}},
        {"engine": {"max_num_seqs": "many"}},
        {"seed": -1},
        {"workload": {"arrival": {"process": "poisson", "rate_per_s": 0}}},
    ],
)
def test_documents_the_validator_refuses_the_schema_refuses_too(document: dict) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(scenario_json_schema()).validate(document)


def test_specsim_schema_prints_the_schema_and_writes_it(tmp_path: Path) -> None:
    printed = CliRunner().invoke(app, ["schema"])
    assert printed.exit_code == 0
    assert json.loads(printed.stdout) == json.loads(json.dumps(scenario_json_schema()))
    target = tmp_path / "scenario.schema.json"
    written = CliRunner().invoke(app, ["schema", "--out", str(target)])
    assert written.exit_code == 0
    assert json.loads(target.read_text(encoding="utf-8"))["title"] == "specsim scenario"
