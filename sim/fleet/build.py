"""Building a fleet's replicas from a scenario, and the fleet that holds them.

Each replica group is the scenario with the group's ``hardware`` and ``engine`` keys written over
the scenario's; it is built once, as a plain node, with :func:`sim.run.build_simulation` (so every
check a node gets, memory first, applies to it), and each replica of the group is a fresh copy
of that node's engine that shares the read-only parts: cost model, drafting strategy, acceptance
plan and request lengths. The workload is the same in every group (same seed, same keys).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import simpy

from sim.engine.core import EngineCore
from sim.errors import ScenarioError, SpecsimError
from sim.fleet.config import ReplicaGroupConfig
from sim.fleet.replica import Replica
from sim.fleet.stage import Stage
from sim.random_streams import RandomStreams
from sim.run import Simulation, build_simulation
from sim.scenario import Scenario, validate_document

IntArray = np.ndarray


@dataclass
class ReplicaGroup:
    """One group of identical replicas: where it was declared, its role, its built node."""

    key_path: str
    role: str  # "colocated", "prefill" or "decode"
    count: int
    simulation: Simulation

    @property
    def gpu(self) -> str:
        return self.simulation.scenario.hardware.gpu

    @property
    def num_gpus(self) -> int:
        return self.simulation.scenario.hardware.num_gpus


def group_scenario(scenario: Scenario, group: ReplicaGroupConfig, key_path: str) -> Scenario:
    """The node of one replica group: the scenario without its fleet, with the group's keys.

    Raise ScenarioError naming ``key_path`` if the merged node is invalid.
    """
    document: dict[str, Any] = scenario.model_dump(mode="json", exclude={"fleet"})
    if group.hardware:
        document["hardware"] = {**document["hardware"], **group.hardware}
    if group.engine:
        document["engine"] = {**document["engine"], **group.engine}
    return validate_document(document, key_path)


def build_groups(
    scenario: Scenario,
    base_dir: Path,
    groups: list[ReplicaGroupConfig],
    key_path: str,
    role: str,
    **build: Any,
) -> list[ReplicaGroup]:
    """Build each group's node once.

    Raise ScenarioError naming the group's key path (``fleet.replicas.1``) if its node cannot be
    built: the model does not fit its memory, TP does not divide the heads, and so on.
    """
    built = []
    for index, group in enumerate(groups):
        where = f"{key_path}.{index}"
        node = group_scenario(scenario, group, where)
        try:
            simulation = build_simulation(node, base_dir, **build)
        except SpecsimError as exc:
            hardware = f"{node.hardware.gpu} x{node.hardware.num_gpus}"
            raise ScenarioError(f"{where} ({hardware}): {exc}") from None
        built.append(ReplicaGroup(where, role, group.count, simulation))
    return built


def fresh_core(simulation: Simulation, output_tokens: np.ndarray | None = None) -> EngineCore:
    """A new, unrun copy of ``simulation``'s engine; the read-only parts are shared, not copied.

    ``output_tokens`` replaces the requests' output lengths (a prefill replica emits one token).
    """
    core = simulation.core
    shared = (
        core.cost_model,
        core.drafter,
        core.plan,
        simulation.strategy,
        core.requests.prompt_tokens,
        core.requests.output_tokens,
    )
    memo: dict[int, Any] = {id(obj): obj for obj in shared}
    clone: EngineCore = copy.deepcopy(core, memo)
    if output_tokens is not None:
        clone.requests.output_tokens = np.asarray(output_tokens, dtype=np.int64)
    return clone


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


def session_ids(scenario: Scenario, workload: Any, streams: RandomStreams) -> IntArray | None:
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


def add_replicas(
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


def open_loop_arrivals(groups: list[ReplicaGroup]) -> np.ndarray:
    """The workload's arrival times. Raise ScenarioError if the arrivals are closed-loop."""
    arrivals = groups[0].simulation.workload.arrival_at_s
    if arrivals is not None and groups[0].simulation.workload.concurrency is not None:
        raise ScenarioError(
            "workload.arrival.max_concurrency: a fleet's router takes every arrival; a cap on "
            "requests in flight is not supported behind a router"
        )
    if arrivals is None:
        raise ScenarioError(
            "workload.arrival.process: a fleet needs open-loop arrivals (poisson, gamma or "
            "trace); closed_loop clients are not supported behind a router"
        )
    return np.asarray(arrivals, dtype=np.float64)
