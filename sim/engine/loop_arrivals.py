"""The compiled loop's arrivals: their release into the waiting queue, and a closed loop's
pending arrivals, a binary heap of ``(time, request)`` in two arrays, ordered as the Python
path's :mod:`heapq` of tuples orders them (by time, then request id), so that the two paths
release arrivals in the same order. Plain Python functions;
:func:`sim.engine.loop_kernel.compiled` compiles them."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from sim.engine.loop_state import WAITING

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


def release(
    now: float,
    closed: bool,
    queue: IntArray,
    qtail: int,
    state: Any,
    arrival_at: FloatArray,
    engine_arrival_at: FloatArray,
    open_loop: tuple[FloatArray, FloatArray, int],
    heap: tuple[FloatArray, IntArray, int, FloatArray],
) -> tuple[int, int, int]:
    """Arrivals at or before ``now`` join the end of the waiting queue (a step at ``t`` sees
    those at ``t`` or before): the open loop's (``open_loop``: the arrival times, the clients'
    send times, the next one) or, ``closed``, the closed loop's (``heap``: its times, requests,
    size and the clients' send times). Return the queue's end, the next open-loop arrival, the
    heap's size."""
    times, client_at, nxt = open_loop
    heap_t, heap_r, heap_n, client_sent_at = heap
    if closed:
        while heap_n > 0 and heap_t[0] <= now:
            r = heap_r[0]
            engine_arrival_at[r] = heap_t[0]
            heap_n = heap_pop(heap_t, heap_r, heap_n)
            arrival_at[r] = client_sent_at[r]
            state[r] = WAITING
            queue[qtail] = r
            qtail += 1
        return qtail, nxt, heap_n
    while nxt < len(times) and times[nxt] <= now:
        arrival_at[nxt] = client_at[nxt]
        engine_arrival_at[nxt] = times[nxt]
        state[nxt] = WAITING
        queue[qtail] = nxt
        qtail += 1
        nxt += 1
    return qtail, nxt, heap_n


def before(t1: float, r1: int, t2: float, r2: int) -> bool:
    """Whether arrival ``(t1, r1)`` comes before ``(t2, r2)``: by time, then request id (as
    the Python path's heap of ``(time, request)`` tuples orders them)."""
    return t1 < t2 or (t1 == t2 and r1 < r2)


def heap_push(heap_t: FloatArray, heap_r: IntArray, size: int, t: float, r: int) -> int:
    """Add arrival ``(t, r)`` to the binary heap of ``size`` entries; return the new size."""
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if not before(t, r, heap_t[parent], heap_r[parent]):
            break
        heap_t[i] = heap_t[parent]
        heap_r[i] = heap_r[parent]
        i = parent
    heap_t[i] = t
    heap_r[i] = r
    return size + 1


def heap_pop(heap_t: FloatArray, heap_r: IntArray, size: int) -> int:
    """Remove the heap's first entry (read it from ``heap_t[0]``, ``heap_r[0]`` before);
    return the new size."""
    size -= 1
    t, r = heap_t[size], heap_r[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and before(
            heap_t[child + 1], heap_r[child + 1], heap_t[child], heap_r[child]
        ):
            child += 1
        if not before(heap_t[child], heap_r[child], t, r):
            break
        heap_t[i] = heap_t[child]
        heap_r[i] = heap_r[child]
        i = child
    heap_t[i] = t
    heap_r[i] = r
    return size
