"""A stage of a fleet: replicas that share a router and a stream of arrivals.

A colocated fleet has one stage, fed by the workload's arrivals. A disaggregated fleet has two: the
prefill stage, fed by the workload, and the decode stage, fed by the prefill stage's finishes once
their KV has crossed the link.

The routing contract (why results are exact and stretches stay long):

* Arrivals are routed in time order. An arrival at ``t`` is routed only when every arrival of the
  stage at or before ``t`` is known (``t <= known_until_s()``) and, for a router that reads state,
  when every replica's state at ``t`` is known (each replica has committed every step that starts
  before ``t``, or is idle until after ``t``: :meth:`Replica.known_through_s`).
* A replica commits a step starting at ``s`` only when no request that could arrive at or before
  ``s`` is still unrouted (``safe_until_s()``). It may *plan* a decode stretch further ahead and
  hold it uncommitted: the plan is what it will do unless a request is routed to it, so the router
  reads its state from the plan, and a request routed to it cuts the plan by the engine's own rule
  (no step starting at or after the arrival while there is room to admit it). A replica thus runs
  ahead of an arrival only with a full batch, where the arrival could not change its steps.
* A router that needs no state (round robin) routes as soon as arrivals are known, so replicas
  are never held back by each other: each runs as a plain node on its own arrivals.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

import numpy as np

from sim.fleet.routers import Router

if TYPE_CHECKING:
    from collections.abc import Callable

    from sim.fleet.replica import Replica


class Stage:
    """Replicas behind one router, and the arrivals they are offered.

    Open-loop arrivals known in advance are given as sorted ``arrival_at_s`` (request ``ids``);
    arrivals produced during the run (decode hand-offs) are ``offer``-ed, and ``known_until``
    bounds the times before which no more can appear. Raise ValueError if the times are unsorted.
    """

    def __init__(
        self,
        name: str,
        router: Router,
        ids: np.ndarray | None = None,
        arrival_at_s: np.ndarray | None = None,
        known_until: Callable[[], float] | None = None,
    ) -> None:
        self.name = name
        self.router = router
        self.replicas: list[Replica] = []
        self._ids = np.zeros(0, dtype=np.int64) if ids is None else np.asarray(ids, np.int64)
        self._times = np.zeros(0) if arrival_at_s is None else np.asarray(arrival_at_s, float)
        if len(self._times) > 1 and (np.diff(self._times) < 0).any():
            raise ValueError(f"stage {name}: arrival times must be sorted")
        self._next = 0
        self._offered: list[tuple[float, int]] = []
        self._known_until = known_until
        #: Mean gap between the stage's arrivals (the workload's; a decode stage is given its
        #: prefill stage's), used only to size plans.
        span = float(self._times[-1] - self._times[0]) if len(self._times) > 1 else 0.0
        self.mean_gap_s = span / (len(self._times) - 1) if len(self._times) > 1 else np.inf
        self._blocker = 0
        #: Replica index (within the stage) each routed request went to.
        self.routed: dict[int, int] = {}

    # --- arrivals --------------------------------------------------------------------------------
    def offer(self, at_s: float, request_id: int) -> None:
        """A request that will arrive at ``at_s`` (a decode hand-off)."""
        heapq.heappush(self._offered, (at_s, request_id))

    def known_until_s(self) -> float:
        """Every arrival of the stage at or before this time is known."""
        return np.inf if self._known_until is None else self._known_until()

    def next_unrouted(self) -> tuple[float, int]:
        """Time and request id of the earliest known arrival not yet routed ((inf, -1) if none)."""
        fixed = float(self._times[self._next]) if self._next < len(self._times) else np.inf
        offered = self._offered[0][0] if self._offered else np.inf
        if fixed == np.inf and offered == np.inf:
            return np.inf, -1
        if fixed <= offered:
            return fixed, int(self._ids[self._next])
        return offered, self._offered[0][1]

    def pending_times(self) -> np.ndarray:
        """Times of the known open-loop arrivals not yet routed, sorted."""
        return self._times[self._next :]

    def _pop(self, fixed_first: bool) -> None:
        if fixed_first:
            self._next += 1
        else:
            heapq.heappop(self._offered)

    def safe_until_s(self) -> float:
        """Replicas may start steps strictly before this time (see the module's contract)."""
        return min(self.next_unrouted()[0], self.known_until_s())

    def closed(self) -> bool:
        """True when no arrival is pending and none can appear any more."""
        return self.safe_until_s() == np.inf

    # --- routing ---------------------------------------------------------------------------------
    def route(self) -> bool:
        """Route every arrival that may be routed now; return whether any was."""
        routed_any = False
        stateful = self.router.needs_state
        known_until = -np.inf  # computed when first needed
        while True:
            at_s, request_id = self.next_unrouted()
            if at_s == np.inf:
                return routed_any
            if at_s > known_until:
                known_until = self.known_until_s()
                if at_s > known_until:
                    return routed_any
            if stateful and not self._states_known_at(at_s):
                return routed_any
            fixed_first = self._next < len(self._times) and float(self._times[self._next]) == at_s
            fixed_first = fixed_first and int(self._ids[self._next]) == request_id
            self._pop(fixed_first)
            index = self.router.choose(request_id, at_s, self.replicas)
            self.replicas[index].accept(request_id, at_s)
            self.routed[request_id] = index
            routed_any = True

    def _states_known_at(self, at_s: float) -> bool:
        """Whether every replica's state at ``at_s`` is known; starts from the replica that held
        routing back last time, which most often still does."""
        replicas = self.replicas
        n = len(replicas)
        for k in range(n):
            i = (self._blocker + k) % n
            if replicas[i].known_through_s() < at_s:
                self._blocker = i
                return False
        return True
