"""The engine core: executes the steps the scheduler chooses and advances the clock.

Every change to the node's state goes through :meth:`EngineCore.apply_block`, which applies the
first steps of a :class:`~sim.engine.block.StepBlock`. A general step is a block of one step:
``step()`` asks the scheduler for one batch and applies it. Between events that change the batch
(an arrival that could be admitted, a completion, a block shortage), every running sequence
decodes and the steps are predictable: :func:`sim.engine.planner.plan_stretch` plans many of them
as one block, and the core costs them with one cost-model call. :meth:`EngineCore.plan_next` is
the seam where the next block is decided (a lone node runs it at once; a fleet's replica holds
it until no router can cut it). With fast-forward off every step goes through the scheduler;
both ways share the integer shape arithmetic and accumulate time with a sequential add, so their
records agree to the last bit (a test runs both and compares).

Same-time order: a step starting at t sees every arrival with arrival time <= t (under async
scheduling, every arrival up to the previous step's start:
:meth:`EngineCore.arrivals_seen_until_s`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice

import numpy as np
from numpy.typing import NDArray

from sim.cost_model import StepCostModel
from sim.engine import compiled_loop as compiled_loop_module
from sim.engine import cost_kernel
from sim.engine.block import StepBlock, general_block
from sim.engine.block_apply import BlockApplication
from sim.engine.drafter import Drafter, StepPlan
from sim.engine.kv_cache import BlockManager
from sim.engine.planner import plan_stretch
from sim.engine.recorder import StepRecorder
from sim.engine.requests import RequestTable
from sim.engine.scheduler import Scheduler
from sim.engine.step_costing import LOWER_COST_AFTER_BLOCKS, StepCosting
from sim.errors import InvariantError

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


#: Stretches planned in numpy before the compiled pass is loaded (see EngineCore._use_compiled).
COMPILE_AFTER_STRETCHES = 20_000


@dataclass(frozen=True)
class PlannedBlock:
    """A planned stretch, costed: each step's start (and the last one's end) from the clock,
    durations and breakdown, and the steps to keep (``length``) for the next known arrival."""

    block: StepBlock
    starts: FloatArray
    durations: FloatArray
    parts: dict[str, FloatArray]
    length: int


class EngineCore(StepCosting, BlockApplication):
    """One serving node's engine: scheduler, KV ledger, cost model, drafter and records."""

    def __init__(
        self,
        scheduler: Scheduler,
        cost_model: StepCostModel,
        drafter: Drafter,
        plan: StepPlan,
        recorder: StepRecorder,
        fast_forward: bool = True,
        on_finish: Callable[[IntArray, float], None] | None = None,
        check_invariants: bool = False,
        compiled: bool = False,
        compiled_cost: bool = True,
        compiled_loop: bool = True,
        async_scheduling: bool = False,
    ) -> None:
        self.scheduler = scheduler
        self.requests: RequestTable = scheduler.requests
        self.kv: BlockManager = scheduler.kv
        self.cost_model = cost_model
        self.drafter = drafter
        self.plan = plan
        self.recorder = recorder
        self.fast_forward_enabled = fast_forward
        self.on_finish = on_finish
        self.check = check_invariants
        #: Plan stretches with drafts in the compiled pass when numba is installed (the numpy
        #: path otherwise; the records are the same). Off by default: measured on the reference
        #: workload with EAGLE-3 it is no faster than the numpy path, which computes the kept
        #: steps only, and loading numba costs about 0.5 s of CPU and 100 MB.
        self.compiled = compiled
        #: Stretches planned in numpy first (see :meth:`_use_compiled`).
        self.compile_after = COMPILE_AFTER_STRETCHES
        self._num_planned = 0
        #: Cost blocks with the compiled evaluator (:mod:`sim.engine.cost_kernel`) when numba is
        #: installed and the scenario can be lowered, once ``lower_cost_after`` blocks were
        #: costed by the Python model; the durations are the same either way, bit for bit.
        self.compiled_cost = compiled_cost
        self.lower_cost_after = LOWER_COST_AFTER_BLOCKS
        self._num_costed = 0
        self._lowered: cost_kernel.LoweredCost | None = None
        #: Run a lone node's steps in the compiled loop (:mod:`sim.engine.compiled_loop`) where it
        #: applies; the records are the same either way, bit for bit.
        self.compiled_loop = compiled_loop
        self.clock_s = 0.0
        self.num_steps = 0
        self.speculative = len(plan.proposed) > 0 or drafter.name != "none"
        #: Requests a run needs before it loads the compiled loop (see
        #: :data:`sim.engine.compiled_loop.MIN_REQUESTS`).
        self.compiled_loop_min_requests = (
            compiled_loop_module.MIN_REQUESTS_SPECULATIVE
            if self.speculative
            else compiled_loop_module.MIN_REQUESTS
        )
        #: Steps the compiled loop ran.
        self.num_compiled_steps = 0
        #: Closed-loop clients send a request when one finishes: a stretch must stop there.
        self.arrivals_follow_finishes = False
        #: The scheduler works one step ahead (vLLM's async scheduling): see
        #: :meth:`arrivals_seen_until_s`.
        self.async_scheduling = async_scheduling
        #: Start and end of the last step applied (NaN before the first).
        self.last_step_start_s = float("nan")
        self.last_step_end_s = float("nan")
        #: The scheduler's running array as a stretch left it: every sequence in it decodes and
        #: emitted in the last step (the scheduler replaces the array whenever the set changes).
        self._decoding: IntArray | None = None

    # --- when arrivals are seen ------------------------------------------------------------------
    def arrivals_seen_until_s(self) -> float:
        """Arrivals up to this time can join the step that starts at the clock.

        A synchronous engine schedules a step when the previous one ends: it sees every arrival
        up to its start. Under async scheduling (vLLM 0.14+, ``step_with_batch_queue`` with a
        queue of two) the step that starts now was scheduled when the previous one started, and
        new requests are taken in only between scheduling calls: a request that arrives while
        step n runs joins step n+2 at the earliest. When the engine was idle in between, or the
        step scheduled ahead has nothing to run (nothing running or waiting), the next step is
        scheduled now and sees everything up to the clock.
        """
        s = self.scheduler
        if (
            not self.async_scheduling
            or self.clock_s != self.last_step_end_s
            or (len(s.running) == 0 and not s.waiting)
        ):
            return self.clock_s
        return self.last_step_start_s

    # --- deciding the next block ----------------------------------------------------------------
    def plan_next(
        self,
        next_arrival_at_s: float,
        size_for_s: float | None = None,
        *,
        admissions: bool = True,
    ) -> PlannedBlock | None:
        """The next stretch of predictable steps, costed and cut for the arrival expected at
        ``next_arrival_at_s`` (none of its steps from the first that starts at or after it while
        there is room to admit it); None when the next step is a general one. ``size_for_s``
        sizes the plan (default: the next arrival); ``admissions``: the stretch may open with a
        step that admits the waiting requests. The state is not changed: the caller applies the
        block (:meth:`apply_block`), or part of it when a later arrival cuts it sooner.
        """
        size_for = next_arrival_at_s if size_for_s is None else size_for_s
        block = None
        head = None
        # Admissions first: when the queue's head can be admitted now, a stretch that keeps it
        # waiting would stop before its first step.
        admit = self._admissible() if admissions else None
        if admit is not None:
            waiting_after = len(self.scheduler.waiting) - len(admit)
            if waiting_after:
                head = self.scheduler.predictable_head(len(admit))
            if not waiting_after or head is not None:
                # Once every waiting request is admitted, or while the head waits, the stretch
                # may run on past completions, unless a client answers one with a new request.
                block = self._plan(not self.arrivals_follow_finishes, size_for, admit, head)
        if block is None and self.can_fast_forward():
            head = self._blocked_head()
            through = self._through_finishes() or (
                head is not None and not self.arrivals_follow_finishes
            )
            block = self._plan(through, size_for, head=head)
        if block is None:
            return None
        durations, parts = self._durations(block.totals, block.work)
        starts = self._starts(durations)
        # Behind a head that waits for blocks nobody can be admitted: arrivals cut nothing.
        cut_at = np.inf if head is not None else next_arrival_at_s
        length = self.cut_for_arrival(block, starts, cut_at)
        return PlannedBlock(block, starts, durations, parts, length)

    def _plan(
        self,
        through_finishes: bool,
        next_arrival_at_s: float,
        admit: IntArray | None = None,
        head: int | None = None,
    ) -> StepBlock | None:
        return plan_stretch(
            self.scheduler,
            through_finishes,
            next_arrival_at_s,
            admit,
            clock_s=self.clock_s,
            last_step_s=self.recorder.last_duration_s(),
            head=head,
            compiled=self._use_compiled(),
        )

    def _use_compiled(self) -> bool:
        """Whether to plan in the compiled pass: only once the run has shown it is long enough
        to repay loading numba (about 0.5 s of CPU and 100 MB; the compiled pass saves about
        60 µs a stretch with drafts, so it pays after some 10,000 more stretches). Switching
        mid-run changes nothing: both passes plan the same stretches."""
        if not self.compiled:
            return False
        self._num_planned += 1
        return self._num_planned > self.compile_after

    def lowered_now(self) -> cost_kernel.LoweredCost | None:
        """The compiled cost evaluator, built now if it is not yet (None when costing stays in
        Python: off, without numba, or a scenario that is not lowered)."""
        if self._lowered is None and self.compiled_cost:
            saved = self.lower_cost_after
            self.lower_cost_after = -1
            try:
                self._lowered_cost()
            finally:
                self.lower_cost_after = saved
        return self._lowered

    def advance(
        self, next_arrival_at_s: float, waiting_at: Callable[[FloatArray], IntArray]
    ) -> None:
        """Run the next step, or the next stretch of predictable decode steps.

        ``next_arrival_at_s`` is the next arrival not yet released; a stretch never runs past a
        step that starts at or after it while a new request could be admitted. ``waiting_at``
        counts the requests waiting at given times (for the step records).
        """
        planned = self.plan_next(next_arrival_at_s)
        if planned is not None:
            self.apply_planned(planned, planned.length, waiting_at)
            return
        num_waiting = len(self.scheduler.waiting)
        if self.async_scheduling:
            # Arrivals the step cannot see yet wait too, as a stretch's records count them.
            num_waiting = int(waiting_at(np.array([self.clock_s]))[0])
        self.step(num_waiting, next_arrival_at_s, waiting_at)

    def _admissible(self) -> IntArray | None:
        """The waiting requests the scheduler would admit next step, each with its whole prompt,
        while every running sequence decodes: then that step opens a decode stretch
        (:func:`plan_stretch` checks the token budget and the blocks). None if there are none,
        or if the step is not one the planner can follow."""
        s, r = self.scheduler, self.requests
        if not self.fast_forward_enabled or not s.waiting or not self.plan.stretch_admissions:
            return None
        running = s.running
        if (
            len(running)
            and running is not self._decoding
            and not (
                s.decode_mask(running).all()
                and (r.last_emit_step[running] == self.num_steps - 1).all()
            )
        ):
            return None
        count = s.whole_admissions()
        if not count:
            return None
        return np.fromiter(islice(s.waiting, count), dtype=np.int64, count=count)

    def _through_finishes(self) -> bool:
        """Whether a decode stretch may run on past a completion: only when nothing waits to take
        the freed room (or the queue's head waits for the planner to tell when the room suffices)
        and no client answers a completion with a new request."""
        return not self.scheduler.waiting and not self.arrivals_follow_finishes

    def _blocked_head(self) -> int | None:
        """The head of the waiting queue when a stretch runs while it waits (for blocks)."""
        s = self.scheduler
        if s.waiting and len(s.running) < s.config.max_num_seqs:
            return s.predictable_head()
        return None

    def cut_for_arrival(self, block: StepBlock, starts: FloatArray, at_s: float) -> int:
        """How many steps of a planned stretch to keep for an arrival at ``at_s``: none from the
        first that could admit it while there is room (step j starts at ``starts[j]`` and, under
        async scheduling, sees arrivals up to ``starts[j-1]``; the first may be cut too, when
        the stretch was planned ahead of a step's end)."""
        length = block.length
        if at_s == np.inf:
            return length
        seen = starts[:length]
        if self.async_scheduling and length:
            # Step j was scheduled when step j-1 started (the first: what the clock sees now).
            seen = np.concatenate(([self.arrivals_seen_until_s()], starts[: length - 1]))
        # Starts only grow: the steps from the first that sees at_s are late.
        first = int(np.searchsorted(seen, at_s, side="left"))
        if first == length:
            return length
        room = block.num_seqs[first:length] < self.scheduler.config.max_num_seqs
        return first + int(np.argmax(room)) if room.any() else length

    # --- a general step -------------------------------------------------------------------------
    def step(
        self,
        num_waiting: int,
        next_arrival_at_s: float = np.inf,
        waiting_at: Callable[[FloatArray], IntArray] | None = None,
    ) -> None:
        """Schedule and execute one step starting at the current clock.

        With fast-forward on (and ``waiting_at`` given), a step after which every running
        sequence decodes is followed at once by the decode stretch it opens.
        Raise InvariantError if nothing can be scheduled.
        """
        batch = self.scheduler.schedule(self.clock_s)
        while len(batch.ids) == 0 and batch.num_preempted:
            # Every running sequence gave way (a lone one to its own draft slots): the step
            # computes nothing, and the engine schedules again at once, admitting the preempted
            # request for recompute (running is empty now, so this cannot preempt again).
            batch = self.scheduler.schedule(self.clock_s)
        if len(batch.ids) == 0:
            raise InvariantError(
                f"step at t={self.clock_s}: nothing could be scheduled with "
                f"{len(self.scheduler.waiting)} waiting and {len(self.scheduler.running)} running"
            )
        block = general_block(self.scheduler, batch, num_waiting, self.num_steps, self.speculative)
        durations, parts = self._durations(block.totals, block.work)
        self.apply_block(block, 1, self._starts(durations), durations, parts)
        if waiting_at is not None and not (block.finish_step == 0).any():
            # Arrivals during the step are not released yet: the stretch may not admit them.
            planned = self.plan_next(next_arrival_at_s, admissions=False)
            if planned is not None and planned.length > 0:
                self.apply_planned(planned, planned.length, waiting_at)

    # --- applying a block -----------------------------------------------------------------------
    def apply_planned(
        self, planned: PlannedBlock, length: int, waiting_at: Callable[[FloatArray], IntArray]
    ) -> None:
        """Apply the first ``length`` steps of a planned stretch (:meth:`apply_block`)."""
        p = planned
        self.apply_block(p.block, length, p.starts, p.durations, p.parts, waiting_at)

    def can_fast_forward(self) -> bool:
        """Whether the next steps are pure decodes whose shapes are known in advance (a waiting
        request keeps waiting for as long as the planner can tell)."""
        s = self.scheduler
        running = s.running
        if not self.fast_forward_enabled or len(running) == 0:
            return False
        if s.waiting and len(running) < s.config.max_num_seqs and s.predictable_head() is None:
            return False
        if running is self._decoding:
            return True
        r = self.requests
        return bool(
            s.decode_mask(running).all() and (r.last_emit_step[running] == self.num_steps - 1).all()
        )
