"""Small result folders of every kind, built once per session, and a local command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from specsim.cli import app

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "spec-chat-eagle3.yaml"


def small_document(num_requests: int = 60) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(SCENARIO.read_text(encoding="utf-8"))
    document["workload"]["num_requests"] = num_requests
    return document


@pytest.fixture(scope="session")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A run, a compare, a sweep and a plan folder of the chat scenario, each small."""
    from reports.capacity import plan_capacity
    from reports.comparison import compare_methods, save_comparison
    from reports.sweep import run_sweep, write_manifest
    from reports.sweep_grid import expand_grid, parse_grid

    root = tmp_path_factory.mktemp("results")
    document = small_document()
    runs = compare_methods(document, ROOT, "test", ["none", "eagle3", "ngram"])
    save_comparison(runs, root / "compare")
    axes = parse_grid(["workload.arrival.rate_per_s=1,8", "speculation.method=none,eagle3"])
    write_manifest(root / "sweep", "test", axes, [])
    run_sweep(expand_grid(document, axes, "test"), root / "sweep", ROOT, workers=1)
    plan_capacity(
        small_document(40),
        ROOT,
        "test",
        slo_text="ttft_p99_ms<=300,tpot_p50_ms<=15",
        methods_text="none,eagle3",
        target_qps=20.0,
        gpu_hour_usd=2.0,
        num_seeds=2,
        num_requests=400,
        max_requests=800,
        tolerance=0.2,
        workers=1,
        out_dir=root / "plan",
    )
    return {
        "run": root / "compare" / "eagle3",
        "compare": root / "compare",
        "sweep": root / "sweep",
        "plan": root / "plan",
    }


@pytest.fixture
def cli() -> typer.Typer:
    """The real ``specsim`` command line, where these commands are registered."""
    return app


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()
