"""benchmarks/tree_cpu.py counts the CPU time of workers that outlive their parent."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a child subreaper is Linux's")
def test_an_orphaned_worker_s_cpu_time_is_counted() -> None:
    # The shell starts a worker in the background and exits at once: the worker is orphaned
    # and burns 0.4 s of CPU after its parent is gone, which RUSAGE_CHILDREN of a plain parent
    # never sees. The subreaper reaps it and counts it.
    orphan = f"{sys.executable} -c '{BURN}' & exit 0"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.tree_cpu", "sh", "-c", orphan],
        capture_output=True,
        text=True,
        check=True,
    )
    match = re.search(r"CPU time ([0-9.]+) s$", done.stdout.strip())
    assert match is not None, done.stdout
    assert float(match.group(1)) >= 0.4


def test_no_command_is_a_usage_error() -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.tree_cpu"], capture_output=True)
    assert done.returncode == 2 and b"usage" in done.stderr
