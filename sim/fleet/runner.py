"""Run a fleet: replicas as SimPy processes on one clock, a router per stage, one result.

The lifecycle mirrors a node's: build each replica group (:mod:`sim.fleet.build`), make the
stages and their routers, run every replica process in one SimPy environment until all requests
have finished, then merge the records (:mod:`sim.fleet.records`). Disaggregation adds the decode
stage: a request's prefill replica emits its first token, its KV crosses the link
(:mod:`sim.fleet.links`), and a decode replica takes it with the prompt's KV in place.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import simpy

from sim.errors import InvariantError, ScenarioError
from sim.fleet import compiled_fleet
from sim.fleet.build import (
    Fleet,
    ReplicaGroup,
    add_replicas,
    build_groups,
    open_loop_arrivals,
    session_ids,
)
from sim.fleet.config import FleetConfig
from sim.fleet.disaggregation import build_disaggregated
from sim.fleet.links import Link
from sim.fleet.records import FleetRecords, fleet_result
from sim.fleet.routers import build_router
from sim.fleet.stage import Stage
from sim.random_streams import RandomStreams
from sim.run import ScenarioResult
from sim.scenario import Scenario

IntArray = np.ndarray


def run_fleet(
    scenario: Scenario,
    base_dir: Path,
    progress: Callable[[int], None] | None = None,
    **build: Any,
) -> ScenarioResult:
    """Build and run the fleet ``scenario.fleet`` describes; return the fleet-wide result.

    ``fleet_lookahead=False`` (a keyword among ``build``) stops every replica's stretches at the
    next unrouted arrival instead of planning past it: slower, and the same records.
    ``fleet_compiled=False`` keeps a fleet the compiled driver takes
    (:mod:`sim.fleet.compiled_fleet`) on the SimPy path: slower, and the same records.

    Raise ScenarioError naming the key path if a replica group cannot be built (its model does
    not fit, ...), the router lacks session ids, or arrivals are closed-loop; InvariantError if
    the run stalls (a bug).
    """
    config: FleetConfig | None = scenario.fleet
    if config is None:
        raise ScenarioError("fleet: the scenario describes no fleet")
    lookahead = bool(build.pop("fleet_lookahead", True))
    use_compiled = bool(build.pop("fleet_compiled", True))
    started = time.perf_counter()
    streams = RandomStreams(scenario.seed)
    env = simpy.Environment()
    fleet = Fleet()
    link: Link | None = None
    transfer_s = None
    if config.disaggregation is None:
        assert config.replicas is not None
        groups = build_groups(
            scenario, base_dir, config.replicas, "fleet.replicas", "colocated", **build
        )
        arrivals = open_loop_arrivals(groups)
        workload = groups[0].simulation.workload
        sessions = session_ids(scenario, workload, streams)
        order = np.argsort(arrivals, kind="stable")
        num = sum(g.count for g in groups)
        fleet, stage = _colocated(env, config, groups, streams, sessions, order, arrivals, progress)
        all_groups = groups
        policy = config.router.policy
        if use_compiled and compiled_fleet.applies(fleet, policy, arrivals):
            rng = streams.stream("fleet.router")
            if compiled_fleet.run(fleet, stage, policy, rng, order, arrivals[order], progress):
                return _result(scenario, config, all_groups, fleet, len(arrivals), None, started)
            # A step the compiled loop does not take: the whole fleet on the SimPy path.
            env = simpy.Environment()
            fleet, stage = _colocated(
                env, config, groups, streams, sessions, order, arrivals, progress
            )
        if num == 1:
            # One replica gets every request: count unrouted arrivals as waiting, as a node does.
            fleet.replicas[0].routed.extra_pending = lambda times: _unrouted_at(stage, times)
    else:
        assert config.disaggregation is not None
        all_groups, arrivals, link, transfer_s = build_disaggregated(
            env, fleet, scenario, base_dir, config, streams, progress, **build
        )
    for replica in fleet.replicas:
        replica.lookahead = lookahead
    done = env.all_of([replica.process for replica in fleet.replicas])
    env.run(until=done)
    return _result(scenario, config, all_groups, fleet, len(arrivals), link, started, transfer_s)


def _colocated(
    env: simpy.Environment,
    config: FleetConfig,
    groups: list[ReplicaGroup],
    streams: RandomStreams,
    sessions: IntArray | None,
    order: IntArray,
    arrivals: np.ndarray,
    progress: Callable[[int], None] | None,
) -> tuple[Fleet, Stage]:
    """A colocated fleet's one stage and its replicas, built and not yet run."""
    fleet = Fleet()
    num = sum(g.count for g in groups)
    router = build_router(config.router, num, streams.stream("fleet.router"), sessions)
    stage = Stage("replicas", router, order, arrivals[order])
    fleet.stages.append(stage)
    add_replicas(env, fleet, stage, groups, progress=progress)
    return fleet, stage


def _result(
    scenario: Scenario,
    config: FleetConfig,
    groups: list[ReplicaGroup],
    fleet: Fleet,
    num_requests: int,
    link: Link | None,
    started: float,
    transfer_s: np.ndarray | None = None,
) -> ScenarioResult:
    """The fleet-wide result of a finished run. Raise InvariantError if a request is unfinished."""
    wall = time.perf_counter() - started
    records = FleetRecords(fleet.stages, fleet.replicas, num_requests, transfer_s)
    unfinished = int(np.isnan(records.requests["finished_at_s"]).sum())
    if unfinished:
        raise InvariantError(f"the fleet stalled with {unfinished} requests unfinished")
    return fleet_result(scenario, config, groups, records, link, wall)


def _unrouted_at(stage: Stage, times_s: np.ndarray) -> np.ndarray:
    """Known arrivals of ``stage`` not yet routed at or before each of ``times_s``."""
    at_s, _ = stage.next_unrouted()
    if at_s == np.inf:
        return np.zeros(len(times_s), dtype=np.int64)
    pending = stage.pending_times()
    return np.searchsorted(pending, times_s, side="right").astype(np.int64)
