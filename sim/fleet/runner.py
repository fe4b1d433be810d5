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

from sim.engine.core import EngineCore
from sim.errors import InvariantError, ScenarioError
from sim.fleet.build import ReplicaGroup, build_groups, fresh_core
from sim.fleet.config import FleetConfig
from sim.fleet.links import Link, resolve_link
from sim.fleet.records import FleetRecords, fleet_result
from sim.fleet.replica import Replica
from sim.fleet.routers import build_router
from sim.fleet.stage import Stage
from sim.random_streams import RandomStreams
from sim.run import ScenarioResult
from sim.scenario import Scenario

IntArray = np.ndarray


class Fleet:
    """The stages and replicas of one run, and the pump that routes and wakes them."""

    def __init__(self) -> None:
        self.stages: list[Stage] = []
        self.replicas: list[Replica] = []
        #: Replicas waiting on an event the pump may trigger.
        self.waiting: set[Replica] = set()

    def pump(self) -> None:
        """Route whatever may be routed now, then wake replicas that may move on."""
        for stage in self.stages:
            stage.route()
        if not self.waiting:
            return
        safe = {id(stage): stage.safe_until_s() for stage in self.stages}
        for replica in list(self.waiting):
            replica.wake_if(safe[id(replica.stage)])


def _session_ids(scenario: Scenario, workload: Any, streams: RandomStreams) -> IntArray | None:
    """The workload's session ids, else ``fleet.router.num_sessions`` drawn per request.

    Raise ScenarioError if session affinity is asked for and neither exists.
    """
    fleet = scenario.fleet
    assert fleet is not None
    own = getattr(workload, "session_ids", None)
    if own is not None:
        return np.asarray(own, dtype=np.int64)
    if fleet.router.num_sessions is not None:
        rng = streams.stream("fleet.sessions")
        return rng.integers(fleet.router.num_sessions, size=workload.num_requests)
    if fleet.router.policy == "session_affinity":
        raise ScenarioError(
            "fleet.router.num_sessions: session_affinity needs a session id per request; the "
            "workload has none, so give the number of sessions to draw them from"
        )
    return None


def _add_replicas(
    env: simpy.Environment,
    fleet: Fleet,
    stage: Stage,
    groups: list[ReplicaGroup],
    output_tokens: np.ndarray | None = None,
    **hooks: Any,
) -> None:
    for group in groups:
        for _ in range(group.count):
            core = fresh_core(group.simulation, output_tokens)
            replica = Replica(
                env, core, stage, len(fleet.replicas), fleet.pump, fleet.waiting, **hooks
            )
            replica.group = group  # type: ignore[attr-defined]
            stage.replicas.append(replica)
            fleet.replicas.append(replica)


def _check_open_loop(scenario: Scenario, groups: list[ReplicaGroup]) -> np.ndarray:
    arrivals = groups[0].simulation.workload.arrival_at_s
    if arrivals is None:
        raise ScenarioError(
            "workload.arrival.process: a fleet needs open-loop arrivals (poisson, gamma or "
            "trace); closed_loop clients are not supported behind a router"
        )
    return np.asarray(arrivals, dtype=np.float64)


def run_fleet(
    scenario: Scenario,
    base_dir: Path,
    progress: Callable[[int], None] | None = None,
    **build: Any,
) -> ScenarioResult:
    """Build and run the fleet ``scenario.fleet`` describes; return the fleet-wide result.

    Raise ScenarioError naming the key path if a replica group cannot be built (its model does
    not fit, ...), the router lacks session ids, or arrivals are closed-loop; InvariantError if
    the run stalls (a bug).
    """
    config: FleetConfig | None = scenario.fleet
    if config is None:
        raise ScenarioError("fleet: the scenario describes no fleet")
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
        arrivals = _check_open_loop(scenario, groups)
        workload = groups[0].simulation.workload
        sessions = _session_ids(scenario, workload, streams)
        order = np.argsort(arrivals, kind="stable")
        num = sum(g.count for g in groups)
        router = build_router(config.router, num, streams.stream("fleet.router"), sessions)
        stage = Stage("replicas", router, order, arrivals[order])
        fleet.stages.append(stage)
        _add_replicas(env, fleet, stage, groups, progress=progress)
        if num == 1:
            # One replica gets every request: count unrouted arrivals as waiting, as a node does.
            fleet.replicas[0].routed.extra_pending = lambda times: _unrouted_at(stage, times)
        all_groups = groups
    else:
        d = config.disaggregation
        prefill = build_groups(
            scenario, base_dir, d.prefill, "fleet.disaggregation.prefill", "prefill", **build
        )
        decode = build_groups(
            scenario, base_dir, d.decode, "fleet.disaggregation.decode", "decode", **build
        )
        arrivals = _check_open_loop(scenario, prefill)
        workload = prefill[0].simulation.workload
        sessions = _session_ids(scenario, workload, streams)
        prompt = prefill[0].simulation.core.requests.prompt_tokens
        output = prefill[0].simulation.core.requests.output_tokens
        link = resolve_link(d.link, prefill[0].gpu)
        kv_per_gpu = max(g.simulation.memory.kv_bytes_per_token for g in prefill)
        transfer_s = link.transfer_s(prompt, kv_per_gpu)
        min_transfer_s = float(transfer_s.min()) if len(transfer_s) else 0.0
        order = np.argsort(arrivals, kind="stable")
        num_prefill = sum(g.count for g in prefill)
        num_decode = sum(g.count for g in decode)
        prefill_stage = Stage(
            "prefill",
            build_router(
                config.router, num_prefill, streams.stream("fleet.router.prefill"), sessions
            ),
            order,
            arrivals[order],
        )

        def decode_known_until() -> float:
            # A prefill not yet committed ends after its replica's clock (busy) or after the next
            # arrival it could take (idle); its KV lands at least min_transfer_s later.
            safe = prefill_stage.safe_until_s()
            horizon = min(
                (r.core.clock_s if r.busy() else min(r.routed.next_at_s(), safe))
                for r in prefill_stage.replicas
            )
            return horizon + min_transfer_s

        decode_stage = Stage(
            "decode",
            build_router(
                config.router, num_decode, streams.stream("fleet.router.decode"), sessions
            ),
            known_until=decode_known_until,
        )
        decode_stage.mean_gap_s = prefill_stage.mean_gap_s
        fleet.stages += [prefill_stage, decode_stage]
        first_token_at_s = np.full(len(prompt), np.nan)
        handed = transfer_s

        def on_prefill_finish(ids: IntArray, at_s: float) -> None:
            # The first token travels with the KV and reaches the client through the decode
            # replica (SGLang's and vLLM's P/D proxies stream from decode): TTFT includes the
            # transfer. A one-token request is done at the prefill replica.
            done_here = 0
            for request in ids.tolist():
                if output[request] > 1:
                    delivered = at_s + float(handed[request])
                    first_token_at_s[request] = delivered
                    decode_stage.offer(delivered, request)
                else:
                    done_here += 1
            if progress is not None and done_here:
                progress(done_here)

        def on_decode_release(core: EngineCore, ids: IntArray) -> None:
            # The prompt's KV and the first token arrive together: decode goes on from there (a
            # one-token step computes the first token's KV and emits the second).
            r = core.requests
            r.num_emitted[ids] = 1
            r.num_computed_tokens[ids] = r.prompt_tokens[ids]
            r.first_token_at_s[ids] = first_token_at_s[ids]
            r.last_emit_at_s[ids] = first_token_at_s[ids]

        _add_replicas(
            env,
            fleet,
            prefill_stage,
            prefill,
            np.ones(len(prompt), np.int64),
            on_finish=on_prefill_finish,
        )
        _add_replicas(
            env, fleet, decode_stage, decode, on_release=on_decode_release, progress=progress
        )
        all_groups = prefill + decode
    done = env.all_of([replica.process for replica in fleet.replicas])
    env.run(until=done)
    wall = time.perf_counter() - started
    records = FleetRecords(fleet.stages, fleet.replicas, len(arrivals), transfer_s)
    unfinished = int(np.isnan(records.requests["finished_at_s"]).sum())
    if unfinished:
        raise InvariantError(f"the fleet stalled with {unfinished} requests unfinished")
    return fleet_result(scenario, config, all_groups, records, link, wall)


def _unrouted_at(stage: Stage, times_s: np.ndarray) -> np.ndarray:
    """Known arrivals of ``stage`` not yet routed at or before each of ``times_s``."""
    at_s, _ = stage.next_unrouted()
    if at_s == np.inf:
        return np.zeros(len(times_s), dtype=np.int64)
    pending = stage.pending_times()
    return np.searchsorted(pending, times_s, side="right").astype(np.int64)
