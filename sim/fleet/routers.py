"""Routers: which replica serves an arriving request.

A router sees each replica through :class:`ReplicaState`, a view of the replica *at the arrival
time* (the fleet only asks once every replica's state at that time is known; see
:mod:`sim.fleet.stage`). Ties are broken with the named stream ``fleet.router`` so a run is
reproducible from its seed. The policies, with the rule each applies:

- ``round_robin``: replica ``k mod N`` for the k-th request routed; needs no state.
- ``least_outstanding``: the fewest outstanding requests (routed and not finished); ties at random.
- ``least_kv``: the smallest fraction of KV blocks in use, then the fewest outstanding; ties at
  random.
- ``session_affinity``: the replica a hash of the request's session id names, unless it is
  overloaded (SGLang router's rule: outstanding − least > ``balance_abs_threshold`` and
  outstanding > ``balance_rel_threshold`` × least); then ``least_outstanding``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from sim.fleet.config import RouterConfig

IntArray = NDArray[np.int64]


class ReplicaState(Protocol):
    """What a router may know about a replica at a given time."""

    def outstanding_at(self, at_s: float) -> int:
        """Requests routed to the replica and not finished at ``at_s``."""
        ...

    def kv_usage_at(self, at_s: float) -> float:
        """Fraction of the replica's KV blocks in use at ``at_s``."""
        ...


class Router(Protocol):
    """Chooses a replica index for a request arriving at a time."""

    #: Whether the choice reads the replicas' state (then routing waits until it is known).
    needs_state: bool

    def choose(self, request_id: int, at_s: float, replicas: Sequence[ReplicaState]) -> int:
        """The index in ``replicas`` of the replica that serves ``request_id``."""
        ...


def _pick_min(values: list[float], rng: np.random.Generator) -> int:
    """Index of the smallest value; ties broken uniformly at random (one draw, only on a tie)."""
    best = min(values)
    tied = [i for i, v in enumerate(values) if v == best]
    return tied[0] if len(tied) == 1 else tied[int(rng.integers(len(tied)))]


class RoundRobin:
    """Replica ``k mod N`` for the k-th routed request."""

    needs_state = False

    def __init__(self) -> None:
        self._count = 0

    def choose(self, request_id: int, at_s: float, replicas: Sequence[ReplicaState]) -> int:
        index = self._count % len(replicas)
        self._count += 1
        return index


class LeastOutstanding:
    """The replica with the fewest outstanding requests at the arrival; ties at random."""

    needs_state = True

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def choose(self, request_id: int, at_s: float, replicas: Sequence[ReplicaState]) -> int:
        return _pick_min([float(r.outstanding_at(at_s)) for r in replicas], self._rng)


class LeastKv:
    """The replica with the smallest KV usage, then the fewest outstanding; ties at random."""

    needs_state = True

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def choose(self, request_id: int, at_s: float, replicas: Sequence[ReplicaState]) -> int:
        usage = [r.kv_usage_at(at_s) for r in replicas]
        best = min(usage)
        candidates = [i for i, u in enumerate(usage) if u == best]
        if len(candidates) == 1:
            return candidates[0]
        outstanding = [float(replicas[i].outstanding_at(at_s)) for i in candidates]
        return candidates[_pick_min(outstanding, self._rng)]


def session_hash(session_ids: IntArray) -> NDArray[np.uint64]:
    """A stable 64-bit mix of each session id (SplitMix64's finaliser; Python's ``hash`` is salted
    per process, so it would make routing irreproducible)."""
    z = session_ids.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class SessionAffinity:
    """The replica the session hash names, unless overloaded; then the least outstanding."""

    needs_state = True

    def __init__(
        self,
        session_ids: IntArray,
        num_replicas: int,
        abs_threshold: int,
        rel_threshold: float,
        rng: np.random.Generator,
    ) -> None:
        self.primary = (session_hash(session_ids) % np.uint64(num_replicas)).astype(np.int64)
        self.abs_threshold = abs_threshold
        self.rel_threshold = rel_threshold
        self._rng = rng

    def choose(self, request_id: int, at_s: float, replicas: Sequence[ReplicaState]) -> int:
        home = int(self.primary[request_id])
        load = [float(r.outstanding_at(at_s)) for r in replicas]
        least = min(load)
        if load[home] - least > self.abs_threshold and load[home] > self.rel_threshold * least:
            return _pick_min(load, self._rng)
        return home


def build_router(
    config: RouterConfig,
    num_replicas: int,
    rng: np.random.Generator,
    session_ids: IntArray | None,
) -> Router:
    """The router ``config`` names, over ``num_replicas`` replicas.

    Raise ValueError if ``session_affinity`` is asked for without session ids.
    """
    if config.policy == "round_robin":
        return RoundRobin()
    if config.policy == "least_outstanding":
        return LeastOutstanding(rng)
    if config.policy == "least_kv":
        return LeastKv(rng)
    if session_ids is None:
        raise ValueError("session_affinity needs session ids")
    return SessionAffinity(
        session_ids,
        num_replicas,
        config.balance_abs_threshold,
        config.balance_rel_threshold,
        rng,
    )
