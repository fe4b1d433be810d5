"""Build an engine core from plain arrays and drive it, for the engine's property tests.

The builders take the scheduling limits, the KV pool and the acceptance plans directly, so a test
can make the pool tiny (to force preemption) or the token budget small (to force chunked prefill)
without going through the scenario's memory planner. ``run_node`` runs the real SimPy node one
event at a time and calls an observer after each; ``Monitor`` is the observer that checks the
engine's properties between events.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import simpy
from numpy.typing import NDArray

from sim.catalogue import get_gpu, get_model
from sim.cost_model import StepCostModel
from sim.drafting.base import NoSpeculation
from sim.efficiency import load_efficiency
from sim.engine.core import EngineCore
from sim.engine.drafter import StepPlan
from sim.engine.kv_cache import BlockManager
from sim.engine.node import ArrivalSchedule, ServingNode
from sim.engine.prefix_cache import PrefixStructure
from sim.engine.queues import SchedulerConfig
from sim.engine.recorder import StepRecorder
from sim.engine.requests import RequestTable
from sim.engine.scheduler import Scheduler
from sim.errors import SpecsimError
from sim.run import build_simulation
from sim.scenario import validate_document

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


@cache
def cost_model() -> StepCostModel:
    """Llama-3.1-8B on one H100 SXM with the vLLM V1 overhead (any real model would do)."""
    gpu = get_gpu("h100-sxm")
    return StepCostModel(get_model("llama-3.1-8b"), gpu, 1, load_efficiency(gpu.name), 0.0017)


@dataclass(frozen=True)
class EngineSetup:
    """Everything a test chooses about one node."""

    prompt_tokens: IntArray
    output_tokens: IntArray
    num_blocks: int
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool = True
    rollback_policy: str = "in_place"
    extra_tokens_per_decode: int = 0
    #: KV slots a running request holds beyond its step's tokens (vLLM V1's lookahead).
    lookahead_slots: int = 0
    plan: StepPlan | None = None
    arrival_at_s: FloatArray | None = None
    concurrency: int | None = None
    think_time_s: float = 0.0
    #: The most drafts any verify step of ``plan`` accepts (a chain's k, a tree's depth).
    max_accepted: int = 0
    #: What requests share (None: nothing) and whether the block manager caches prefixes.
    prefixes: PrefixStructure | None = None
    prefix_caching: bool = False
    #: Sessions: the turn each request's finish releases (-1: none), ``turn_think_time_s`` later.
    next_turn: IntArray | None = None
    turn_think_time_s: float = 0.0
    #: Batching: mixed prefill and decode steps (vLLM) or apart (SGLang), prefills per step cap.
    mixed_batches: bool = True
    max_prefills_per_step: int = 0
    #: The scheduler works one step ahead (vLLM's async scheduling).
    async_scheduling: bool = False


def build_core(setup: EngineSetup, fast_forward: bool = True) -> EngineCore:
    """An engine core over ``setup``, checking its own invariants after every step."""
    n = len(setup.prompt_tokens)
    prefixes = setup.prefixes if setup.prefixes is not None else PrefixStructure.none(n)
    requests = RequestTable(
        prompt_tokens=np.asarray(setup.prompt_tokens, dtype=np.int64).copy(),
        output_tokens=np.asarray(setup.output_tokens, dtype=np.int64).copy(),
        prefix_id=prefixes.prefix_id.copy(),
        session_id=prefixes.session_id.copy(),
    )
    plan = setup.plan if setup.plan is not None else StepPlan.without_speculation(n)
    kv = BlockManager(
        setup.num_blocks, setup.block_size, n, prefixes if setup.prefix_caching else None
    )
    config = SchedulerConfig(
        setup.max_num_seqs,
        setup.max_num_batched_tokens,
        setup.chunked_prefill,
        setup.rollback_policy,
        setup.extra_tokens_per_decode,
        lookahead_slots=setup.lookahead_slots,
        mixed_batches=setup.mixed_batches,
        max_prefills_per_step=setup.max_prefills_per_step,
    )
    # The Python path (the reference); tests/engine/test_compiled_loop.py turns the compiled
    # loop on and compares.
    return EngineCore(
        Scheduler(config, requests, kv, plan),
        cost_model(),
        NoSpeculation(),
        plan,
        StepRecorder(initial_capacity=64),
        fast_forward,
        check_invariants=True,
        compiled_loop=False,
        async_scheduling=setup.async_scheduling,
    )


def drive_node(
    setup: EngineSetup,
    fast_forward: bool = True,
    observer: Callable[[EngineCore], None] | None = None,
    core: EngineCore | None = None,
) -> tuple[EngineCore, int]:
    """Run the SimPy serving node over ``setup`` until every request has finished.

    ``observer(core)`` runs after every SimPy event, so after every step (or stretch of
    fast-forwarded steps) the node takes; ``core``: one built by :func:`build_core` and set up
    by the test (default: built here). Return the core and how many steps ran in stretches of
    more than one step per event.
    """
    if core is None:
        core = build_core(setup, fast_forward)
    if setup.concurrency is not None:
        arrivals = ArrivalSchedule(
            len(setup.prompt_tokens),
            concurrency=setup.concurrency,
            think_time_s=setup.think_time_s,
            next_turn=setup.next_turn,
            turn_think_time_s=setup.turn_think_time_s,
        )
    else:
        times = setup.arrival_at_s
        if times is None:
            times = np.zeros(len(setup.prompt_tokens))
        arrivals = ArrivalSchedule(
            len(setup.prompt_tokens),
            arrival_at_s=times,
            next_turn=setup.next_turn,
            turn_think_time_s=setup.turn_think_time_s,
        )
    env = simpy.Environment()
    node = ServingNode(env, core, arrivals)
    num_stretched = 0
    while node.process.is_alive:
        before = core.num_steps
        env.step()
        if core.num_steps - before > 1:
            num_stretched += core.num_steps - before
        if observer is not None:
            observer(core)
    return core, num_stretched


def run_node(
    setup: EngineSetup,
    fast_forward: bool = True,
    observer: Callable[[EngineCore], None] | None = None,
) -> EngineCore:
    """:func:`drive_node`, returning the finished core only."""
    return drive_node(setup, fast_forward, observer)[0]


def random_plan(
    rng: np.random.Generator,
    num_decode_tokens: IntArray,
    max_proposed: int,
    max_accepted: int,
    ragged: bool = True,
) -> StepPlan:
    """Random acceptance plans: enough verify steps per request to emit its decode tokens.

    Each step proposes 0..``max_proposed`` drafts (exactly ``max_proposed`` unless ``ragged``) and
    accepts 0..min(proposed, ``max_accepted``) of them; a tree proposes more than its depth accepts.
    """
    proposed: list[int] = []
    accepted: list[int] = []
    offsets = [0]
    for need in np.asarray(num_decode_tokens).tolist():
        emitted = 0
        # A few spare steps: preemption can re-emit tokens without a verify step, never fewer.
        while emitted < need + 2:
            p = int(rng.integers(0, max_proposed + 1)) if ragged else max_proposed
            a = int(rng.integers(0, min(p, max_accepted) + 1))
            proposed.append(p)
            accepted.append(a)
            emitted += a + 1
        offsets.append(len(proposed))
    return StepPlan(
        offsets=np.array(offsets, dtype=np.int64),
        proposed=np.array(proposed, dtype=np.int16),
        accepted=np.array(accepted, dtype=np.int16),
    )


def record_of(core: EngineCore) -> dict[str, NDArray[np.generic]]:
    """Every step column and every per-request column of a finished core, as copies."""
    r = core.requests
    out = {f"step.{k}": v.copy() for k, v in core.recorder.columns().items()}
    for name in (
        "arrival_at_s",
        "scheduled_at_s",
        "first_token_at_s",
        "finished_at_s",
        "last_emit_at_s",
        "num_emitted",
        "num_computed_tokens",
        "num_preemptions",
        "num_decode_steps",
        "num_drafted",
        "num_accepted",
        "num_cached_tokens",
    ):
        out[f"request.{name}"] = getattr(r, name).copy()
    itl, itl_at = core.recorder.irregular_itl()
    out["itl.values"] = itl
    out["itl.at"] = itl_at
    return out


class Monitor:
    """Checks the engine's per-request properties between consecutive observations.

    After every step or fast-forwarded segment: budgets held; every running request holds exactly
    the blocks of its committed tokens and commits at most its known tokens minus one; waiting and
    finished requests hold nothing; emitted tokens are never lost; a decoding request commits
    exactly ``accepted + 1`` tokens per verify step unless it finishes, so a rejected draft never
    enters the committed sequence; a preempted request frees everything and, once its recompute
    completes, commits every token it knew plus the one the recompute emits.
    """

    def __init__(self, core: EngineCore, max_accepted: int) -> None:
        self.max_accepted = max_accepted
        self.num_observations = 0
        self.num_resumes = 0
        self._snapshot(core)
        n = len(core.requests)
        # Logical length and emitted count of each request at its latest preemption.
        self.preempted_at = np.full((n, 2), -1, dtype=np.int64)
        # A model of the waiting queue (FCFS; preempted requests go back to its front) and the
        # order in which requests were last admitted.
        self.queue: list[int] = []
        self.admitted_at = np.full(n, -1, dtype=np.int64)
        self.num_admissions = 0

    def _snapshot(self, core: EngineCore) -> None:
        r = core.requests
        self.num_steps = core.num_steps
        self.emitted = r.num_emitted.copy()
        self.computed = r.num_computed_tokens.copy()
        self.decode_steps = r.num_decode_steps.copy()
        self.accepted = r.num_accepted.copy()
        self.drafted = r.num_drafted.copy()
        self.preemptions = r.num_preemptions.copy()
        self.state = r.state.copy()

    def __call__(self, core: EngineCore) -> None:
        from sim.engine.kv_cache import blocks_for
        from sim.engine.requests import FINISHED, RUNNING

        self.num_observations += 1
        if self.num_observations > 3_000:
            raise RuntimeError("the engine stopped making progress")
        r, s, kv = core.requests, core.scheduler, core.kv
        cfg = s.config
        steps: dict[str, Any] = core.recorder.columns()
        new = slice(self.num_steps, core.num_steps)
        assert (steps["num_tokens"][new] <= cfg.max_num_batched_tokens).all()
        assert (steps["num_seqs"][new] <= cfg.max_num_seqs).all()
        assert (steps["kv_blocks_used"][new] <= kv.num_blocks).all()
        assert (steps["num_accepted_tokens"][new] <= steps["num_draft_tokens"][new]).all()
        assert len(s.running) <= cfg.max_num_seqs

        known = r.prompt_tokens + r.num_emitted
        running = r.state == RUNNING
        assert np.array_equal(
            kv.held[running], blocks_for(r.num_computed_tokens[running], kv.block_size)
        )
        assert (r.num_computed_tokens[running] <= known[running] - 1).all()
        assert np.array_equal(kv.logical_tokens[running], r.num_computed_tokens[running])
        assert (kv.held[~running] == 0).all()
        # A block shared by several requests is one block of the pool.
        own = int((kv.held - kv.num_shared).sum())
        assert kv.num_free + own + kv.num_named_held == kv.num_blocks
        assert kv.num_free_unnamed >= 0
        assert (r.num_cached_tokens <= np.maximum(r.prompt_tokens - 1, 0)).all()
        assert (r.num_emitted >= self.emitted).all(), "an emitted token was lost"
        assert (r.num_emitted <= r.output_tokens).all()
        d_emit = r.num_emitted - self.emitted
        d_steps = r.num_decode_steps - self.decode_steps
        d_acc = r.num_accepted - self.accepted
        d_drafted = r.num_drafted - self.drafted
        preempted = r.num_preemptions > self.preemptions
        assert (d_acc <= d_drafted).all()
        was_decoding = (
            (self.state == RUNNING)
            & (self.emitted >= 1)
            & (self.computed == self.emitted + r.prompt_tokens - 1)
            & ~preempted
        )
        finished = r.state == FINISHED
        steady = was_decoding & ~finished
        # Each verify step emits its accepted drafts and one token from the target (the bonus or
        # the correction); the committed length grows by exactly that.
        assert np.array_equal(d_emit[steady], d_steps[steady] + d_acc[steady])
        assert np.array_equal(r.num_computed_tokens[steady], self.computed[steady] + d_emit[steady])
        ending = was_decoding & finished
        assert (d_emit[ending] <= d_steps[ending] + d_acc[ending]).all()
        assert (d_emit[was_decoding] >= d_steps[was_decoding]).all()
        assert (d_emit[was_decoding] <= d_steps[was_decoding] * (self.max_accepted + 1)).all()

        # Preemption by recompute: everything freed, nothing emitted lost.
        for req in np.flatnonzero(preempted).tolist():
            # A sequence that preempted itself is readmitted for recompute in the same step.
            if r.state[req] != RUNNING:
                assert kv.held[req] == 0 and r.num_computed_tokens[req] == 0
            assert r.state[req] != FINISHED
            self.preempted_at[req] = (self.computed[req], self.emitted[req])
        # Resumed: once the recompute emits, every token known at preemption is committed again,
        # and the committed length grows by exactly what was emitted since.
        resumed = (
            (self.preempted_at[:, 1] >= 0) & running & (r.num_emitted > self.preempted_at[:, 1])
        )
        for req in np.flatnonzero(resumed).tolist():
            logical, emitted = self.preempted_at[req].tolist()
            assert r.num_computed_tokens[req] == known[req] - 1
            if logical == r.prompt_tokens[req] + emitted - 1:  # it was decoding when preempted
                assert r.num_computed_tokens[req] - logical == r.num_emitted[req] - emitted
            self.preempted_at[req] = -1
            self.num_resumes += 1
        self._check_queue(core, preempted)
        self._snapshot(core)

    def _check_queue(self, core: EngineCore, preempted: NDArray[np.bool_]) -> None:
        """Admissions take the head of the queue: arrivals join its back in arrival order,
        preempted requests its front, the earliest admitted first (the last one preempted)."""
        from sim.engine.requests import NOT_ARRIVED, WAITING

        r = core.requests
        arrived = np.flatnonzero((self.state == NOT_ARRIVED) & (r.state != NOT_ARRIVED))
        self.queue.extend(arrived[np.lexsort((arrived, r.arrival_at_s[arrived]))].tolist())
        victims = np.flatnonzero(preempted)
        self.queue[:0] = victims[np.argsort(self.admitted_at[victims])].tolist()
        was_queued = (self.state == WAITING) | (self.state == NOT_ARRIVED)
        # Preempted requests readmitted within the same step count as admitted from the front.
        admitted = np.flatnonzero(
            (was_queued | preempted) & (r.state != WAITING) & (r.state != NOT_ARRIVED)
        )
        head = self.queue[: len(admitted)]
        assert sorted(head) == admitted.tolist(), "admission out of FCFS order"
        for req in head:
            self.admitted_at[req] = self.num_admissions
            self.num_admissions += 1
        del self.queue[: len(admitted)]
        assert sorted(self.queue) == np.flatnonzero(r.state == WAITING).tolist()
        assert list(core.scheduler.waiting) == self.queue


def check_finished(core: EngineCore) -> None:
    """Every request finished with its full output and every block is back in the pool."""
    from sim.engine.requests import FINISHED

    r, kv = core.requests, core.kv
    assert (r.state == FINISHED).all()
    assert np.array_equal(r.num_emitted, r.output_tokens)
    assert kv.num_free == kv.num_blocks and (kv.held == 0).all()
    assert not np.isnan(r.finished_at_s).any()
    assert (r.arrival_at_s <= r.scheduled_at_s).all()
    assert (r.scheduled_at_s < r.first_token_at_s).all()
    assert (r.first_token_at_s <= r.finished_at_s).all()
    assert (r.num_accepted <= r.num_drafted).all()
    # FCFS: no request is first scheduled before one that arrived earlier (ties in request order).
    order = np.lexsort((np.arange(len(r)), r.arrival_at_s))
    assert (np.diff(r.scheduled_at_s[order]) >= 0).all()
    steps: dict[str, Any] = core.recorder.columns()
    assert int(steps["num_emitted_tokens"].sum()) == int(r.output_tokens.sum())
    assert int(steps["num_draft_tokens"].sum()) == int(r.num_drafted.sum())
    assert int(steps["num_accepted_tokens"].sum()) == int(r.num_accepted.sum())
    assert int(steps["num_prefill_seqs"].sum()) >= len(r)
    # Steps follow each other without overlap.
    ends = steps["start_at_s"] + steps["duration_s"]
    assert (steps["start_at_s"][1:] >= ends[:-1] - 1e-12).all()


# --- scenarios ---------------------------------------------------------------------------------
def _with_utilization(document: dict[str, Any], utilization: float) -> dict[str, Any]:
    engine = {**document.get("engine", {}), "gpu_memory_utilization": utilization}
    return {**document, "engine": engine}


def _builds(document: dict[str, Any]) -> bool:
    try:
        build_simulation(validate_document(document, "tight pool"), Path("."))
    except SpecsimError:
        return False
    return True


def tight_pool(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with nearly the smallest gpu_memory_utilization that still builds (bisection;
    building succeeds above a threshold): a KV pool barely above the longest request, so a burst
    of requests must preempt."""
    low, high = 0.05, 0.9
    assert _builds(_with_utilization(document, high))
    while high - low > 0.002:
        middle = (low + high) / 2
        if _builds(_with_utilization(document, middle)):
            high = middle
        else:
            low = middle
    return _with_utilization(document, high)
