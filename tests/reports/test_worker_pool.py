"""The sticky worker pool: a keyed task finds what the last task with its key left, on any
number of workers; failures reach the future."""

from __future__ import annotations

import os
import signal
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import pytest

from reports.worker_pool import Slot, StickyPool


def _count(step: int, *, slot: Slot) -> tuple[int, int]:
    """Adds ``step`` to the slot's running total; returns it and the worker's pid."""
    slot.value = (slot.value or 0) + step
    return slot.value, os.getpid()


def _fail(message: str) -> None:
    raise ValueError(message)


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _totals(workers: int) -> dict[str, list[Any]]:
    with StickyPool(workers) as pool:
        futures = {key: [pool.submit_keyed(key, _count, step) for step in (1, 2, 3)]
                   for key in ("a", "b", "c")}  # fmt: skip
        return {key: [f.result() for f in fs] for key, fs in futures.items()}


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_keyed_task_continues_what_its_key_left_on_one_worker(workers: int) -> None:
    totals = _totals(workers)
    for results in totals.values():
        assert [total for total, _ in results] == [1, 3, 6]  # 1, 1+2, 1+2+3
        assert len({pid for _, pid in results}) == 1  # every task of a key on one worker
    if workers > 1:  # the keys were spread over the workers
        assert len({results[0][1] for results in totals.values()}) > 1


def test_forget_drops_a_key_s_slot_and_an_empty_slot_goes() -> None:
    with StickyPool(2) as pool:
        assert pool.submit_keyed("a", _count, 5).result()[0] == 5
        pool.forget(["a"])
        assert pool.submit_keyed("a", _count, 1).result()[0] == 1


def test_a_task_s_exception_is_raised_by_its_future() -> None:
    with StickyPool(2) as pool:
        with pytest.raises(ValueError, match="bad input"):
            pool.submit(_fail, "bad input").result()
        assert pool.submit_keyed("a", _count, 2).result()[0] == 2  # the worker goes on


def test_a_worker_that_dies_fails_its_task() -> None:
    with StickyPool(2) as pool, pytest.raises(BrokenProcessPool):
        pool.submit(_die).result(timeout=60)


def test_one_worker_runs_inline_and_keeps_slots() -> None:
    with StickyPool(1) as pool:
        first, pid = pool.submit_keyed("a", _count, 4).result()
        assert pid == os.getpid() and first == 4
        assert pool.submit_keyed("a", _count, 4).result()[0] == 8
    with pytest.raises(ValueError, match="workers"):
        StickyPool(0)


#: Set by _mark_started in the process it runs in.
_STARTED: list[int] = []


def _mark_started() -> None:
    _STARTED.append(os.getpid())


def _started_in_this_process(*, slot: Slot) -> tuple[int, list[int]]:
    del slot
    return os.getpid(), list(_STARTED)


@pytest.mark.parametrize("workers", [1, 2])
def test_the_initializer_runs_once_in_each_worker_before_its_tasks(workers: int) -> None:
    # A plan's pool loads the compiled loop this way: once a worker, before the first probe.
    _STARTED.clear()
    with StickyPool(workers, initializer=_mark_started) as pool:
        seen = [pool.submit_keyed(key, _started_in_this_process).result() for key in "abcd"]
    for pid, started in seen:
        assert started == [pid]  # ran in the task's own process, once
    if workers == 1:
        assert [os.getpid()] == _STARTED
