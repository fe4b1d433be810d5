"""The shipped YAML tables are read by one function that names the file on bad content."""

from __future__ import annotations

import pytest

from sim.errors import CatalogueError, ScenarioError
from sim.package_data import packaged_yaml


def test_a_shipped_table_is_read_with_its_section() -> None:
    data = packaged_yaml("data/engine_presets.yaml", section="presets", error=ScenarioError)
    assert "vllm-v1" in data["presets"]


def test_a_file_that_is_not_yaml_is_refused_naming_it() -> None:
    # The validation points are CSV, whose quoted fields YAML cannot parse.
    with pytest.raises(CatalogueError, match=r"^sim/data/validation_points.csv: not valid YAML"):
        packaged_yaml("data/validation_points.csv", error=CatalogueError)


def test_a_missing_section_is_refused_naming_it() -> None:
    with pytest.raises(ScenarioError, match=r"engine_presets.yaml: expected a mapping with 'gpus'"):
        packaged_yaml("data/engine_presets.yaml", section="gpus", error=ScenarioError)
