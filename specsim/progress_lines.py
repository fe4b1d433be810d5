"""Progress as plain lines, for a long run whose stderr is a log file or a pipe, not a terminal.

On a terminal the command line draws a progress bar; elsewhere a bar's carriage returns make a
log unreadable, and a silent 20-minute run looks hung. :func:`progress_lines` returns a callback
that counts finished items and prints one line at each tenth of the total (and at least every
:data:`MIN_INTERVAL_S` seconds while items finish), with the elapsed time and a linear ETA.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Print at least this often while work progresses, so a slow run still shows life.
MIN_INTERVAL_S = 30.0
#: Lines at each tenth of the total.
STEPS = 10


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def progress_lines(
    total: int,
    label: str,
    emit: Callable[[str], object],
    clock: Callable[[], float] = time.monotonic,
) -> Callable[[int], None]:
    """A callback ``advance(n)`` that prints ``label: done/total (pct), elapsed, ETA`` lines."""
    started = clock()
    state = {"done": 0, "next": max(1, total // STEPS), "last": started}

    def advance(count: int) -> None:
        state["done"] += count
        done, now = state["done"], clock()
        if done < state["next"] and now - state["last"] < MIN_INTERVAL_S and done < total:
            return
        while state["next"] <= done:
            state["next"] += max(1, total // STEPS)
        state["last"] = now
        elapsed = now - started
        eta = elapsed * (total - done) / done if 0 < done < total else 0.0
        share = done / total if total else 1.0
        tail = f", about {_clock(eta)} left" if done < total else ""
        emit(f"{label}: {done:,}/{total:,} ({share:.0%}), {_clock(elapsed)} elapsed{tail}")

    return advance
