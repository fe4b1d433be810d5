"""The serving node as one SimPy process: the engine step loop.

SimPy owns time and nothing else. The node process yields one timeout per engine step (or per
fast-forwarded stretch of predictable decode steps) and, when idle, one per arrival. Arrival times
are not SimPy events: open-loop arrivals are known in advance and closed-loop clients issue their
next request when the previous one finishes, so the node reads them from :class:`ArrivalSchedule`
at each step start; that keeps same-time order explicit (a step starting at t sees every arrival at
or before t) instead of leaving it to the event queue.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy
from numpy.typing import NDArray

from sim.engine import compiled_loop
from sim.engine.core import EngineCore
from sim.engine.frontend import FrontEnd, FrontEndServer, lindley_departures

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


class ArrivalSchedule:
    """Pending arrivals: a fixed open-loop schedule, or closed-loop clients.

    Open loop: ``arrival_at_s`` gives every request's arrival. Closed loop: ``concurrency`` clients
    each send request after request (in request order), the next one ``think_time_s`` after the
    previous finishes (as the client sees it: after the front end's egress). Sessions:
    ``next_turn[i]`` (-1: none) is sent ``turn_think_time_s`` after request ``i`` finishes; the
    open-loop times are then given for first turns only (NaN for the others), and a closed-loop
    client starts its next session when its session's last turn ends. Every request passes the
    front end's ingress queue (:mod:`sim.engine.frontend`) on its way to the engine; the times the
    node sees are engine arrivals, and ``client_at_s`` keeps when each client sent its request.
    Capped open loop (``vllm bench serve --request-rate R --max-concurrency N``): both
    ``arrival_at_s`` and ``concurrency`` are given; request ``i`` is due at ``arrival_at_s[i]`` but
    its client sends it only when fewer than ``concurrency`` requests are in flight, in request
    order, so it is sent at ``max(arrival_at_s[i], the finish that frees a slot)``; as in the
    benchmark, whose semaphore wraps the request, latencies count from the send.
    Drained warm-up (``drain_after`` > 0, closed loop): requests ``0 .. drain_after - 1`` form
    a phase of their own; a client that would send a later request waits until every one of
    them has finished (as its client sees it), then every waiting client sends at that instant,
    as aiperf opens its profiling phase after its warm-up phase's credits are all returned.
    Raise ValueError if neither of ``arrival_at_s`` and ``concurrency`` is given, if a capped open
    loop has sessions, if a drained warm-up is given without closed-loop clients or with
    sessions, or if a front end is given without ``prompt_tokens``.
    """

    def __init__(
        self,
        num_requests: int,
        arrival_at_s: FloatArray | None = None,
        concurrency: int | None = None,
        think_time_s: float = 0.0,
        next_turn: IntArray | None = None,
        turn_think_time_s: float = 0.0,
        frontend: FrontEnd | None = None,
        prompt_tokens: NDArray[np.integer] | None = None,
        drain_after: int = 0,
    ) -> None:
        if arrival_at_s is None and concurrency is None:
            raise ValueError("give arrival_at_s, concurrency or both")
        self.num_requests = num_requests
        self.think_time_s = think_time_s
        self._turns = next_turn is not None and bool((next_turn >= 0).any())
        self._next_turn = np.asarray(next_turn if self._turns else [], dtype=np.int64)
        self.turn_think_time_s = turn_think_time_s
        self.frontend = frontend if frontend is not None else FrontEnd()
        if self.frontend.enabled and prompt_tokens is None:
            raise ValueError("a front end needs the prompt lengths (prompt_tokens)")
        self._service_s: FloatArray = self.frontend.ingress_service_s(
            np.zeros(num_requests, dtype=np.int64) if prompt_tokens is None else prompt_tokens
        )
        self._server = FrontEndServer()
        capped = arrival_at_s is not None and concurrency is not None
        if capped and self._turns:
            raise ValueError("a capped open loop (arrival_at_s with concurrency) has no sessions")
        if drain_after and (arrival_at_s is not None or concurrency is None or self._turns):
            raise ValueError("a drained warm-up needs closed-loop clients without sessions")
        #: Requests of the warm-up phase (drained warm-up), and how many have not finished.
        self.drain_after = drain_after
        self._warmup_left = drain_after
        #: Clients free to send (they wait here while a drained warm-up has not finished).
        self._free = 0
        #: Capped open loop: when each request is due (its client may send it later).
        self._due_at_s: FloatArray | None = (
            np.asarray(arrival_at_s, dtype=np.float64) if capped else None
        )
        # Sessions release turns on finishes, like a closed loop: every arrival goes by the heap.
        self._open = arrival_at_s is not None and not self._turns and not capped
        #: When each request's client sent it (NaN until sent).
        self.client_at_s: FloatArray = np.full(num_requests, np.nan)
        self._times: FloatArray = np.zeros(0)
        if self._open and arrival_at_s is not None:
            self.client_at_s = np.asarray(arrival_at_s, dtype=np.float64)
            self._times = self.client_at_s
            if self.frontend.enabled:
                count = len(self.client_at_s)
                self._times = lindley_departures(self.client_at_s, self._service_s[:count])
        self._next = 0  # open loop: index of the next arrival not yet released
        self._heap: list[tuple[float, int]] = []
        self._issued = 0
        # Requests a closed-loop client starts (session first turns, or every request); an open
        # loop reads its schedule from the array and needs no list of a million ids.
        self._starts: list[int] = [] if self._open else list(range(num_requests))
        if self._turns:
            is_first = np.ones(num_requests, dtype=bool)
            is_first[self._next_turn[self._next_turn >= 0]] = False
            self._starts = np.flatnonzero(is_first).tolist()
            if arrival_at_s is not None:
                times = np.asarray(arrival_at_s, dtype=np.float64)
                for request in self._starts:
                    self._issue(float(times[request]), request)
                self._starts = []
        self._starts.reverse()  # popped from the end, in request order
        if concurrency is not None:
            self._free = concurrency
            self._send_free(0.0)

    def _send_free(self, at_s: float) -> None:
        """Each free client sends its next request at ``at_s`` (a capped open loop's when it is
        due), in request order, unless that request waits for a drained warm-up to finish."""
        while self._free and self._starts:
            request = self._starts[-1]
            if request >= self.drain_after and self._warmup_left > 0:
                return
            self._starts.pop()
            self._free -= 1
            self._issue(self._due(request, at_s), request)

    def _due(self, request: int, free_at_s: float) -> float:
        """When a client sends ``request`` given a slot free at ``free_at_s``."""
        if self._due_at_s is None:
            return free_at_s
        return max(free_at_s, float(self._due_at_s[request]))

    def _issue(self, at_s: float, request: int) -> None:
        """The client sends ``request`` at ``at_s``; it reaches the engine after the ingress."""
        self.client_at_s[request] = at_s
        service_s = float(self._service_s[request])
        if self.frontend.enabled and at_s >= self._server.last_arrival_s:
            at_s = self._server.depart(at_s, service_s)
        elif self.frontend.enabled:
            # A session's later turn sent before first turns already offered (open-loop sessions
            # offer every first turn up front): it is served on arrival, not queued behind them.
            at_s = at_s + service_s
        heapq.heappush(self._heap, (at_s, request))
        self._issued += 1

    @property
    def is_closed_loop(self) -> bool:
        """Whether arrivals are issued when earlier requests finish (clients or sessions)."""
        return not self._open

    def next_at_s(self) -> float:
        """Time of the next arrival not yet released (inf when none is pending)."""
        if self._open:
            return float(self._times[self._next]) if self._next < len(self._times) else np.inf
        return self._heap[0][0] if self._heap else np.inf

    def release_until(self, now_s: float) -> tuple[IntArray, FloatArray]:
        """Request ids and engine arrival times of every pending arrival at or before ``now_s``."""
        if self._open:
            end = int(np.searchsorted(self._times, now_s, side="right"))
            ids = np.arange(self._next, end, dtype=np.int64)
            self._next = end
            return ids, self._times[ids]
        out: list[tuple[float, int]] = []
        while self._heap and self._heap[0][0] <= now_s:
            out.append(heapq.heappop(self._heap))
        return (
            np.array([i for _, i in out], dtype=np.int64),
            np.array([t for t, _ in out], dtype=np.float64),
        )

    def pending_at(self, times_s: FloatArray) -> IntArray:
        """How many not-yet-released arrivals fall at or before each of ``times_s``."""
        if self._open:
            return np.searchsorted(self._times, times_s, side="right") - self._next
        heap_times = np.sort(np.array([t for t, _ in self._heap], dtype=np.float64))
        return np.searchsorted(heap_times, times_s, side="right").astype(np.int64)

    def on_finish(self, ids: IntArray, at_s: float) -> None:
        """Each finished request releases its session's next turn, or its client's next
        request (closed loop). ``at_s`` is when the engine emitted the last token; the client
        sees it after the egress delay."""
        if self._open:
            return
        seen_at = at_s + self.frontend.egress_s
        for request in ids.tolist():
            follow = int(self._next_turn[request]) if self._turns else -1
            if follow >= 0:
                self._issue(seen_at + self.turn_think_time_s, follow)
            else:
                self._free += 1
            if request < self.drain_after:
                self._warmup_left -= 1
            self._send_free(seen_at + self.think_time_s)


class ServingNode:
    """Runs an :class:`EngineCore` against an :class:`ArrivalSchedule` in a SimPy environment."""

    def __init__(
        self,
        env: simpy.Environment,
        core: EngineCore,
        arrivals: ArrivalSchedule,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.env = env
        self.core = core
        self.arrivals = arrivals
        self.progress = progress
        self.num_finished = 0
        #: Where a caller pauses the run (``env.run(until=...)``): the compiled loop, which runs
        #: many steps as one event, starts none at or after it once it ran one in a call.
        self.horizon_s = math.inf
        core.on_finish = self._on_finish
        core.arrivals_follow_finishes = arrivals.is_closed_loop
        self.process = env.process(self._run())

    def _on_finished(self, count: int) -> None:
        """``count`` requests finished in the compiled loop (open loop: no client answers)."""
        self.num_finished += count
        if self.progress is not None:
            self.progress(count)

    def _on_finish(self, ids: IntArray, at_s: float) -> None:
        self.num_finished += len(ids)
        self.arrivals.on_finish(ids, at_s)
        if self.progress is not None:
            self.progress(len(ids))

    def _release(self) -> None:
        core = self.core
        ids, times = self.arrivals.release_until(core.arrivals_seen_until_s())
        if len(ids):
            core.requests.arrival_at_s[ids] = self.arrivals.client_at_s[ids]
            core.requests.engine_arrival_at_s[ids] = times
            core.scheduler.add_waiting(ids)

    def _waiting_at(self, times_s: FloatArray) -> IntArray:
        """Requests waiting at each of ``times_s``: queued now plus arrivals not yet released."""
        return len(self.core.scheduler.waiting) + self.arrivals.pending_at(times_s)

    def _run(self) -> Generator[simpy.Event, Any, None]:
        core, scheduler = self.core, self.core.scheduler
        loop = compiled_loop.for_node(core, self.arrivals, self._on_finished)
        while True:
            if loop is not None:
                # Steps in compiled code, one SimPy event per call; a step it does not cover
                # (a preemption) is one event of the Python path below.
                before = core.num_steps
                loop.horizon_s = self.horizon_s
                status = loop.run()
                if status == compiled_loop.DONE:
                    return
                if status == compiled_loop.FULL or core.num_steps > before:
                    yield self.env.timeout(max(0.0, core.clock_s - self.env.now))
                    continue
            self._release()
            if len(scheduler.running) == 0 and not scheduler.waiting:
                next_at = self.arrivals.next_at_s()
                if next_at == np.inf:
                    return
                core.clock_s = max(core.clock_s, next_at)
                yield self.env.timeout(max(0.0, core.clock_s - self.env.now))
                continue
            core.advance(self.arrivals.next_at_s(), self._waiting_at)
            yield self.env.timeout(max(0.0, core.clock_s - self.env.now))
