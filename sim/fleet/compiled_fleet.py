"""A colocated fleet run in compiled code: every replica on the compiled loop, routed in the loop.

Where the fleet is one group of replicas behind a round-robin or least-outstanding router, and a
lone replica would run on the compiled loop (:func:`sim.engine.compiled_loop.for_node`'s
conditions: a fixed plan, in-place rollback, mixed batches, no prefix caching, the compiled
evaluator, ...) and no invariant checks are asked for, :func:`run` runs the whole fleet in
:func:`sim.fleet.fleet_kernel.compiled`'s driver instead of SimPy processes: each replica is a
lone node's loop state whose arrivals are the requests routed to it, advanced to each arrival
before the router reads it. The records are those of the SimPy fleet (:mod:`sim.fleet.replica`),
which stays the reference (``fleet_compiled=False``); ``tests/fleet/test_compiled_fleet.py``
compares the two over random fleets. A step the loop hands back to Python (a preemption that
keeps nothing, a request that can never fit) makes :func:`run` return False, and the caller runs
the fleet on the SimPy path.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sim.engine import compiled_loop, loop_kernel, loop_state
from sim.engine.cost_eval import DRAFT_GIVEN
from sim.engine.drafter import StepPlan
from sim.engine.loop_state import (
    _FREE,
    _QHEAD,
    _QTAIL,
    _STEPS,
    DONE,
    FLOAT_COLUMNS,
    INT_COLUMNS,
    MISSING,
    PYTHON,
    REQUEST_COLUMNS,
)
from sim.engine.requests import NOT_ARRIVED
from sim.fleet import fleet_kernel
from sim.fleet.build import Fleet
from sim.fleet.stage import Stage

#: Routers the driver applies, by policy name.
ROUTERS = {
    "round_robin": fleet_kernel.ROUND_ROBIN,
    "least_outstanding": fleet_kernel.LEAST_OUTSTANDING,
}

#: The driver's per-replica request columns, each kind as rows of one array in the loop's order
#: (:data:`sim.engine.loop_state.REQUEST_COLUMNS`): int64 rows, then float rows, as (owner, name).
INT_ROWS = tuple((owner, name) for owner, name, kind in REQUEST_COLUMNS if kind == "i")
FLOAT_ROWS = tuple((owner, name) for owner, name, kind in REQUEST_COLUMNS if kind == "f")

#: Steps one call of the loop runs at most (its records are then copied to the replica's).
STEPS_PER_CALL = 1 << 10
#: Steps held per replica before they go to its recorder.
RECORDS_PER_REPLICA = 1 << 14
#: Largest replicas × requests the driver takes (its per-replica request columns hold every
#: request: some 190 bytes each, 190 MB here).
MAX_REPLICA_REQUESTS = 1 << 20


def applies(fleet: Fleet, policy: str, times: np.ndarray) -> bool:
    """Whether :func:`run` takes ``fleet`` (one stage of replicas of one group, built and unrun)
    with router ``policy`` and arrival ``times``: see the module's conditions."""
    replicas = fleet.replicas
    groups = {id(getattr(r, "group", None)) for r in replicas}
    if policy not in ROUTERS or len(fleet.stages) != 1 or len(groups) != 1 or not replicas:
        return False
    core = replicas[0].core
    cfg, kv = core.scheduler.config, core.kv
    if (
        not core.compiled_loop
        or core.check  # invariants checked after every step: the SimPy path
        or not core.fast_forward_enabled
        or not cfg.mixed_batches
        or cfg.rollback_policy != "in_place"
        or kv.caching
        or not core.compiled_cost
        or core.async_scheduling
        or type(core.plan) is not StepPlan
        or len(replicas) * len(core.requests) > MAX_REPLICA_REQUESTS
        or not np.isfinite(times).all()
    ):
        return False
    loaded = loop_kernel.compiled.cache_info().currsize > 0
    if len(times) < core.compiled_loop_min_requests and not loaded:
        return False
    if fleet_kernel.compiled() is None:
        return False
    lowered = core.lowered_now()
    return lowered is not None and lowered.draft_form != DRAFT_GIVEN


def run(
    fleet: Fleet,
    stage: Stage,
    policy: str,
    rng: np.random.Generator,
    order: np.ndarray,
    times: np.ndarray,
    progress: Callable[[int], None] | None = None,
) -> bool:
    """Route request ``order[k]``, arriving at ``times[k]`` (sorted), to ``fleet``'s replicas and
    run them to the end, as the SimPy fleet would; the replicas' engines, records and routed
    counts and ``stage.routed`` are then as that run leaves them. Return False, having changed
    the replicas' engines, if a step needs the Python path (run the fleet there instead)."""
    driver = fleet_kernel.compiled()
    assert driver is not None
    replicas = fleet.replicas
    num = len(replicas)
    core = replicas[0].core
    lowered = core.lowered_now()
    assert lowered is not None
    n = len(core.requests)
    plan = core.plan
    max_seqs = core.scheduler.config.max_num_seqs
    front = max_seqs + 2
    req_i = np.zeros((num, len(INT_ROWS), n), dtype=np.int64)
    req_i[:, INT_ROWS.index(("requests", "last_emit_step"))] = -2
    req_f = np.full((num, len(FLOAT_ROWS), n), np.nan)
    state = np.full((num, n), NOT_ARRIVED, dtype=np.int8)
    num_plan = max(len(plan.proposed), 1)
    plan_dtype = plan.proposed.dtype if len(plan.proposed) else np.int16
    g_proposed = plan.proposed if len(plan.proposed) else np.zeros(1, dtype=plan_dtype)
    g_accepted = plan.accepted if len(plan.accepted) else np.zeros(1, dtype=plan_dtype)
    ints = np.zeros((num, loop_state.NUM_INTS), dtype=np.int64)
    ints[:, _FREE] = core.kv.num_free
    ints[:, _QHEAD] = ints[:, _QTAIL] = front
    cfg = compiled_loop.loop_config(core, STEPS_PER_CALL)
    state_arrays = dict(
        offsets=np.zeros((num, n + 1), dtype=np.int64),
        proposed=np.zeros((num, num_plan), dtype=plan_dtype),
        accepted=np.zeros((num, num_plan), dtype=plan_dtype),
        r_times=np.zeros((num, n)),
        local_ids=np.zeros((num, n), dtype=np.int64),
        queue=np.zeros((num, front + 2 * n + 1), dtype=np.int64),
        running=np.zeros((num, max_seqs + 1), dtype=np.int64),
        ints=ints,
        clock=np.zeros((num, 2)),
    )
    num_itl = STEPS_PER_CALL + max_seqs + 1
    acc_f = np.zeros((num, len(FLOAT_COLUMNS), RECORDS_PER_REPLICA))
    acc_i = np.zeros((num, len(INT_COLUMNS), RECORDS_PER_REPLICA), dtype=np.int64)
    acc_itl = np.zeros((num, 2, RECORDS_PER_REPLICA + num_itl))
    filled = np.zeros((num, 2), dtype=np.int64)
    routed = np.zeros(num, dtype=np.int64)
    finished = np.zeros(num, dtype=np.int64)
    assign = np.full(n, -1, dtype=np.int64)
    late = np.zeros(num, dtype=np.int64)
    live = np.zeros((num, n), dtype=np.int64)
    num_live = np.zeros(num, dtype=np.int64)
    drv = np.zeros(2 + num, dtype=np.int64)
    scratch = (
        np.zeros((len(FLOAT_COLUMNS), STEPS_PER_CALL)),
        np.zeros((len(INT_COLUMNS), STEPS_PER_CALL), dtype=np.int64),
        np.zeros(num_itl),
        np.zeros(num_itl),
    )
    missing = np.zeros((3, 2 + len(lowered._levels)))
    no_policy = compiled_loop.no_policy()
    buffers = loop_state.step_buffers(max_seqs)
    while True:
        status = driver(
            times, order, core.requests.prompt_tokens, core.requests.output_tokens,
            plan.offsets, g_proposed, g_accepted, ROUTERS[policy], rng, drv, req_i, req_f, state,
            *state_arrays.values(), cfg,
            lowered.arrays(),
            *scratch, missing, no_policy, buffers, np.zeros(1), np.zeros(1, dtype=np.int64),
            acc_f, acc_i, acc_itl, filled, routed, finished, late, live, num_live, assign,
        )  # fmt: skip
        if status == MISSING:
            lowered._price(missing[:, : int(drv[1])].copy())
            continue
        if status == PYTHON:
            return False
        _hand_over(fleet, acc_f, acc_i, acc_itl, filled)
        if status == DONE:
            break
    local_ids, clock = state_arrays["local_ids"], state_arrays["clock"]
    for c, replica in enumerate(replicas):
        ids = local_ids[c, : routed[c]]
        own, kv = replica.core, replica.core.kv
        owners = {"requests": own.requests, "kv": kv}
        for rows, table in ((INT_ROWS, req_i), (FLOAT_ROWS, req_f)):
            for row, (owner, name) in enumerate(rows):
                getattr(owners[owner], name)[ids] = table[c, row, : len(ids)]
        own.requests.state[ids] = state[c, : len(ids)]
        kv.num_free = int(ints[c, _FREE])
        own.clock_s = float(clock[c, 0])
        own.num_steps = int(ints[c, _STEPS])
        own.num_compiled_steps = own.num_steps
        replica.num_routed = int(routed[c])
        replica.num_finished = int(finished[c])
    stage.routed = dict(zip(order.tolist(), assign[order].tolist(), strict=True))
    if progress is not None:
        progress(int(finished.sum()))
    return True


def _hand_over(
    fleet: Fleet, acc_f: np.ndarray, acc_i: np.ndarray, acc_itl: np.ndarray, filled: np.ndarray
) -> None:
    """Give each replica's recorder the steps and gaps held for it, and empty the buffers."""
    for c, replica in enumerate(fleet.replicas):
        count, gaps = int(filled[c, 0]), int(filled[c, 1])
        recorder = replica.core.recorder
        if count:
            rows: dict[str, object] = {
                name: acc_f[c, i, :count].copy() for i, name in enumerate(FLOAT_COLUMNS)
            }
            rows.update({name: acc_i[c, i, :count].copy() for i, name in enumerate(INT_COLUMNS)})
            recorder.append(rows)
        if gaps:
            recorder.add_irregular_itl_at(acc_itl[c, 0, :gaps].copy(), acc_itl[c, 1, :gaps].copy())
    filled[:] = 0
