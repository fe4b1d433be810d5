"""A local command line holding only the multi-run commands, as ``specsim`` registers them."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from reports.commands import register


@pytest.fixture
def cli() -> typer.Typer:
    app = typer.Typer(pretty_exceptions_enable=False)

    @app.callback()
    def root() -> None:
        """specsim (test harness)."""

    register(app)
    return app


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()
