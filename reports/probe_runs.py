"""One seed's runs at one probed rate, as one simulation that pauses and goes on.

A probe lengthens an undecided seed (2,000 requests, then 8,000, then 20,000: see
:mod:`reports.probes`). Run from scratch each time, the 20,000-request run repeats the 2,000 and
8,000 before it. Here the seed's simulation is built once for the longest length and paused:
*stage* ``n`` is read when the first ``n`` requests (by arrival) are known and the ones its
steady window measures have finished, and the run goes on from there if a longer stage is
asked for. The last stage is the whole run, read as :func:`sim.run.execute` reads it, so a
confirmation at the longest length is the same run, request for request, as a fresh run of that
length (the one the soundness benchmark repeats).

A shorter stage is a window of the longer run, not a separate shorter run: its requests are
followed by more arrivals instead of a drain, which is the load a node under a steady rate sees.
Its steady window is the one :func:`sim.metrics.measurement_window` gives the first ``n``
requests: it ends at the arrival of the first request it leaves out, and requests arriving
later do not enter it (the window's number in system counts only requests that arrived
before its end, and every one of them is among the first ``n``).

A paused run lives in a :class:`reports.worker_pool.Slot` of the worker process that ran it;
the pool sends the seed's next stage to the same worker.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import simpy

from reports.probes import (
    KEPT_SUMMARY_KEYS,
    PROBE_TRIM_FRACTIONS,
    ProbeOutcome,
    ProbeRan,
    ProbeRefused,
)
from reports.stability import Target, judge_run
from reports.worker_pool import Slot
from sim.engine.node import ServingNode
from sim.errors import SpecsimError
from sim.metrics import summarize
from sim.run import REQUEST_COLUMNS, Simulation, build_simulation, execute, run_scenario
from sim.scenario import validate_document

#: A paused run advances by this share of its stage's span between looks at its records,
#: doubling each time (to at most :data:`MAX_LOOK_SHARE`): a stage reads a few looks late at most.
FIRST_LOOK_SHARE = 0.005
MAX_LOOK_SHARE = 0.08


@dataclass
class PausedRun:
    """A seed's simulation, built for ``num_requests`` and run as far as ``stage`` requests."""

    simulation: Simulation
    node: ServingNode
    num_requests: int
    stage: int = 0


def stage_ids(paused: PausedRun, stage: int) -> np.ndarray | None:
    """The ids of the first ``stage`` requests by arrival, once the run has gone far enough to
    read them: the window's end (the arrival of the first request its tail leaves out) is
    passed, and every request the window measures has finished. None while it has not.

    A request's send time is known once its client sends it (open-loop times from the start);
    one not yet sent is sent no earlier than now, after the window's end.
    """
    sent_at = paused.node.arrivals.client_at_s
    known = np.flatnonzero(~np.isnan(sent_at))
    if len(known) < stage:
        return None
    ids = known[np.argsort(sent_at[known], kind="stable")[:stage]]
    warmup, cooldown = PROBE_TRIM_FRACTIONS
    first, stop = round(warmup * stage), stage - round(cooldown * stage)
    end_at_s = float(sent_at[ids[min(stop, stage - 1)]])
    if paused.node.env.now < end_at_s:
        return None
    finished = paused.simulation.core.requests.finished_at_s[ids[first:stop]]
    return None if np.isnan(finished).any() else ids


def advance(paused: PausedRun, stage: int) -> np.ndarray | None:
    """Run ``paused`` until its first ``stage`` requests can be read (:func:`stage_ids`) and
    return their ids; None if the run ended first (read it whole)."""
    node, env = paused.node, paused.node.env
    sent_at = node.arrivals.client_at_s
    first_at_s = float(np.nanmin(sent_at)) if not np.isnan(sent_at).all() else 0.0
    look = FIRST_LOOK_SHARE
    while not node.process.triggered:
        ids = stage_ids(paused, stage)
        if ids is not None:
            paused.stage = stage
            return ids
        known = np.sort(sent_at[~np.isnan(sent_at)])
        # Straight to the window's end when it is known; then in growing steps of the span.
        stop = stage - round(PROBE_TRIM_FRACTIONS[1] * stage)
        end_at_s = float(known[stop]) if len(known) > stop else env.now
        span = max(end_at_s - first_at_s, 1e-3)
        until = max(end_at_s, env.now + look * span)
        node.horizon_s = until  # the compiled loop stops there, as a Python stretch would
        env.run(until=until)
        look = min(2.0 * look, MAX_LOOK_SHARE)
    return None


def stage_records(paused: PausedRun, ids: np.ndarray) -> dict[str, np.ndarray]:
    """The request records of ``ids`` as the run's result would give them: arrival is when the
    client sent the request (also for one still in the front end's queue), and a streamed
    chunk reaches the client the front end's egress delay after the engine emits it."""
    core, sim = paused.simulation.core, paused.simulation
    records = {name: getattr(core.requests, name)[ids].copy() for name in REQUEST_COLUMNS}
    records["arrival_at_s"] = paused.node.arrivals.client_at_s[ids].copy()
    egress_s = sim.engine.frontend.egress_s
    for name in ("first_token_at_s", "finished_at_s"):
        records[name] = records[name] + egress_s
    return records


def _stage_summary(paused: PausedRun, records: dict[str, np.ndarray]) -> dict[str, Any]:
    """The summary's kept figures over the stage's steady window (the steps run so far)."""
    sim = paused.simulation
    irregular, irregular_at = sim.core.recorder.irregular_itl()
    summary = summarize(
        records,
        sim.core.recorder.columns(),
        irregular,
        irregular_at,
        sim.scenario.measurement.warmup_requests,
        sim.memory.num_blocks,
        scenario=sim.scenario.name,
        method=sim.scenario.speculation.method,
        seed=sim.scenario.seed,
        prefix_caching=sim.engine.enable_prefix_caching,
        trim_fractions=PROBE_TRIM_FRACTIONS,
    ).to_dict()
    return {key: summary[key] for key in KEPT_SUMMARY_KEYS if key in summary}


def run_probe(
    document: dict[str, Any],
    base_dir: str,
    source: str,
    targets: list[Target],
    *,
    max_requests: int | None = None,
    slot: Slot | None = None,
) -> ProbeOutcome:
    """One seed at one rate, ``document``'s number of requests: its judgement, a few summary
    figures and the requests simulated for it (fewer than its length when it went on from a
    paused run), or the message of the SpecsimError that stopped it.

    With ``slot``, the seed's simulation is built for ``max_requests`` and paused in the slot
    after a shorter stage, or taken from it and continued; at ``max_requests`` it runs to the
    end and leaves the slot empty.
    """
    stage = int(document["workload"]["num_requests"])
    longest = max(stage, max_requests or stage)
    started = time.perf_counter()
    try:
        paused = slot.value if slot is not None else None
        done = 0 if paused is None else paused.stage
        if paused is None or paused.stage > stage or paused.num_requests != longest:
            whole = {**document, "workload": {**document["workload"], "num_requests": longest}}
            scenario = validate_document(whole, source)
            if scenario.fleet is not None:  # a fleet's replicas do not pause: one whole run
                result = run_scenario(validate_document(document, source), Path(base_dir),
                                      step_records="summary")  # fmt: skip
                kept = result.summary.to_dict()
                return _judged(result.requests, result.steps, kept, targets, source, stage,
                               started)  # fmt: skip
            built = build_simulation(scenario, Path(base_dir), step_records="summary")
            env = simpy.Environment()
            paused = PausedRun(built, ServingNode(env, built.core, built.arrivals), longest)
            done = 0
        ids = advance(paused, stage) if stage < longest else None
        if ids is None:
            paused.node.horizon_s = math.inf  # on to the end
            result = execute(paused.simulation, node=paused.node)
            records, steps, summary = result.requests, result.steps, result.summary.to_dict()
            stage, paused = longest, None
        else:
            records = stage_records(paused, ids)
            steps = paused.simulation.core.recorder.columns()
            summary = _stage_summary(paused, records)
    except SpecsimError as exc:
        return ProbeRefused(str(exc))
    if slot is not None:
        slot.value = paused
    return _judged(records, steps, summary, targets, source, stage - done, started)


def _judged(
    records: dict[str, np.ndarray],
    steps: dict[str, np.ndarray],
    summary: dict[str, Any],
    targets: list[Target],
    source: str,
    simulated: int,
    started: float,
) -> ProbeOutcome:
    try:
        judgement = judge_run(records, steps, targets, PROBE_TRIM_FRACTIONS)
    except ValueError as exc:
        return ProbeRefused(f"{source}: {exc}")
    kept = {key: summary[key] for key in KEPT_SUMMARY_KEYS if key in summary}
    kept["wall_time_s"] = time.perf_counter() - started
    return ProbeRan(judgement, kept, simulated)
