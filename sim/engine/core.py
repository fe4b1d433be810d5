"""The engine core: executes steps chosen by the scheduler and advances the clock.

Two paths produce identical records. ``step()`` asks the scheduler for one batch and executes it.
``fast_forward()`` handles the common stretch between events that change the batch (an arrival
that could be admitted, a completion, a block shortage): while every running sequence decodes,
each step's shape is known in advance from the sequences' lengths and their acceptance plans, so
many steps are costed and applied at once with numpy. Both paths share the shape arithmetic
(integer sums, then one cost-model call) and accumulate time with a sequential add, so the
numbers agree to the last bit; a test runs both and compares.

Same-time order: a step starting at t sees every arrival with arrival time <= t.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from sim.cost_model import BREAKDOWN_KEYS, StepCostModel, StepShape
from sim.engine.drafter import Drafter, DraftWork, StepPlan
from sim.engine.kv_cache import BlockManager, blocks_for
from sim.engine.recorder import StepRecorder
from sim.engine.requests import RequestTable
from sim.engine.scheduler import ScheduledBatch, Scheduler
from sim.errors import InvariantError

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

#: Steps costed per fast-forward chunk; a segment may span several chunks.
FAST_FORWARD_CHUNK = 64


@dataclass(frozen=True)
class StepTotals:
    """Integer aggregates of a step (or one entry per step of a segment)."""

    num_seqs: IntArray
    num_tokens: IntArray
    num_logit_tokens: IntArray
    kv_read_tokens: IntArray
    attention_pairs_x2: IntArray

    def shape(self) -> StepShape:
        return StepShape(
            num_seqs=self.num_seqs,
            num_tokens=self.num_tokens,
            num_logit_tokens=self.num_logit_tokens,
            kv_read_tokens=self.kv_read_tokens,
            attention_pairs=self.attention_pairs_x2 / 2.0,
        )


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

    # --- the general path ---------------------------------------------------------------------
    def step(self, num_waiting: int) -> None:
        """Schedule and execute one step starting at the current clock."""
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

        totals = StepTotals(
            num_seqs=np.array([len(ids)]),
            num_tokens=np.array([take.sum()]),
            num_logit_tokens=np.array([np.where(is_dec, take, completes).sum()]),
            kv_read_tokens=np.array([(computed + take).sum()]),
            attention_pairs_x2=np.array([(take * (2 * computed + take + 1)).sum()]),
        )
        if self.speculative:
            work = self._draft_work(batch, ids, take, is_dec, emitted, drafting, new_computed)
        else:
            zero = np.zeros(1, dtype=np.int64)
            work = DraftWork(zero, zero, zero, zero, zero)
        durations, parts = self._durations(totals, work)
        starts = self._starts(durations)
        end = float(starts[-1])
        kv_used = self.kv.num_used  # scratch blocks are already out of the free pool

        # Apply: emissions, ITL, KV commit/rollback, completions.
        emitting = emitted > 0
        prior = r.num_emitted[ids]
        first = emitting & (prior == 0)
        r.first_token_at_s[ids[first]] = end
        later = emitting & (prior > 0)
        regular = later & (r.last_emit_step[ids] == self.num_steps - 1)
        irregular = later & ~regular
        self.recorder.add_irregular_itl(end - r.last_emit_at_s[ids[irregular]], end)
        r.num_emitted[ids] += emitted
        r.num_computed_tokens[ids] = new_computed
        r.num_decode_steps[ids] += is_dec
        r.num_drafted[ids] += batch.proposed
        r.num_accepted[ids] += batch.accepted
        r.last_emit_at_s[ids[emitting]] = end
        r.last_emit_step[ids[emitting]] = self.num_steps
        self.kv.release_scratch(batch.scratch_blocks)
        self.kv.set_logical(ids, new_computed)
        if self.scheduler.config.rollback_policy == "in_place":
            self.kv.truncate(ids[is_dec])
        else:
            self.kv.allocate(ids[is_dec], new_computed[is_dec])

        self.recorder.append(
            {
                "start_at_s": starts[:-1],
                "duration_s": durations,
                **parts,
                "num_seqs": len(ids),
                "num_decode_seqs": int(is_dec.sum()),
                "num_prefill_seqs": int((~is_dec).sum()),
                "num_tokens": int(take.sum()),
                "num_prefill_tokens": int(take[~is_dec].sum()),
                "num_emitted_tokens": int(emitted.sum()),
                "num_draft_tokens": int(batch.proposed.sum()),
                "num_accepted_tokens": int(batch.accepted.sum()),
                "kv_blocks_used": kv_used,
                "num_waiting": num_waiting,
                "num_regular_itl": int(regular.sum()),
            }
        )
        self.clock_s = end
        self.num_steps += 1
        self._finish(ids[finishing], end)
        if self.check:
            self.scheduler.check_invariants()

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

    def _finish(self, ids: IntArray, end: float) -> None:
        if len(ids) == 0:
            return
        self.requests.finished_at_s[ids] = end
        self.scheduler.finish(ids)
        if self.on_finish is not None:
            self.on_finish(ids, end)

    # --- the fast path ------------------------------------------------------------------------
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

    def fast_forward(
        self, next_arrival_at_s: float, waiting_at: Callable[[FloatArray], IntArray]
    ) -> int:
        """Execute up to FAST_FORWARD_CHUNK pure-decode steps at once; return how many ran.

        Stops after the first step in which a sequence finishes, before a step that would need
        more KV blocks or token budget than there are, and before the first step that starts at or
        after ``next_arrival_at_s`` when a new request could be admitted.
        """
        s, r, kv = self.scheduler, self.requests, self.kv
        ids = s.running
        computed0 = r.num_computed_tokens[ids]
        remaining = r.output_tokens[ids] - r.num_emitted[ids]
        arrival_matters = len(ids) < s.config.max_num_seqs and next_arrival_at_s < np.inf
        # Every step emits at least one token per sequence, so the first completion comes within
        # min(remaining) steps; an arrival, within about (gap / last step) steps. Costing more
        # steps than that would be wasted work (a segment that ends early simply continues).
        m = min(FAST_FORWARD_CHUNK, int(remaining.min()))
        extra = s.config.extra_tokens_per_decode
        if not len(self.plan.proposed):
            return self._fast_forward_plain(
                ids, computed0, m, 1 + extra, next_arrival_at_s, arrival_matters, waiting_at
            )
        j = np.arange(m)
        if len(self.plan.proposed):
            position = (self.plan.offsets[ids] + r.num_decode_steps[ids])[:, None] + np.arange(
                m + 1
            )
            inside = position < self.plan.offsets[ids + 1][:, None]
            safe = np.where(inside, position, 0)
            proposed_all = np.where(inside, self.plan.proposed[safe], 0).astype(np.int64)
            accepted = np.where(inside[:, :m], self.plan.accepted[safe[:, :m]], 0).astype(np.int64)
            proposed = proposed_all[:, :m]
            raw = accepted + 1
            cum = np.cumsum(raw, axis=1)
            before = cum - raw
            rem = remaining[:, None]
            emitted = np.minimum(raw, np.maximum(rem - before, 0))
            finishing = cum >= rem
        else:
            proposed_all = proposed = accepted = np.zeros((len(ids), m + 1), dtype=np.int64)
            proposed, accepted = proposed[:, :m], accepted[:, :m]
            before = np.broadcast_to(j, (len(ids), m))
            emitted = np.ones((len(ids), m), dtype=np.int64)
            finishing = (j + 1)[None, :] >= remaining[:, None]
        computed = computed0[:, None] + before
        take = (1 + extra) + proposed
        tokens = take.sum(axis=0)
        if s.config.rollback_policy == "in_place":
            blocks = blocks_for(computed + take, kv.block_size).sum(axis=0)
        else:
            blocks = (
                blocks_for(computed + 1, kv.block_size) + blocks_for(take - 1, kv.block_size)
            ).sum(axis=0)
        capacity = kv.num_free + int(kv.held[ids].sum())
        ok = (tokens <= s.config.max_num_batched_tokens) & (blocks <= capacity)
        length = m if ok.all() else int(np.argmin(ok))
        any_finish: NDArray[np.bool_] = np.asarray(finishing.any(axis=0))
        if any_finish[:length].any():
            length = int(np.argmax(any_finish)) + 1
        if length == 0:
            return 0
        if length < m:
            proposed, accepted, emitted = (
                proposed[:, :length],
                accepted[:, :length],
                emitted[:, :length],
            )
            computed, take, finishing = (
                computed[:, :length],
                take[:, :length],
                finishing[:, :length],
            )
            tokens, blocks = tokens[:length], blocks[:length]
        drafting = ~finishing
        new_computed = computed + emitted
        totals = StepTotals(
            num_seqs=np.full(length, len(ids), dtype=np.int64),
            num_tokens=tokens,
            num_logit_tokens=tokens,
            kv_read_tokens=(computed + take).sum(axis=0),
            attention_pairs_x2=(2 * take * computed + take * (take + 1)).sum(axis=0),
        )
        work = DraftWork(
            num_seqs=drafting.sum(axis=0),
            num_new_tokens=(emitted * drafting).sum(axis=0),
            context_tokens=(new_computed * drafting).sum(axis=0),
            num_full_accept=(drafting & (proposed > 0) & (accepted == proposed)).sum(axis=0),
            num_proposed=(proposed_all[:, 1 : length + 1] * drafting).sum(axis=0),
        )
        durations, parts = self._durations(totals, work)
        starts = self._starts(durations)
        # Cut before the first step that starts once a new request could be admitted.
        if arrival_matters:
            late = starts[1:length] >= next_arrival_at_s
            if late.any():
                length = int(np.argmax(late)) + 1
                starts, durations = starts[: length + 1], durations[:length]
                parts = {k: v[:length] for k, v in parts.items()}
        return self._commit_segment(
            ids,
            length,
            starts,
            durations,
            parts,
            totals,
            emitted,
            proposed,
            accepted,
            new_computed,
            finishing,
            blocks,
            waiting_at,
        )

    def _fast_forward_plain(
        self,
        ids: IntArray,
        computed0: IntArray,
        m: int,
        take: int,
        next_arrival_at_s: float,
        arrival_matters: bool,
        waiting_at: Callable[[FloatArray], IntArray],
    ) -> int:
        """:meth:`fast_forward` without speculation: every sequence computes ``take`` tokens and
        emits one per step, so the step aggregates are closed forms in the step index.

        The first completion is at step ``m - 1`` exactly when ``m`` equals the smallest remaining
        output (the caller chose ``m`` no larger).
        """
        s, r, kv = self.scheduler, self.requests, self.kv
        num = len(ids)
        j = np.arange(m)
        sum_c0 = int(computed0.sum())
        # computed_ij = c0_i + j; tokens per step num·take; every sum is an exact integer.
        context = sum_c0 + num * j
        if s.config.rollback_policy == "in_place" or take == 1:
            blocks = blocks_for(computed0[:, None] + (j + take), kv.block_size).sum(axis=0)
        else:
            blocks = blocks_for(computed0[:, None] + (j + 1), kv.block_size).sum(
                axis=0
            ) + num * int(blocks_for(take - 1, kv.block_size))
        capacity = kv.num_free + int(kv.held[ids].sum())
        tokens_per_step = num * take
        if tokens_per_step > s.config.max_num_batched_tokens:
            return 0
        fits = blocks <= capacity
        length = m if fits.all() else int(np.argmin(fits))
        if length == 0:
            return 0
        remaining = r.output_tokens[ids] - r.num_emitted[ids]
        context, blocks = context[:length], blocks[:length]
        tokens = np.full(length, tokens_per_step, dtype=np.int64)
        totals = StepTotals(
            num_seqs=np.full(length, num, dtype=np.int64),
            num_tokens=tokens,
            num_logit_tokens=tokens,
            kv_read_tokens=context + tokens_per_step,
            attention_pairs_x2=2 * take * context + num * take * (take + 1),
        )
        zeros = np.zeros(length, dtype=np.int64)
        durations, parts = self._durations(totals, DraftWork(zeros, zeros, zeros, zeros, zeros))
        starts = self._starts(durations)
        if arrival_matters:
            late = starts[1:length] >= next_arrival_at_s
            if late.any():
                length = int(np.argmax(late)) + 1
                starts, durations = starts[: length + 1], durations[:length]
                parts = {k: v[:length] for k, v in parts.items()}
        end = float(starts[-1])
        new_computed = computed0 + length
        r.num_emitted[ids] += length
        r.num_computed_tokens[ids] = new_computed
        r.num_decode_steps[ids] += length
        r.last_emit_at_s[ids] = end
        r.last_emit_step[ids] = self.num_steps + length - 1
        kv.set_logical(ids, new_computed)
        keep = blocks_for(new_computed, kv.block_size)
        kv.num_free += int(kv.held[ids].sum() - keep.sum())
        kv.held[ids] = keep
        self.recorder.append(
            {
                "start_at_s": starts[:-1],
                "duration_s": durations,
                **parts,
                "num_seqs": num,
                "num_decode_seqs": num,
                "num_prefill_seqs": 0,
                "num_tokens": tokens_per_step,
                "num_prefill_tokens": 0,
                "num_emitted_tokens": num,
                "num_draft_tokens": 0,
                "num_accepted_tokens": 0,
                "kv_blocks_used": blocks[:length],
                "num_waiting": waiting_at(starts[:-1]),
                "num_regular_itl": num,
            }
        )
        self.clock_s = end
        self.num_steps += length
        self._finish(ids[remaining == length], end)
        if self.check:
            self.scheduler.check_invariants()
        return length

    def _commit_segment(
        self,
        ids: IntArray,
        length: int,
        starts: FloatArray,
        durations: FloatArray,
        parts: dict[str, FloatArray],
        totals: StepTotals,
        emitted: IntArray,
        proposed: IntArray,
        accepted: IntArray,
        new_computed: IntArray,
        finishing: NDArray[np.bool_],
        blocks: IntArray,
        waiting_at: Callable[[FloatArray], IntArray],
    ) -> int:
        r, kv = self.requests, self.kv
        emitted, proposed, accepted = (
            emitted[:, :length],
            proposed[:, :length],
            accepted[:, :length],
        )
        ends = starts[1:]
        end = float(ends[-1])
        r.num_emitted[ids] += emitted.sum(axis=1)
        r.num_computed_tokens[ids] = new_computed[:, length - 1]
        r.num_decode_steps[ids] += length
        r.num_drafted[ids] += proposed.sum(axis=1)
        r.num_accepted[ids] += accepted.sum(axis=1)
        r.last_emit_at_s[ids] = end
        r.last_emit_step[ids] = self.num_steps + length - 1
        # KV: each sequence ends holding exactly the blocks of its committed tokens.
        kv.set_logical(ids, new_computed[:, length - 1])
        keep = blocks_for(new_computed[:, length - 1], kv.block_size)
        kv.num_free += int(kv.held[ids].sum() - keep.sum())
        kv.held[ids] = keep
        num_seqs = len(ids)
        self.recorder.append(
            {
                "start_at_s": starts[:-1],
                "duration_s": durations,
                **{k: parts[k][:length] for k in BREAKDOWN_KEYS},
                "num_seqs": num_seqs,
                "num_decode_seqs": num_seqs,
                "num_prefill_seqs": 0,
                "num_tokens": totals.num_tokens[:length],
                "num_prefill_tokens": 0,
                "num_emitted_tokens": emitted.sum(axis=0),
                "num_draft_tokens": proposed.sum(axis=0),
                "num_accepted_tokens": accepted.sum(axis=0),
                "kv_blocks_used": blocks[:length],
                "num_waiting": waiting_at(starts[:-1]),
                "num_regular_itl": num_seqs,
            }
        )
        self.clock_s = end
        self.num_steps += length
        done = finishing[:, length - 1]
        self._finish(ids[done], end)
        if self.check:
            self.scheduler.check_invariants()
        return length
