"""Run a command and print the CPU time of its whole process tree.

``getrusage(RUSAGE_CHILDREN)`` counts only the descendants that were waited for: a pool worker
left to end after its parent (``ProcessPoolExecutor.shutdown(wait=False)``, as a sweep's pool
is shut down) is reparented, and its CPU time is lost to whoever measures. This process makes
itself the child subreaper (Linux, ``prctl(PR_SET_CHILD_SUBREAPER)``, see prctl(2)), so every
descendant that outlives its parent is reparented here, reaped and counted. Usage::

    python -m benchmarks.tree_cpu python -m benchmarks.bench_sweep

Prints the command's own output, then one line: wall time and CPU time (user + system) of the
tree. Exit status: the command's. Elsewhere than Linux the line says that orphans may be missed.
"""

from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import sys
import time

#: prctl(2) option: orphaned descendants are reparented to the calling process.
PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def main(argv: list[str] | None = None) -> int:
    """Run the command in ``argv`` and return its exit status."""
    command = sys.argv[1:] if argv is None else argv
    if not command:
        print("usage: python -m benchmarks.tree_cpu COMMAND [ARGS...]", file=sys.stderr)
        return 2
    reaping = _become_subreaper()
    started_s = time.perf_counter()
    status = subprocess.call(command)
    while reaping:  # the orphans reparented here, until none is left
        try:
            os.wait()
        except ChildProcessError:
            break
    elapsed_s = time.perf_counter() - started_s
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    note = "" if reaping else " (not a subreaper here: orphaned workers may be missed)"
    print(f"process tree: wall time {elapsed_s:.1f} s, CPU time "
          f"{usage.ru_utime + usage.ru_stime:.1f} s{note}")  # fmt: skip
    return status


if __name__ == "__main__":
    sys.exit(main())
