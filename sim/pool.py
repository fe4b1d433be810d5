"""Local worker processes that end with their parent.

``ProcessPoolExecutor`` workers block reading their call queue; when the parent is killed
(``kill -9``, an out-of-memory kill) nothing closes that queue's other end in every case, and the
workers stay alive, orphaned. :func:`pool_worker_init` is every local pool's initializer: it asks
Linux to send the worker SIGTERM when its parent dies (``prctl(PR_SET_PDEATHSIG)``, see prctl(2)),
and elsewhere starts a thread that exits the worker once its parent has gone. It also makes the
worker ignore Ctrl-C: the signal reaches the whole process group, and only the parent decides what
to keep.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

#: prctl(2) option: the signal the calling process gets when its parent thread dies.
PR_SET_PDEATHSIG = 1
#: How often the portable watchdog looks for the parent.
WATCH_INTERVAL_S = 1.0


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(WATCH_INTERVAL_S)
        if os.getppid() != parent:
            os._exit(1)


def pool_worker_init() -> None:
    """Initialise a pool worker: ignore SIGINT and end when the parent process ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    armed = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
