"""Local worker processes that keep state between tasks: a paused run goes on where it paused.

A :class:`concurrent.futures.ProcessPoolExecutor` sends each task to whichever worker is free,
so nothing a task leaves behind can be found by the next one. :class:`StickyPool` gives each
task that names a *key* a :class:`Slot` in the worker that first ran that key, and sends every
later task with that key to the same worker: a plan's probe pauses a seed's simulation in the
slot, and its next, longer stage continues it. Tasks without a key go to the least busy worker.
Results depend only on each key's sequence of tasks, never on which worker ran them or how many
workers there are. With one worker the tasks run in the calling process, at submission.

Workers are started with :func:`sim.pool.pool_worker_init`: they ignore Ctrl-C and end with
their parent; then the pool's ``initializer`` runs in each (in the calling process with one
worker), as a plan's loads the compiled loop once for all its probes. A task's exception is
raised by its future; a worker that dies fails the futures of its unfinished tasks with
:class:`concurrent.futures.process.BrokenProcessPool`.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import threading
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import Executor, Future
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from sim.pool import pool_worker_init


@dataclass
class Slot:
    """What a keyed task keeps for the next task with its key (None: nothing; the slot goes)."""

    value: Any = None


def _call(store: dict[Hashable, Slot], key: Hashable | None, fn: Callable[..., Any],
          args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:  # fmt: skip
    if key is None:
        return fn(*args, **kwargs)
    slot = store.setdefault(key, Slot())
    try:
        return fn(*args, **kwargs, slot=slot)
    finally:
        if slot.value is None:
            store.pop(key, None)


def _serve(
    tasks: Connection, results: Connection, initializer: Callable[[], Any] | None = None
) -> None:
    """A worker's loop: run each task with its slot and send back its result or exception."""
    pool_worker_init()
    if initializer is not None:
        initializer()
    store: dict[Hashable, Slot] = {}
    while True:
        try:
            message = tasks.recv()
        except EOFError:
            return
        if message is None:
            return
        task_id, key, fn, args, kwargs = message
        if fn is None:  # forget the slots named in args
            for name in args:
                store.pop(name, None)
            continue
        try:
            reply = (task_id, True, _call(store, key, fn, args, kwargs))
        except BaseException as exc:
            reply = (task_id, False, exc)
        try:
            results.send(reply)
        except Exception as exc:
            results.send((task_id, False, RuntimeError(f"task {task_id}: {exc!r}")))


@dataclass
class _Worker:
    process: Any
    tasks: Connection
    results: Connection
    pending: set[int]


class StickyPool(Executor):
    """``workers`` local processes; a keyed task runs where its key ran before. ``initializer``
    runs once in each worker before its first task (with one worker, here).

    Raise ValueError if ``workers`` < 1.
    """

    def __init__(self, workers: int, initializer: Callable[[], Any] | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self._store: dict[Hashable, Slot] = {}  # the inline case's slots
        self._owner: dict[Hashable, int] = {}
        self._futures: dict[int, Future[Any]] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._workers: list[_Worker] = []
        self._closed = False
        if workers == 1:
            if initializer is not None:
                initializer()
            return
        context = multiprocessing.get_context()
        for _ in range(workers):
            task_out, task_in = context.Pipe(duplex=False)
            result_out, result_in = context.Pipe(duplex=False)
            process = context.Process(
                target=_serve, args=(task_out, result_in, initializer), daemon=True
            )
            process.start()
            task_out.close()
            result_in.close()
            self._workers.append(_Worker(process, task_in, result_out, set()))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Run ``fn(*args, **kwargs)`` on the least busy worker."""
        return self._submit(None, fn, args, kwargs)

    def submit_keyed(
        self, key: Hashable, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> Future[Any]:
        """Run ``fn(*args, **kwargs, slot=slot)`` with ``key``'s slot, on the worker that ran
        ``key`` before (the least busy one the first time)."""
        return self._submit(key, fn, args, kwargs)

    def forget(self, keys: Iterable[Hashable]) -> None:
        """Drop the slots of ``keys`` (what they kept is no longer needed)."""
        by_worker: dict[int, list[Hashable]] = {}
        with self._lock:
            for key in keys:
                self._store.pop(key, None)
                owner = self._owner.pop(key, None)
                if owner is not None:
                    by_worker.setdefault(owner, []).append(key)
            for index, names in by_worker.items():
                self._send(index, (None, None, None, tuple(names), {}))

    def _submit(
        self, key: Hashable | None, fn: Callable[..., Any], args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Future[Any]:  # fmt: skip
        future: Future[Any] = Future()
        if self._closed:
            raise RuntimeError("cannot submit to a pool that was shut down")
        if not self._workers:
            try:
                future.set_result(_call(self._store, key, fn, args, kwargs))
            except Exception as exc:
                future.set_exception(exc)
            return future
        with self._lock:
            task_id = next(self._ids)
            index = self._owner.get(key) if key is not None else None
            if index is None:
                # The least busy worker; between equally busy ones, the one holding fewest
                # keys (their paused runs), so keys spread however fast earlier tasks finished.
                owned = Counter(self._owner.values())
                index = min(
                    range(len(self._workers)),
                    key=lambda i: (len(self._workers[i].pending), owned[i], i),
                )
                if key is not None:
                    self._owner[key] = index
            self._futures[task_id] = future
            self._workers[index].pending.add(task_id)
            self._send(index, (task_id, key, fn, args, kwargs))
        return future

    def _send(self, index: int, message: Any) -> None:
        worker = self._workers[index]
        try:
            worker.tasks.send(message)
        except (OSError, ValueError):
            self._fail(worker, "a worker process ended while tasks were sent to it")

    def _fail(self, worker: _Worker, reason: str) -> None:
        for task_id in list(worker.pending):
            future = self._futures.pop(task_id, None)
            if future is not None and not future.done():
                future.set_exception(BrokenProcessPool(reason))
        worker.pending.clear()

    def _read(self) -> None:
        """Hand each result to its future; fail the tasks of a worker that died."""
        live: dict[Connection, _Worker] = {w.results: w for w in self._workers}
        while live:
            for ready in wait(list(live)):
                assert isinstance(ready, Connection)
                worker = live[ready]
                try:
                    task_id, ok, value = ready.recv()
                except (EOFError, OSError):
                    del live[ready]
                    with self._lock:
                        self._fail(worker, "a worker process ended before its task did")
                    continue
                with self._lock:
                    worker.pending.discard(task_id)
                    future = self._futures.pop(task_id, None)
                if future is None or future.done():
                    continue
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the workers: after their tasks (``wait``), or at once, failing what is left."""
        self._closed = True
        for worker in self._workers:
            if wait and not cancel_futures:
                with contextlib.suppress(OSError, ValueError):
                    worker.tasks.send(None)
            else:
                worker.process.terminate()
        for worker in self._workers:
            if wait:
                worker.process.join()
            worker.tasks.close()
        with self._lock:
            for future in self._futures.values():
                if not future.done() and not future.cancel():
                    future.set_exception(BrokenProcessPool("pool shut down"))
            self._futures.clear()
