"""Progress of long commands: a bar with what is running and an ETA on a terminal, a line per
finished item otherwise (logs and CI keep a readable record), and one line on Ctrl-C.

``with item_progress(total, "compare") as progress: progress.start("eagle3"); ...;
progress.done("eagle3 ok")``. ``interrupted(what_was_saved, how_to_resume)`` is the one line a
command prints when the user stops it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class ItemProgress:
    """Counts finished items of one command and shows them (see the module docstring)."""

    def __init__(self, total: int, label: str, console: Console) -> None:
        self.total = total
        self.label = label
        self.console = console
        self.num_done = 0
        self._started_at = time.perf_counter()
        self._item_started_at = self._started_at
        self._bar: Progress | None = None
        self._task: Any = None
        if console.is_terminal:
            self._bar = Progress(
                TextColumn(f"{label} [bold]{{task.description}}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=console,
                transient=True,
            )
            self._task = self._bar.add_task("", total=total)

    def start(self, item: str) -> None:
        """``item`` is now running."""
        self._item_started_at = time.perf_counter()
        if self._bar is not None:
            self._bar.update(self._task, description=item)

    def done(self, item: str, count: int = 1) -> None:
        """``count`` items finished; the last one is described by ``item``."""
        self.num_done += count
        if self._bar is not None:
            self._bar.update(self._task, advance=count)
            self._item_started_at = time.perf_counter()
            return
        now = time.perf_counter()
        took, self._item_started_at = now - self._item_started_at, now
        self.console.print(
            f"{self.label} [{self.num_done}/{self.total}] {item} ({took:.1f} s)",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )

    def update(self, num_done: int, total: int, item: str, estimated: bool = False) -> None:
        """Set the count and the ``total`` (``estimated`` for searches whose length shows as
        they go); off a terminal a line is printed when the count grows."""
        grew = num_done > self.num_done
        self.num_done, self.total = num_done, max(total, num_done)
        if self._bar is not None:
            self._bar.update(self._task, completed=num_done, total=self.total, description=item)
        elif grew:
            self.console.print(
                f"{self.label} [{num_done}/{'~' if estimated else ''}{self.total}] {item}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )

    def __enter__(self) -> ItemProgress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


@contextmanager
def item_progress(total: int, label: str, console: Console) -> Iterator[ItemProgress]:
    """An :class:`ItemProgress` shown for the duration of the block."""
    with ItemProgress(total, label, console) as progress:
        yield progress


@contextmanager
def working(what: str, console: Console) -> Iterator[None]:
    """One piece of work whose length is not known ahead (a fit): a spinner with the elapsed
    time on a terminal; a line when it starts and one when it ends otherwise."""
    started = time.perf_counter()
    if console.is_terminal:
        with Progress(
            SpinnerColumn(),
            TextColumn(what),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as spinner:
            spinner.add_task(what, total=None)
            yield
        return
    console.print(f"{what}...", highlight=False, markup=False)
    yield
    took = time.perf_counter() - started
    console.print(f"{what}: done in {took:.1f} s", highlight=False, markup=False)


def interrupted_line(saved: str, resume: str | None) -> str:
    """The one line printed on Ctrl-C: what was saved, and how to go on."""
    return f"interrupted: {saved}" + (f"; {resume}" if resume else "")
