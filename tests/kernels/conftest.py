"""Fixtures of the kernel-table tests: the repository root on the path and the shared data."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # tools/ is not installed; import it from the checkout
    sys.path.insert(0, str(REPO_ROOT))

from tests.kernels.shared_data import KERNEL_DATA, SHARED  # noqa: E402


@pytest.fixture(scope="session")
def rebuilt() -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """The kernel files and report as ``tools/fit_kernels.py`` builds them now (once a session)."""
    if not KERNEL_DATA.is_dir():
        pytest.skip("kernel microbenchmarks not beside the checkout")
    from tools.fit_kernels import build

    return build(SHARED)
