"""The compiled fleet's driver: every replica's steps and the router's choices in one numba loop.

:mod:`sim.fleet.compiled_fleet` says what it covers and hands it the fleet's state. Each replica
is the compiled loop's state for a lone node (:mod:`sim.engine.loop_kernel`) whose arrivals are
the requests routed to it, numbered in the order they were routed (local ids); the driver takes
the arrivals in time order and, before routing one at ``t``, runs every replica's steps that start
before ``t`` (the loop's horizon): a step that starts before ``t`` cannot see a request arriving
at ``t``, and every finish at or before ``t`` is then known. The router reads those states, as
:class:`sim.fleet.routers.Router` does from the SimPy fleet's replicas.

A replica's outstanding requests at ``t`` are those routed to it, less those finished at or
before ``t``: only its last step run can end after ``t`` (the steps before it ended by its start,
before ``t``), so its finishes (all at the replica's clock) are the only ones still pending.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sim.engine import loop_kernel, loop_state
from sim.engine.loop_state import (
    _FINISHED_N,
    _ITL,
    _MISSING,
    _NEXT,
    _QHEAD,
    _QTAIL,
    _RECORDS,
    _RUNNING_N,
    DONE,
    MISSING,
    PYTHON,
)

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

#: What the driver returns besides the loop's DONE, PYTHON (a step the loop does not take: the
#: fleet runs on the SimPy path instead) and MISSING (cost entries to price, then call again):
#: a replica's record buffer may not hold another call's steps (hand them over, call again).
FLUSH = 4

#: Routers the driver applies (:mod:`sim.fleet.routers`).
ROUND_ROBIN, LEAST_OUTSTANDING = 0, 1

#: Request state of a finished request (:mod:`sim.engine.requests`).
_FINISHED = 3

# Slots of the driver's own state: the next arrival to route, the missing entries' count.
_ARRIVAL, _NUM_MISSING = 0, 1


def _driver(stamp: int) -> Callable[..., int]:
    """The driver, with ``stamp`` (a digest of the loop's and this module's source) bound in its
    closure, so a changed loop compiles a new driver instead of reusing a stale one from the
    disk cache (as :func:`sim.engine.loop_kernel._loop` does for the evaluator)."""

    def drive(
        times: FloatArray,
        order: IntArray,
        g_prompt: IntArray,
        g_output: IntArray,
        g_offsets: IntArray,
        g_proposed: Any,
        g_accepted: Any,
        router: int,
        rng: Any,
        drv: IntArray,
        req_i: NDArray[np.int64],
        req_f: NDArray[np.float64],
        state: NDArray[np.int8],
        offsets: IntArray,
        proposed: Any,
        accepted: Any,
        r_times: FloatArray,
        local_ids: IntArray,
        queue: IntArray,
        running: IntArray,
        ints: IntArray,
        clock: FloatArray,
        cfg: IntArray,
        cost: tuple[Any, ...],
        rec_f: FloatArray,
        rec_i: IntArray,
        itl_values: FloatArray,
        itl_at: FloatArray,
        missing: FloatArray,
        policy: tuple[Any, ...],
        buffers: tuple[Any, ...],
        closed_f: FloatArray,
        closed_i: IntArray,
        acc_f: FloatArray,
        acc_i: IntArray,
        acc_itl: FloatArray,
        filled: IntArray,
        routed: IntArray,
        finished: IntArray,
        late: IntArray,
        live: IntArray,
        num_live: IntArray,
        assign: IntArray,
    ) -> int:
        """Route ``times`` (request ``order[k]`` arrives at ``times[k]``) from ``drv[_ARRIVAL]``
        on, running the replicas' steps in between; return :data:`DONE` once every replica has
        served its requests, or FLUSH/MISSING/PYTHON to hand over (the state is kept: call again
        to go on). Replica ``c``'s request columns are rows ``c`` of ``req_i`` (the int64 ones),
        ``req_f`` (the float ones) and ``state``, each kind's rows in the loop's order
        (:data:`sim.engine.loop_state.REQUEST_COLUMNS`; the loop takes them as
        :func:`~sim.engine.loop_state.replica_columns` gives them); its plan is
        ``offsets``/``proposed``/``accepted`` (its requests' segments of the global plan, in
        routed order); its loop state ``queue``/``running``/``ints``/``clock`` as the loop keeps
        a lone node's. Each call's records are copied to ``acc_f``/``acc_i``/``acc_itl`` after
        ``filled`` (records, gaps) for the caller to take."""
        if stamp < 0:
            return PYTHON
        num_replicas = routed.shape[0]
        num_arrivals = len(times)
        rows = rec_f.shape[1]
        itl_room = itl_values.shape[0]
        capacity = acc_f.shape[2]
        itl_capacity = acc_itl.shape[2]
        k = drv[_ARRIVAL]
        while True:
            t = times[k] if k < num_arrivals else np.inf
            # Round robin reads no state: route everything, then run each replica to its end.
            advance = router != ROUND_ROBIN or k >= num_arrivals
            for c in range(num_replicas if advance else 0):
                while True:
                    # The replica's next step starts at its clock, or when idle at its next
                    # routed arrival (none: nothing to run before another is routed to it).
                    start = clock[c, 0]
                    if ints[c, _RUNNING_N] == 0 and ints[c, _QTAIL] == ints[c, _QHEAD]:
                        nxt = ints[c, _NEXT]
                        if nxt >= routed[c]:
                            break
                        start = max(start, r_times[c, nxt])
                    if start >= t:
                        break
                    if filled[c, 0] + rows > capacity or filled[c, 1] + itl_room > itl_capacity:
                        drv[_ARRIVAL] = k
                        return FLUSH
                    clock[c, 1] = t
                    m = routed[c]
                    status = _run_steps(
                        _replica_columns(req_i, req_f, state, c),
                        offsets[c], proposed[c], accepted[c],
                        r_times[c, :m], r_times[c, :m], closed_f, closed_f, closed_i, closed_i,
                        closed_f, closed_f, closed_f, queue[c], running[c], ints[c], clock[c],
                        cfg, cost, rec_f, rec_i, itl_values, itl_at, missing, policy, buffers,
                    )  # fmt: skip
                    count = ints[c, _RECORDS]
                    at = filled[c, 0]
                    for row in range(rec_f.shape[0]):
                        acc_f[c, row, at : at + count] = rec_f[row, :count]
                    for row in range(rec_i.shape[0]):
                        acc_i[c, row, at : at + count] = rec_i[row, :count]
                    filled[c, 0] = at + count
                    gaps = ints[c, _ITL]
                    at = filled[c, 1]
                    acc_itl[c, 0, at : at + gaps] = itl_values[:gaps]
                    acc_itl[c, 1, at : at + gaps] = itl_at[:gaps]
                    filled[c, 1] = at + gaps
                    if ints[c, _FINISHED_N] > 0:
                        # Drop the finished from the live list; those finishing in the last
                        # step (at the clock) are the ones a later query may not count yet.
                        now = clock[c, 0]
                        kept = 0
                        at_clock = 0
                        for i in range(num_live[c]):
                            j = live[c, i]
                            if state[c, j] == _FINISHED:
                                finished[c] += 1
                                if req_f[c, 2, j] == now:
                                    at_clock += 1
                            else:
                                live[c, kept] = j
                                kept += 1
                        num_live[c] = kept
                        late[c] = at_clock
                    elif count > 0:
                        late[c] = 0
                    if status == MISSING:
                        drv[_ARRIVAL] = k
                        drv[_NUM_MISSING] = ints[c, _MISSING]
                        return MISSING
                    if status == PYTHON:
                        return PYTHON
                    if status == DONE:
                        break
            if k >= num_arrivals:
                drv[_ARRIVAL] = k
                return DONE
            # --- the router's choice (sim.fleet.routers)
            if router == ROUND_ROBIN:
                c = k % num_replicas
            else:
                # LeastOutstanding: the fewest routed and not finished at t; ties at random
                # (one draw of the router's stream, only on a tie).
                best = -1
                num_tied = 0
                for r in range(num_replicas):
                    load = routed[r] - finished[r]
                    if late[r] > 0 and clock[r, 0] > t:
                        load += late[r]
                    if best < 0 or load < best:
                        best = load
                        num_tied = 0
                    if load == best:
                        drv[2 + num_tied] = r
                        num_tied += 1
                c = drv[2]
                if num_tied > 1:
                    c = drv[2 + rng.integers(0, num_tied)]
            # --- the request joins replica c's arrivals as its next local id
            g = order[k]
            j = routed[c]
            req_i[c, 0, j] = g_prompt[g]
            req_i[c, 1, j] = g_output[g]
            first = g_offsets[g]
            length = g_offsets[g + 1] - first
            base = offsets[c, j]
            offsets[c, j + 1] = base + length
            for i in range(length):
                proposed[c, base + i] = g_proposed[first + i]
                accepted[c, base + i] = g_accepted[first + i]
            r_times[c, j] = t
            local_ids[c, j] = g
            assign[g] = c
            live[c, num_live[c]] = j
            num_live[c] += 1
            routed[c] = j + 1
            k += 1

    return drive


def _replica_columns(*args: Any) -> tuple[Any, ...]:
    """A replica's request columns (:func:`sim.engine.loop_state.replica_columns`), bound
    compiled by :func:`compiled`."""
    raise RuntimeError("the fleet driver's columns are bound by compiled()")


def _run_steps(*args: Any) -> int:
    """The compiled loop (:func:`sim.engine.loop_kernel.compiled`), set by :func:`compiled`."""
    raise RuntimeError("the fleet driver's loop is bound by compiled()")


@cache
def compiled() -> Callable[..., int] | None:
    """The driver of :func:`_driver` compiled by numba (cached on disk), or None without numba."""
    loop = loop_kernel.compiled()
    if loop is None:
        return None
    import numba

    globals()["_run_steps"] = loop
    globals()["_replica_columns"] = numba.njit(cache=True, nogil=True, inline="always")(
        loop_state.replica_columns
    )
    driver: Any = numba.njit(cache=True, nogil=True)(_driver(_source_stamp()))
    return driver


def _source_stamp() -> int:
    """A digest of the loop's stamp (its and its evaluator's source) and this module's source
    (non-negative)."""
    digest = hashlib.sha256(loop_kernel._source_stamp().to_bytes(8, "little"))
    digest.update(Path(__file__).read_bytes())
    return int.from_bytes(digest.digest()[:7], "little")
