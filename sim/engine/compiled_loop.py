"""The node's per-event work run in compiled code, step by step, for the commonest case.

For one node with open-loop arrivals (known in advance) or closed-loop clients, mixed prefill and
decode batches, in-place KV rollback, no prefix caching and either no speculation, fixed
per-request acceptance plans or a per-step policy the loop compiles
(:mod:`sim.engine.policy_kernel`: disable-above-batch, oracle, sglang-ema, goodput), everything
that happens between two points where Python must decide is plain arithmetic on the request table's
columns: releasing arrivals, the scheduler's step (decodes and prefill chunks under the token
budget, FCFS admissions under the sequence limit and the KV blocks, preemption by recompute), the
clients' next requests, the step's cost (the compiled evaluator of :mod:`sim.engine.cost_kernel`,
called per step as the step's shape becomes known), the requests' progress, completions and the
step records. :func:`sim.engine.loop_kernel.compiled` does that in one loop, compiled with numba;
:class:`CompiledLoop` hands it the node's state and takes the state back.

The loop repeats :meth:`Scheduler.schedule <sim.engine.scheduler.Scheduler.schedule>`,
:func:`~sim.engine.block.general_block` and :meth:`EngineCore.apply_block
<sim.engine.core.EngineCore.apply_block>` for a general step, with the same integer arithmetic
and the same sequential sum of durations, so its records are those of stepping through the
scheduler one step at a time (which the stretch planner reproduces too), bit for bit; the
Python path stays the reference (``EngineCore.compiled_loop`` off) and
``tests/engine/test_compiled_loop.py`` compares the two over random scenarios. It hands control
back to Python, before changing anything, where it does not follow the scheduler: a step that
schedules nothing (after a preemption the scheduler schedules again at once) or whose request
could never fit (the scheduler's error), and a step whose cost needs a table entry not priced
yet (priced by the Python model, then the loop goes on). It also returns after a bounded number
of steps, so that SimPy sees one event per stretch of steps and the records go to the recorder a
chunk at a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from sim.engine import policy_kernel, policy_state
from sim.engine.cost_eval import DRAFT_GIVEN
from sim.engine.drafter import StepPlan
from sim.engine.loop_kernel import compiled
from sim.engine.loop_state import (
    _CLOSED,
    _FINISHED_N,
    _FREE,
    _HEAP_N,
    _ITL,
    _MISSING,
    _NEXT,
    _QHEAD,
    _QTAIL,
    _RECORDS,
    _RUNNING_N,
    _STARTED,
    _STEPS,
    DONE,
    FLOAT_COLUMNS,
    FULL,
    INT_COLUMNS,
    MISSING,
    NUM_INTS,
    PYTHON,
    request_columns,
    step_buffers,
)

if TYPE_CHECKING:
    from sim.engine.core import EngineCore
    from sim.engine.node import ArrivalSchedule

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

__all__ = ["DONE", "FULL", "MISSING", "PYTHON", "CompiledLoop", "for_node", "load"]

#: Requests a run needs before it loads the loop, unless the loop is loaded already in the
#: process: loading numba and the loop's machine code and building the cost evaluator's tables
#: cost some 0.45 s of CPU, which the loop repays at about 125 us a request at the reference load
#: without speculation (measured at 3,000 requests: 0.59 to 0.61 s against 0.45 to 0.50 s on
#: the Python path, so still slower) and about 240 us with EAGLE-3 (3,000 requests: 0.71 to
#: 0.80 s against 0.94 to 0.96 s).
MIN_REQUESTS = 4_000
#: The same for a run that drafts.
MIN_REQUESTS_SPECULATIVE = 2_000

#: Steps one call runs at most (one SimPy event): their records are handed over together.
STEPS_PER_CALL = 1 << 16


class CompiledLoop:
    """The compiled loop bound to one node's engine and arrivals: :meth:`run` hands it the state,
    runs it, and takes the state back (the queues, the clock, the step records, the finishes).

    Build it with :func:`for_node`, which returns None where the loop does not apply.
    """

    def __init__(
        self,
        core: EngineCore,
        arrivals: ArrivalSchedule,
        loop: Callable[..., int],
        on_finish: Callable[[int], None],
        policy: policy_state.LoweredPolicy | None = None,
    ) -> None:
        self.core = core
        self.arrivals = arrivals
        #: No step starts at or after this time once a call ran one (the time a caller pauses
        #: the simulation at); a call runs at least one step.
        self.horizon_s = math.inf
        self._loop = loop
        self._on_finish = on_finish
        lowered = core._lowered
        assert lowered is not None
        self._lowered = lowered
        plan, cfg = core.plan, core.scheduler.config
        self._cfg = loop_config(core, STEPS_PER_CALL)
        if len(plan.proposed):
            self._plan = (plan.offsets, plan.proposed, plan.accepted)
        else:
            empty = np.zeros(1, dtype=np.int16)
            self._plan = (np.zeros(len(plan.offsets), dtype=np.int64), empty, empty)
        self._running = np.zeros(cfg.max_num_seqs + 1, dtype=np.int64)
        n = len(core.requests)
        # The waiting queue at a call from _front on, then every arrival released during it
        # (each request is released once); the requests preempted go before it (at most
        # max_num_seqs wait there at once: no request is admitted while one of them waits).
        self._front = cfg.max_num_seqs + 2
        self._queue = np.zeros(self._front + 2 * n + 1, dtype=np.int64)
        self._closed = arrivals.is_closed_loop
        self._heap_t = np.zeros(n + 1 if self._closed else 1, dtype=np.float64)
        self._heap_r = np.zeros(n + 1 if self._closed else 1, dtype=np.int64)
        # The requests clients send next, in the order they pop them.
        self._starts = np.array(arrivals._starts[::-1], dtype=np.int64)
        self._follow_s = np.array([arrivals.frontend.egress_s, arrivals.think_time_s])
        self._cfg[_CLOSED] = self._closed
        self._server = np.array([arrivals.frontend.enabled, 0.0, 0.0])
        self._rec_f = np.zeros((len(FLOAT_COLUMNS), STEPS_PER_CALL), dtype=np.float64)
        self._rec_i = np.zeros((len(INT_COLUMNS), STEPS_PER_CALL), dtype=np.int64)
        # Room for a step's gaps when the loop starts a step (so a call always runs one).
        num_itl = STEPS_PER_CALL + cfg.max_num_seqs + 1
        self._itl_values = np.zeros(num_itl, dtype=np.float64)
        self._itl_at = np.zeros(num_itl, dtype=np.float64)
        self._missing = np.zeros((3, 2 + len(lowered._levels)), dtype=np.float64)
        self._buffers = step_buffers(cfg.max_num_seqs)
        self._policy = policy
        if policy is None:
            self._no_policy = no_policy()

    def run(self) -> int:
        """Run the loop from the node's state until every arrival is served (:data:`DONE`),
        :data:`STEPS_PER_CALL` steps ran (:data:`FULL`) or the next step needs the Python path
        (:data:`PYTHON`), pricing missing cost entries on the way; the node's state is the loop's
        when it returns."""
        core, arrivals = self.core, self.arrivals
        kv, r = core.kv, core.requests
        ints = self._take_over()
        clock = np.array([core.clock_s, self.horizon_s], dtype=np.float64)
        lowered = self._lowered
        finished = 0
        policy = self._policy
        while True:
            if policy is not None:
                policy.take_over()
            status = self._loop(
                request_columns(r, kv),
                *self._plan,
                arrivals._times,
                arrivals.client_at_s,
                arrivals.client_at_s if self._closed else self._heap_t,
                self._heap_t,
                self._heap_r,
                self._starts,
                self._follow_s,
                arrivals._service_s,
                self._server,
                self._queue,
                self._running,
                ints,
                clock,
                self._cfg,
                lowered.arrays(),
                self._rec_f,
                self._rec_i,
                self._itl_values,
                self._itl_at,
                self._missing,
                self._no_policy if policy is None else policy.arrays(),
                self._buffers,
            )
            if policy is not None:
                policy.hand_back()
            self._hand_back(ints, clock)
            core.num_compiled_steps += int(ints[_RECORDS])
            finished += int(ints[_FINISHED_N])
            if status == policy_kernel.NEED_STEP_TIME:
                assert policy is not None
                policy.tabulate()
            elif status == MISSING:
                lowered._price(self._missing[:, : int(ints[_MISSING])].copy())
            else:
                break
            ints = self._take_over()
        if finished:
            self._on_finish(finished)
        if core.check:
            core.scheduler.check_invariants()
        return status

    def _take_over(self) -> IntArray:
        """The loop's state from the node's: the queues, the pending arrivals, the blocks."""
        core, arrivals = self.core, self.arrivals
        s = core.scheduler
        num_waiting = len(s.waiting)
        front = self._front
        self._queue[front : front + num_waiting] = np.fromiter(
            s.waiting, dtype=np.int64, count=num_waiting
        )
        num_running = len(s.running)
        self._running[:num_running] = s.running
        ints = np.zeros(NUM_INTS, dtype=np.int64)
        ints[_FREE], ints[_STEPS], ints[_NEXT] = core.kv.num_free, core.num_steps, arrivals._next
        ints[_QHEAD], ints[_QTAIL] = front, front + num_waiting
        ints[_RUNNING_N] = num_running
        if self._closed:
            heap = arrivals._heap
            ints[_HEAP_N] = len(heap)
            if heap:
                self._heap_t[: len(heap)] = [t for t, _ in heap]
                self._heap_r[: len(heap)] = [i for _, i in heap]
            ints[_STARTED] = len(self._starts) - len(arrivals._starts)
            server = arrivals._server
            self._server[1], self._server[2] = server.free_at_s, server.last_arrival_s
        return ints

    def _hand_back(self, ints: IntArray, clock: FloatArray) -> None:
        """Give the node the loop's state: queues, pending arrivals, blocks, clock, records."""
        core, arrivals = self.core, self.arrivals
        s = core.scheduler
        waiting = s.waiting
        waiting.clear()
        waiting.extend(self._queue[int(ints[_QHEAD]) : int(ints[_QTAIL])].tolist())
        s.running = self._running[: int(ints[_RUNNING_N])].copy()
        arrivals._next = int(ints[_NEXT])
        if self._closed:
            # The heap's entries are a valid heap of (time, request) for heapq as they stand.
            size = int(ints[_HEAP_N])
            arrivals._heap = list(
                zip(self._heap_t[:size].tolist(), self._heap_r[:size].tolist(), strict=True)
            )
            left = len(self._starts) - int(ints[_STARTED])
            arrivals._issued += len(arrivals._starts) - left
            del arrivals._starts[left:]
            arrivals._server.free_at_s = float(self._server[1])
            arrivals._server._last_arrival_s = float(self._server[2])
        core.kv.num_free = int(ints[_FREE])
        core.clock_s = float(clock[0])
        core.num_steps = int(ints[_STEPS])
        core._decoding = None
        count = int(ints[_RECORDS])
        if count:
            rows: dict[str, object] = {
                name: self._rec_f[i, :count] for i, name in enumerate(FLOAT_COLUMNS)
            }
            rows.update({name: self._rec_i[i, :count] for i, name in enumerate(INT_COLUMNS)})
            core.recorder.append(rows)
        num_itl = int(ints[_ITL])
        if num_itl:
            core.recorder.add_irregular_itl_at(
                self._itl_values[:num_itl].copy(), self._itl_at[:num_itl].copy()
            )


def loop_config(core: EngineCore, max_steps: int) -> IntArray:
    """The loop's configuration for ``core`` (open loop), ``max_steps`` steps a call at most."""
    cfg, kv, plan = core.scheduler.config, core.kv, core.plan
    return np.array(
        [
            cfg.max_num_seqs,
            cfg.max_num_batched_tokens,
            cfg.chunked_prefill,
            cfg.extra_tokens_per_decode,
            kv.block_size,
            kv.num_blocks,
            len(plan.proposed) > 0,
            core.speculative,
            max_steps,
            0,
            cfg.lookahead_slots,
        ],
        dtype=np.int64,
    )


def no_policy() -> tuple[np.ndarray, ...]:
    """The loop's policy argument without a policy (kind 0): arrays of the types it takes,
    never read."""
    f1, i1 = np.zeros(1), np.zeros(1, dtype=np.int64)
    f2, i2 = np.zeros((1, 1)), np.zeros((1, 1), dtype=np.int64)
    return (np.zeros(13, dtype=np.int64), f1, np.zeros(3, dtype=np.int64), i2, i2, f2, f2,
            np.zeros((1, 1, 1, 1)), f2, np.zeros(1, dtype=np.uint8), i1, i2)  # fmt: skip


def load() -> bool:
    """Load the compiled loop in this process (numba imported now, the machine code read from
    its disk cache at the first run), so that every run it applies to takes it from then on,
    however few its requests (:data:`MIN_REQUESTS` counts only while it is not loaded): for a
    worker process that runs many simulations, such as a sweep's or a plan's. Return whether
    it is available (False without numba)."""
    return compiled() is not None


def for_node(
    core: EngineCore, arrivals: ArrivalSchedule, on_finish: Callable[[int], None]
) -> CompiledLoop | None:
    """The compiled loop for ``core`` serving ``arrivals`` (``on_finish(count)`` told of each
    batch of completions), or None where it does not apply: the loop off
    (``core.compiled_loop``) or fast-forward off (stepping is the reference path), sessions,
    a capped open loop, a drained warm-up (its clients wait for a phase the loop does not
    track), async scheduling, prefill and decode
    batches kept apart, scratch rollback, prefix caching, a plan that is neither a fixed one nor
    a policy the loop compiles (:func:`sim.engine.policy_state.lower`: not ``fixed``, which a
    run is built without, nor a goodput policy with a step time of its own), a cost model the
    evaluator does not lower or a drafter it does not price (a draft model's), no numba."""
    s, kv, plan = core.scheduler, core.kv, core.plan
    cfg = s.config
    if (
        not core.compiled_loop
        or not core.fast_forward_enabled
        or arrivals._turns
        or arrivals._due_at_s is not None
        or arrivals.drain_after
        or not cfg.mixed_batches
        or cfg.rollback_policy != "in_place"
        or kv.caching
        or not core.compiled_cost
        or core.async_scheduling  # the loop admits arrivals by the synchronous rule
    ):
        return None
    policy = None
    if type(plan) is not StepPlan:
        r = core.requests
        longest = int((r.prompt_tokens + r.output_tokens).max()) if len(r.prompt_tokens) else 0
        policy = policy_state.lower(plan, cfg.max_num_seqs, longest)
        if policy is None:
            return None
    times = arrivals._times
    loaded = compiled.cache_info().currsize > 0
    if arrivals.num_requests < core.compiled_loop_min_requests and not loaded:
        return None
    if len(times) and not (np.isfinite(times).all() and (np.diff(times) >= 0).all()):
        return None
    loop = compiled()
    if loop is None:
        return None
    lowered = core.lowered_now()
    if lowered is None or lowered.draft_form == DRAFT_GIVEN:
        return None
    return CompiledLoop(core, arrivals, loop, on_finish, policy)
