"""Where the kernel tests find the repository and the shared kernel microbenchmarks."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED = REPO_ROOT / ".." / "shared"
KERNEL_DATA = SHARED / "data" / "under-load" / "aiconfigurator"
needs_shared = pytest.mark.skipif(
    not KERNEL_DATA.is_dir(), reason="kernel microbenchmarks not beside the checkout"
)
