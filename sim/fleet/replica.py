"""One replica of a fleet: a serving node whose arrivals are the requests routed to it.

A replica is a :class:`ServingNode` (the same engine core, the same step rules) with three
differences:

* its arrivals are appended by the router as the run goes (:class:`RoutedArrivals`);
* a decode stretch is *planned* when the replica reaches it but *committed* only once no request
  that is not yet routed could cut it. Until then the plan (a :class:`PendingPlan`) is what the
  replica will do unless a request is routed to it, so the router reads the replica's state at an
  arrival from it; a request routed to the replica cuts the plan where the engine's own rule cuts
  a stretch for an arrival (the first step that starts at or after it while there is room), the
  kept steps are committed and the rest is dropped. Stretches are thus as long as a lone node's,
  whatever the number of replicas;
* a step that is not part of a stretch (a prefill chunk, a preemption) is taken only when every
  request arriving at or before its start has been routed (``clock < stage.safe_until_s()``).

When it must wait, the replica yields a SimPy event that the fleet triggers once routing has
moved on (:meth:`Replica.wake_if`).
"""

from __future__ import annotations

import bisect
import contextlib
import heapq
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy
from numpy.typing import NDArray

from sim.engine.core import EngineCore, PlannedBlock
from sim.engine.kv_cache import blocks_for
from sim.engine.node import ServingNode

if TYPE_CHECKING:
    from sim.fleet.stage import Stage

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


class RoutedArrivals:
    """The arrivals routed to one replica, in the order (and so the time order) they were routed.

    The same interface as :class:`sim.engine.node.ArrivalSchedule` for an open loop.
    """

    is_closed_loop = False

    def __init__(self) -> None:
        self._times: list[float] = []
        self._ids: list[int] = []
        self._next = 0
        #: Added to :meth:`pending_at` (a one-replica stage counts its unrouted arrivals).
        self.extra_pending: Callable[[FloatArray], IntArray] | None = None

    def add(self, request_id: int, at_s: float) -> None:
        """Append a routed arrival (routing is in time order, so times never decrease)."""
        self._times.append(at_s)
        self._ids.append(request_id)

    def next_at_s(self) -> float:
        """Time of the next routed arrival not yet released (inf when none)."""
        return self._times[self._next] if self._next < len(self._times) else np.inf

    def release_until(self, now_s: float) -> tuple[IntArray, FloatArray]:
        """Request ids and times of every routed arrival at or before ``now_s``."""
        end = self._next
        while end < len(self._times) and self._times[end] <= now_s:
            end += 1
        ids = np.array(self._ids[self._next : end], dtype=np.int64)
        times = np.array(self._times[self._next : end], dtype=np.float64)
        self._next = end
        return ids, times

    def pending_at(self, times_s: FloatArray) -> IntArray:
        """How many routed, unreleased arrivals fall at or before each of ``times_s``."""
        start, times = self._next, self._times
        pending = np.array(
            [bisect.bisect_right(times, t, start) - start for t in np.asarray(times_s).tolist()],
            dtype=np.int64,
        )
        if self.extra_pending is not None:
            pending = pending + self.extra_pending(times_s)
        return pending.astype(np.int64)

    def on_finish(self, ids: IntArray, at_s: float) -> None:
        """Open loop: a finish issues nothing."""

    @property
    def num_released(self) -> int:
        """How many routed arrivals have been released."""
        return self._next


@dataclass
class PendingPlan:
    """A planned, uncommitted decode stretch (the engine's :class:`PlannedBlock`, whose
    ``length`` steps it keeps) and when its sequences would finish."""

    planned: PlannedBlock
    length: int
    #: Sorted finish times of the sequences finishing within the plan.
    finish_at_s: list[float]
    #: When the plan's last kept step starts, and when it ends.
    last_start_s: float
    end_s: float


class Replica(ServingNode):
    """A serving node of a fleet stage; ``index`` is its number across the whole fleet."""

    def __init__(
        self,
        env: simpy.Environment,
        core: EngineCore,
        stage: Stage,
        index: int,
        pump: Callable[[], None],
        waiting: set[Replica],
        on_release: Callable[[EngineCore, IntArray], None] | None = None,
        on_finish: Callable[[IntArray, float], None] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.routed = RoutedArrivals()
        super().__init__(env, core, self.routed, progress)  # type: ignore[arg-type]
        self.stage = stage
        self.index = index
        self._pump = pump
        self._waiting = waiting
        self._on_release = on_release
        self._after_finish = on_finish
        self.num_routed = 0
        self.pending: PendingPlan | None = None
        self._finish_heap: list[float] = []
        self._num_finished_known = 0
        self._wake: simpy.Event | None = None
        self._sleeping = False
        #: Hold planned stretches uncommitted until no unrouted request can cut them (the fast
        #: way); off, every stretch stops at the stage's next unrouted arrival.
        self.lookahead = True
        #: While waiting: the stage's safe time must pass this for the replica to move on.
        self._wait_below = np.inf

    # --- the router's view -----------------------------------------------------------------------
    def accept(self, request_id: int, at_s: float) -> None:
        """Take a routed request arriving at ``at_s``: cut the pending plan there, and wake."""
        self._count_waiting_from(at_s)
        self.routed.add(request_id, at_s)
        self.num_routed += 1
        if self.pending is not None:
            self._commit(self._cut(self.pending, at_s))
        self._wake_now()

    def _count_waiting_from(self, at_s: float) -> None:
        """Count a request arriving at ``at_s`` as waiting in the steps committed already that
        start at or after it: with a full batch a stretch is committed before every arrival
        within it is routed (no arrival could cut it), and each such step waited for it."""
        recorder = self.core.recorder
        if self.routed.extra_pending is not None:
            return  # a lone replica counted its unrouted arrivals when it committed
        if recorder.streaming or "num_waiting" not in recorder.column_names:
            return
        columns = recorder.columns()
        starts = columns["start_at_s"]
        if len(starts) and starts[-1] >= at_s:
            waiting: IntArray = columns["num_waiting"]  # type: ignore[assignment]
            waiting[int(np.searchsorted(starts, at_s, side="left")) :] += 1

    def busy(self) -> bool:
        """Whether the replica has running or waiting requests."""
        return len(self.core.scheduler.running) > 0 or bool(self.core.scheduler.waiting)

    def known_through_s(self) -> float:
        """The replica's state is known at every time up to this one, unless a request is routed
        to it: a pending plan runs to its end; a busy replica has committed up to its clock; an
        idle one stays empty until its next routed arrival (forever if none)."""
        if self.pending is not None:
            return self.pending.end_s
        return self.core.clock_s if self.busy() else self.routed.next_at_s()

    def outstanding_at(self, at_s: float) -> int:
        """Requests routed here and not finished at ``at_s`` (queries never go back in time)."""
        heap = self._finish_heap
        while heap and heap[0] <= at_s:
            heapq.heappop(heap)
            self._num_finished_known += 1
        planned = 0
        if self.pending is not None:
            planned = bisect.bisect_right(self.pending.finish_at_s, at_s)
        return self.num_routed - self._num_finished_known - planned

    def kv_usage_at(self, at_s: float) -> float:
        """Fraction of KV blocks in use at ``at_s``: during the step running then, or now."""
        kv = self.core.kv
        plan = self.pending
        if plan is not None and at_s >= self.core.clock_s:
            row = int(np.searchsorted(plan.planned.starts[: plan.length], at_s, side="right")) - 1
            if row < plan.length and at_s < plan.end_s:
                return float(plan.planned.block.kv_blocks_used[row]) / kv.num_blocks
            return _after_plan_usage(plan, kv.block_size, kv.num_blocks)
        if at_s >= self.core.clock_s or not self.busy():
            return kv.num_used / kv.num_blocks
        steps = self.core.recorder.columns()
        row = int(np.searchsorted(steps["start_at_s"], at_s, side="right")) - 1
        if row < 0:
            return kv.num_used / kv.num_blocks
        return float(steps["kv_blocks_used"][row]) / kv.num_blocks

    # --- the node's hooks ------------------------------------------------------------------------
    def _on_finish(self, ids: IntArray, at_s: float) -> None:
        super()._on_finish(ids, at_s)
        for _ in range(len(ids)):
            heapq.heappush(self._finish_heap, at_s)
        if self._after_finish is not None:
            self._after_finish(ids, at_s)

    def _release(self) -> None:
        core = self.core
        ids, times = self.routed.release_until(core.arrivals_seen_until_s())
        if len(ids):
            core.requests.arrival_at_s[ids] = times
            # Routed requests reach the engine when routed: a fleet has no per-replica front end
            # (the router stands in front of the replicas).
            core.requests.engine_arrival_at_s[ids] = times
            if self._on_release is not None:
                self._on_release(core, ids)
            core.scheduler.add_waiting(ids)

    # --- waiting and waking ----------------------------------------------------------------------
    def wake_if(self, safe_until_s: float) -> None:
        """Wake the replica if it waits for the safe time to pass a point it now has passed."""
        if self._wake is None or self._wake.triggered:
            return
        if safe_until_s > self._wait_below or safe_until_s == np.inf:
            self._wake_now()

    def _wake_now(self) -> None:
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()
            self._waiting.discard(self)
        elif self._sleeping:
            # Asleep until its plan's end, which a routed request has just cut short.
            self._sleeping = False
            self.process.interrupt()

    def _sleep_until(self, at_s: float) -> Generator[simpy.Event, Any, None]:
        """Sleep until ``at_s``, or until a request routed here cuts the pending plan."""
        self._sleeping = True
        with contextlib.suppress(simpy.Interrupt):
            yield self.env.timeout(max(0.0, at_s - self.env.now))
        self._sleeping = False

    def _wait(self, below_s: float) -> simpy.Event:
        """An event the fleet triggers once the stage's safe time passes ``below_s`` (or the
        stage closes), or a request is routed here."""
        self._wait_below = below_s
        self._wake = self.env.event()
        self._waiting.add(self)
        return self._wake

    # --- planning and committing -----------------------------------------------------------------
    def _plan(self) -> PendingPlan | None:
        """Plan the next decode stretch as the engine would (``EngineCore.plan_next``), without
        committing it; None when the next step is not part of a stretch."""
        core = self.core
        own_next = self.routed.next_at_s()
        # The next arrival only sizes a plan (a short plan just ends the stretch early): expect
        # this replica's next request one stage-wide gap times the number of replicas away.
        size_for = min(own_next, core.clock_s + self.stage.mean_gap_s * len(self.stage.replicas))
        planned = core.plan_next(own_next, size_for)
        if planned is None:
            return None
        return self._pending(planned, planned.length)

    @staticmethod
    def _pending(planned: PlannedBlock, length: int) -> PendingPlan:
        block, starts = planned.block, planned.starts
        within = block.finish_step < length
        finish_at = np.sort(starts[block.finish_step[within] + 1]).tolist()
        return PendingPlan(
            planned, length, finish_at, float(starts[length - 1]), float(starts[length])
        )

    def _cut(self, plan: PendingPlan, at_s: float) -> int:
        """Steps of ``plan`` to keep for an arrival at ``at_s``: the engine's rule
        (``EngineCore.cut_for_arrival``) within the steps kept so far; the first always runs
        (the replica planned it when every arrival up to its start had been routed)."""
        planned = plan.planned
        keep = self.core.cut_for_arrival(planned.block, planned.starts, at_s)
        return min(max(keep, 1), plan.length)

    def _commit(self, length: int) -> None:
        plan = self.pending
        assert plan is not None
        self.pending = None
        self.core.apply_planned(plan.planned, length, self._waiting_at)

    def _catch_up(self) -> None:
        """Route what can be routed and release what has arrived, until neither changes: taking
        requests can make this replica busy, which can let the router go on."""
        while True:
            self._pump()
            before = self.routed.num_released
            self._release()
            if self.routed.num_released == before:
                return

    # --- the process -----------------------------------------------------------------------------
    def _run(self) -> Generator[simpy.Event, Any, None]:
        core = self.core
        while True:
            plan = self.pending
            if plan is not None:
                # Commit once no unrouted arrival can cut the plan; until then wait at its end.
                safe = self.stage.safe_until_s()
                if safe > plan.last_start_s or self._cut(plan, safe) >= plan.length:
                    self._commit(plan.length)
                    self._pump()
                elif self.env.now < plan.end_s:
                    yield from self._sleep_until(plan.end_s)
                    continue
                else:
                    yield self._wait(safe)
                    continue
            self._catch_up()
            safe = self.stage.safe_until_s()
            if not self.busy():
                next_at = self.routed.next_at_s()
                if next_at < safe:
                    core.clock_s = max(core.clock_s, next_at)
                    yield self.env.timeout(max(0.0, core.clock_s - self.env.now))
                    continue
                if next_at == np.inf and self.stage.closed():
                    return
                # Idle until routing moves past our next arrival, or a request is routed here.
                yield self._wait(next_at if next_at < np.inf else safe)
                continue
            if core.clock_s >= safe:
                # An unrouted arrival at or before the next step's start: it may be ours.
                yield self._wait(core.clock_s)
                continue
            self.pending = self._plan()
            if self.pending is not None and not self.lookahead:
                # No lookahead: commit at once, cut at the earliest unrouted arrival, as a lone
                # node cuts at its next arrival (slower; the same records, which a test checks).
                self._commit(self._cut(self.pending, safe))
                self._pump()
                yield self.env.timeout(max(0.0, core.clock_s - self.env.now))
                continue
            if self.pending is not None:
                self._pump()
                if self.pending is not None:
                    yield from self._sleep_until(self.pending.end_s)
                continue
            core.step(len(core.scheduler.waiting), min(self.routed.next_at_s(), safe))
            self._pump()
            yield self.env.timeout(max(0.0, core.clock_s - self.env.now))


def _after_plan_usage(plan: PendingPlan, block_size: int, num_blocks: int) -> float:
    """KV usage after a plan's last step: the blocks its surviving sequences then hold."""
    block = plan.planned.block
    last = plan.length - 1
    alive = block.finish_step > last
    if block.emitted is None:
        emitted = np.minimum(block.finish_step, last) + 1
    else:
        emitted = block.emitted[:, : plan.length].sum(axis=1)
    tokens = block.computed0 + emitted
    held = int((blocks_for(tokens, block_size) * alive).sum())
    return held / num_blocks
