"""The command line the multi-run command tests drive."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from specsim.cli import app


@pytest.fixture
def cli() -> typer.Typer:
    """The real ``specsim`` command line, where these commands are registered."""
    return app


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()
