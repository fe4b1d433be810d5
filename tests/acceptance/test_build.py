"""The shipped acceptance data is exactly what the build script makes from the published data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from tools.build_acceptance_data import build

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT / ".." / "shared" / "data"


@pytest.mark.skipif(not (SHARED / "published-measurements").is_dir(), reason="no shared data")
def test_build_reproduces_the_shipped_files(tmp_path: Path) -> None:
    build(SHARED, tmp_path)
    shipped = ROOT / "sim" / "data"
    assert yaml.safe_load((tmp_path / "acceptance_profiles.yaml").read_text()) == yaml.safe_load(
        (shipped / "acceptance_profiles.yaml").read_text()
    )
    with (
        np.load(tmp_path / "acceptance_traces_llama31_8b.npz") as fresh,
        np.load(shipped / "acceptance_traces_llama31_8b.npz") as kept,
    ):
        assert sorted(fresh.files) == sorted(kept.files)
        for name in fresh.files:
            np.testing.assert_array_equal(fresh[name], kept[name])
            assert fresh[name].dtype == kept[name].dtype
