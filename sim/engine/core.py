"""The engine core: executes the steps the scheduler chooses and advances the clock.

``step()`` asks the scheduler for one batch and executes it. Between events that change the batch
(an arrival that could be admitted, a completion, a block shortage), every running sequence
decodes and the steps are predictable: :mod:`sim.engine.segment` plans many of them at once, and
the core costs them with one cost-model call. A scheduled step after which the batch is
predictable is costed together with the stretch that follows it. With fast-forward off every step
goes through the scheduler; both ways share the integer shape arithmetic and accumulate time with
a sequential add, so their records agree to the last bit (a test runs both and compares).

Same-time order: a step starting at t sees every arrival with arrival time <= t.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from sim.cost_model import StepCostModel
from sim.engine.drafter import Drafter, DraftWork, StepPlan
from sim.engine.kv_cache import BlockManager
from sim.engine.recorder import StepRecorder
from sim.engine.requests import RequestTable
from sim.engine.scheduler import ScheduledBatch, Scheduler
from sim.engine.segment import Segment, StepTotals, commit_segment, plan_segment
from sim.errors import InvariantError

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


class EngineCore:
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
        self.clock_s = 0.0
        self.num_steps = 0
        self.speculative = len(plan.proposed) > 0 or drafter.name != "none"
        #: Closed-loop clients send a request when one finishes: a stretch must stop there.
        self.arrivals_follow_finishes = False

    # --- shared arithmetic ----------------------------------------------------------------------
    def _durations(
        self, totals: StepTotals, work: DraftWork
    ) -> tuple[FloatArray, dict[str, FloatArray]]:
        parts = self.cost_model.breakdown(totals.shape())
        if self.speculative:
            parts["draft_s"] = np.asarray(self.drafter.draft_time_s(work), dtype=np.float64)
        # The order of the sum is fixed (BREAKDOWN_KEYS) so both paths round identically.
        total = (
            parts["fixed_s"]
            + parts["linear_s"]
            + parts["attention_s"]
            + parts["allreduce_s"]
            + parts["sampling_s"]
            + parts["draft_s"]
        )
        return total, parts

    def _starts(self, durations: FloatArray) -> FloatArray:
        """Start of each step and the end of the last: a sequential sum from the clock."""
        return np.add.accumulate(np.concatenate(([self.clock_s], durations)))

    # --- one engine step, or a stretch of them --------------------------------------------------
    def advance(
        self, next_arrival_at_s: float, waiting_at: Callable[[FloatArray], IntArray]
    ) -> None:
        """Run the next step, or the next stretch of predictable decode steps.

        ``next_arrival_at_s`` is the next arrival not yet released; a stretch never runs past a
        step that starts at or after it while a new request could be admitted. ``waiting_at``
        counts the requests waiting at given times (for the step records).
        """
        segment = None
        if self.can_fast_forward():
            segment = plan_segment(self, self._through_finishes(), next_arrival_at_s)
        else:
            admit = self._admissible()
            if admit is not None:
                # Once admitted, nothing waits: the stretch may run on past completions.
                through = not self.arrivals_follow_finishes
                segment = plan_segment(self, through, next_arrival_at_s, admit)
        if segment is not None:
            durations, parts = self._durations(segment.totals, segment.work)
            starts = self._starts(durations)
            length = self._cut_for_arrival(segment, starts, next_arrival_at_s, 0)
            commit_segment(self, segment, length, starts, durations, parts, waiting_at)
            self._check()
            return
        self.step(len(self.scheduler.waiting), next_arrival_at_s, waiting_at)

    def _admissible(self) -> IntArray | None:
        """The waiting requests, if the scheduler would admit all of them next step and prefill
        each whole prompt while every running sequence decodes: then that step opens a decode
        stretch (:func:`plan_segment` checks the token budget and the blocks)."""
        s, r = self.scheduler, self.requests
        if not self.fast_forward_enabled or not s.waiting or not s.config.mixed_batches:
            return None  # without mixed batches an admission is a prefill-only step
        if len(s.running) + len(s.waiting) > s.config.max_num_seqs:
            return None
        waiting = np.fromiter(s.waiting, dtype=np.int64, count=len(s.waiting))
        if (r.num_emitted[waiting] > 0).any() or (r.num_computed_tokens[waiting] > 0).any():
            return None  # a preempted request recomputes prompt and output: the general path
        if self.kv.caching and (self.kv.hash_limit_tokens[waiting] > 0).any():
            return None  # a prefix-cache hit shortens its prefill: the scheduler's path
        running = s.running
        if len(running) and not (
            s.decode_mask(running).all() and (r.last_emit_step[running] == self.num_steps - 1).all()
        ):
            return None
        return waiting

    def _through_finishes(self) -> bool:
        """Whether a decode stretch may run on past a completion: only when nothing waits to take
        the freed room and no client answers a completion with a new request."""
        return not self.scheduler.waiting and not self.arrivals_follow_finishes

    def _cut_for_arrival(
        self, segment: Segment, starts: FloatArray, next_arrival_at_s: float, offset: int
    ) -> int:
        """How many steps of a decode stretch to keep: none that starts at or after the next
        arrival while there is room to admit it. Step j of the stretch starts at
        ``starts[offset + j]``; with ``offset`` 0 its first step starts now and always runs."""
        lo = 1 - offset
        length = segment.length
        late = (starts[offset + lo : offset + length] >= next_arrival_at_s) & (
            segment.num_seqs[lo:length] < self.scheduler.config.max_num_seqs
        )
        return lo + int(np.argmax(late)) if late.any() else length

    def step(
        self,
        num_waiting: int,
        next_arrival_at_s: float = np.inf,
        waiting_at: Callable[[FloatArray], IntArray] | None = None,
    ) -> None:
        """Schedule and execute one step starting at the current clock.

        With fast-forward on (and ``waiting_at`` given), a step after which every running
        sequence decodes is costed together with the decode stretch that follows it.
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
        r = self.requests
        ids, take = batch.ids, batch.num_new_tokens
        is_dec = batch.is_decode
        computed = r.num_computed_tokens[ids]
        known = r.known_tokens(ids)
        remaining = r.output_tokens[ids] - r.num_emitted[ids]
        completes = ~is_dec & (computed + take == known)
        emitted = np.where(
            is_dec, np.minimum(batch.accepted + 1, remaining), np.where(completes, 1, 0)
        )
        finishing = (emitted > 0) & (emitted == remaining)
        drafting = (is_dec | completes) & ~finishing
        new_computed = np.where(is_dec, computed + emitted, computed + take)

        num_tokens = int(take.sum())
        num_decode = int(is_dec.sum())
        num_decode_tokens = int((take * is_dec).sum())
        totals = StepTotals(
            num_seqs=np.array([len(ids)]),
            num_tokens=np.array([num_tokens]),
            num_logit_tokens=np.array([num_decode_tokens + int(completes.sum())]),
            kv_read_tokens=np.array([int(computed.sum()) + num_tokens]),
            attention_pairs_x2=np.array([(take * (2 * computed + take + 1)).sum()]),
        )
        if self.speculative:
            work = self._draft_work(batch, ids, take, is_dec, emitted, drafting, new_computed)
        else:
            zero = np.zeros(1, dtype=np.int64)
            work = DraftWork(zero, zero, zero, zero, zero)
        kv_used = self.kv.num_used  # scratch blocks are already out of the free pool

        # The step's effects that do not depend on its duration.
        emitting = emitted > 0
        prior = r.num_emitted[ids]
        first = emitting & (prior == 0)
        later = emitting & (prior > 0)
        regular = later & (r.last_emit_step[ids] == self.num_steps - 1)
        irregular = ids[later & ~regular]
        r.num_emitted[ids] += emitted
        r.num_computed_tokens[ids] = new_computed
        r.num_decode_steps[ids] += is_dec
        r.num_drafted[ids] += batch.proposed
        r.num_accepted[ids] += batch.accepted
        r.last_emit_step[ids[emitting]] = self.num_steps
        self.kv.release_scratch(batch.scratch_blocks)
        self.kv.set_logical(ids, new_computed)
        if self.scheduler.config.rollback_policy == "in_place":
            self.kv.truncate(ids[is_dec])
        else:
            self.kv.allocate(ids[is_dec], new_computed[is_dec])
        self.num_steps += 1

        # Cost the step, with the decode stretch that follows when it is predictable now.
        segment = None
        if waiting_at is not None and not finishing.any() and self.can_fast_forward():
            segment = plan_segment(self, self._through_finishes(), next_arrival_at_s)
        if segment is not None:
            totals = _concat_totals(totals, segment.totals)
            if self.speculative:
                work = _concat_work(work, segment.work)
            else:
                zeros = np.zeros(1 + segment.length, dtype=np.int64)
                work = DraftWork(zeros, zeros, zeros, zeros, zeros)
        durations, parts = self._durations(totals, work)
        starts = self._starts(durations)
        end = float(starts[1])

        r.first_token_at_s[ids[first]] = end
        self.recorder.add_irregular_itl(end - r.last_emit_at_s[irregular], end)
        r.last_emit_at_s[ids[emitting]] = end
        self.recorder.append(
            {
                "start_at_s": starts[:1],
                "duration_s": durations[:1],
                **{key: value[:1] for key, value in parts.items()},
                "num_seqs": len(ids),
                "num_decode_seqs": num_decode,
                "num_prefill_seqs": len(ids) - num_decode,
                "num_tokens": num_tokens,
                "num_prefill_tokens": num_tokens - num_decode_tokens,
                "num_emitted_tokens": int(emitted.sum()),
                "num_draft_tokens": int(batch.proposed.sum()),
                "num_accepted_tokens": int(batch.accepted.sum()),
                "kv_blocks_used": kv_used,
                "num_waiting": num_waiting,
                "num_regular_itl": int(regular.sum()),
            }
        )
        self.clock_s = end
        self.finish(ids[finishing], end)
        self._check()
        if segment is not None and waiting_at is not None:
            length = self._cut_for_arrival(segment, starts, next_arrival_at_s, 1)
            if length > 0:
                commit_segment(
                    self, segment, length, starts, durations, parts, waiting_at, offset=1
                )
                self._check()

    def _draft_work(
        self,
        batch: ScheduledBatch,
        ids: IntArray,
        take: IntArray,
        is_dec: NDArray[np.bool_],
        emitted: IntArray,
        drafting: NDArray[np.bool_],
        new_computed: IntArray,
    ) -> DraftWork:
        """The drafting a general step implies (decodes that go on, prefills that complete)."""
        next_proposed, _ = self.plan.lookup(ids, self.requests.num_decode_steps[ids] + is_dec)
        full = drafting & is_dec & (batch.proposed > 0) & (batch.accepted == batch.proposed)
        return DraftWork(
            num_seqs=np.array([drafting.sum()]),
            num_new_tokens=np.array([(np.where(is_dec, emitted, take) * drafting).sum()]),
            context_tokens=np.array([(new_computed * drafting).sum()]),
            num_full_accept=np.array([full.sum()]),
            num_proposed=np.array([(next_proposed * drafting).sum()]),
        )

    def finish(self, ids: IntArray, end: float) -> None:
        """Retire the requests ``ids`` that emitted their last token in a step ending at ``end``."""
        if len(ids) == 0:
            return
        self.requests.finished_at_s[ids] = end
        self.scheduler.finish(ids)
        if self.on_finish is not None:
            self.on_finish(ids, end)

    def finish_at(self, ids: IntArray, ends: FloatArray) -> None:
        """Retire the requests ``ids``, each at its own ``ends`` time (within one stretch)."""
        self.requests.finished_at_s[ids] = ends
        self.scheduler.finish(ids)
        if self.on_finish is not None:
            # In time order, so closed-loop clients and progress see completions as they happen.
            for end in np.unique(ends).tolist():
                self.on_finish(ids[ends == end], end)

    def _check(self) -> None:
        if self.check:
            self.scheduler.check_invariants()

    def can_fast_forward(self) -> bool:
        """Whether the next steps are pure decodes whose shapes are known in advance."""
        s = self.scheduler
        running = s.running
        if not self.fast_forward_enabled or len(running) == 0:
            return False
        if s.waiting and len(running) < s.config.max_num_seqs:
            return False
        r = self.requests
        return bool(
            s.decode_mask(running).all() and (r.last_emit_step[running] == self.num_steps - 1).all()
        )


def _concat_totals(a: StepTotals, b: StepTotals) -> StepTotals:
    return StepTotals(
        *(np.concatenate((x, y)) for x, y in zip(astuple_totals(a), astuple_totals(b), strict=True))
    )


def astuple_totals(t: StepTotals) -> tuple[IntArray, ...]:
    """The fields of a :class:`StepTotals`, in order."""
    return (t.num_seqs, t.num_tokens, t.num_logit_tokens, t.kv_read_tokens, t.attention_pairs_x2)


def _concat_work(a: DraftWork, b: DraftWork) -> DraftWork:
    return DraftWork(
        np.concatenate((a.num_seqs, b.num_seqs)),
        np.concatenate((a.num_new_tokens, b.num_new_tokens)),
        np.concatenate((a.context_tokens, b.context_tokens)),
        np.concatenate((a.num_full_accept, b.num_full_accept)),
        np.concatenate((a.num_proposed, b.num_proposed)),
    )
