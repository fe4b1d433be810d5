"""Applying the first steps of a :class:`~sim.engine.block.StepBlock` to a node: every change to
its state goes through :meth:`BlockApplication.apply_block`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from sim.engine.block import StepBlock
from sim.engine.drafter import StepPlan
from sim.engine.kv_cache import BlockManager
from sim.engine.recorder import StepRecorder
from sim.engine.requests import RequestTable
from sim.engine.scheduler import Scheduler
from sim.errors import InvariantError

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


class BlockApplication:
    """Applying a block's steps, for :class:`~sim.engine.core.EngineCore`: the requests' progress,
    the scheduler's and the KV ledger's commands, the step records, the clock and the finishes."""

    scheduler: Scheduler
    requests: RequestTable
    kv: BlockManager
    plan: StepPlan
    recorder: StepRecorder
    on_finish: Callable[[IntArray, float], None] | None
    check: bool
    clock_s: float
    num_steps: int
    last_step_start_s: float
    last_step_end_s: float
    _decoding: IntArray | None

    def apply_block(
        self,
        block: StepBlock,
        length: int,
        starts: FloatArray,
        durations: FloatArray,
        parts: dict[str, FloatArray],
        waiting_at: Callable[[FloatArray], IntArray] | None = None,
    ) -> None:
        """Apply the first ``length`` steps of ``block``, timed by ``starts`` (each step's start
        and the last one's end, from the clock) with ``durations`` and ``parts``: the requests'
        progress, the admissions of a stretch's first step (the scheduler's command), the KV
        blocks (the block manager's commands), the step records, the clock, and the requests
        that finished. ``waiting_at`` counts the requests waiting at given times (a stretch's
        records; a general step carries its own)."""
        r, kv = self.requests, self.kv
        ids = block.ids
        step0 = self.num_steps
        end = starts[1]
        last_step = np.minimum(block.finish_step, length - 1)
        if block.emitted is None:
            # No speculation: one token a step until the last.
            emitted_per_row = last_step + 1
            emitted_per_step: IntArray = block.num_seqs[:length]
            drafted_per_step: IntArray | int = 0
            accepted_per_step: IntArray | int = 0
            spec_k: IntArray | int = 0
        else:
            assert block.proposed is not None and block.accepted is not None
            emitted = block.emitted[:, :length]
            proposed, accepted = block.proposed[:, :length], block.accepted[:, :length]
            emitted_per_row = emitted.sum(axis=1)
            emitted_per_step = emitted.sum(axis=0)
            drafted_per_step, accepted_per_step = proposed.sum(axis=0), accepted.sum(axis=0)
            spec_k = proposed.max(axis=0, initial=0)
            self.plan.observe(ids, proposed, accepted)
            r.num_drafted[ids] += proposed.sum(axis=1)
            r.num_accepted[ids] += accepted.sum(axis=1)
        if block.is_general:
            # One step: the scheduler admitted, chunked and preempted already.
            assert block.advanced is not None and block.is_decode is not None
            assert block.emitted is not None
            prior = r.num_emitted[ids]
            emits_first = block.emitted[:, 0] > 0
            new_computed = block.computed0 + block.advanced[:, 0]
            r.num_decode_steps[ids] += block.is_decode[:, 0]
            emitting = ids[emits_first]
            later = emits_first & (prior > 0)
            irregular = ids[later & (r.last_emit_step[ids] != step0 - 1)]
            self.recorder.add_irregular_itl(end - r.last_emit_at_s[irregular], float(end))
            r.first_token_at_s[ids[emits_first & (prior == 0)]] = end
            r.last_emit_at_s[emitting] = end
            r.last_emit_step[emitting] = step0
            kv.release_scratch(block.scratch_blocks)
            assert block.num_waiting is not None
            num_waiting = block.num_waiting
        else:
            # A stretch: every row emits in each of its steps until its last (checked by the
            # planner: every running sequence decoded in the step before, or is admitted now).
            new_computed = block.computed0 + emitted_per_row
            decode_steps = last_step + 1
            if block.num_admitted:
                admitted = ids[len(ids) - block.num_admitted :]
                self.scheduler.admit_planned(admitted, float(starts[0]))
                r.first_token_at_s[admitted] = end
                decode_steps[len(ids) - block.num_admitted :] -= 1  # step 0 was their prefill
            r.num_decode_steps[ids] += decode_steps
            r.last_emit_at_s[ids] = starts[last_step + 1]
            r.last_emit_step[ids] = step0 + last_step
            assert waiting_at is not None
            num_waiting = waiting_at(starts[:length])
            if block.num_admitted:
                # Step 0 also prefilled the admitted requests, which were waiting when it started.
                num_waiting = num_waiting.copy()
                num_waiting[0] += block.num_admitted
        r.num_emitted[ids] += emitted_per_row
        r.num_computed_tokens[ids] = new_computed
        self.recorder.append(
            {
                "start_at_s": starts[:length],
                "duration_s": durations[:length],
                **{key: value[:length] for key, value in parts.items()},
                "num_seqs": block.num_seqs[:length],
                "num_decode_seqs": block.num_decode_seqs[:length],
                "num_prefill_seqs": block.num_prefill_seqs[:length],
                "num_tokens": block.totals.num_tokens[:length],
                "num_prefill_tokens": block.num_prefill_tokens[:length],
                "num_emitted_tokens": emitted_per_step,
                "num_draft_tokens": drafted_per_step,
                "spec_k": spec_k,
                "num_accepted_tokens": accepted_per_step,
                "kv_blocks_used": block.kv_blocks_used[:length],
                "num_waiting": num_waiting,
                "num_regular_itl": block.num_regular_itl[:length],
            }
        )
        self.clock_s = float(starts[length])
        self.num_steps += length
        if length:
            # When the last step applied ran (async scheduling reads it).
            self.last_step_start_s = float(starts[length - 1])
            self.last_step_end_s = self.clock_s
        # KV: each sequence ends holding exactly the blocks of its committed tokens. Those that
        # finished before the last step leave first, in time order: they need no settling (the
        # planner stops at the first that would name blocks for the prefix cache), and the last
        # step proved room for the others alone.
        finish_step = block.finish_step
        first_finish = min(finish_step.tolist())
        if first_finish < length - 1:
            early = finish_step < length - 1
            self.finish_at(ids[early], starts[finish_step[early] + 1])
            stay = ~early
            kv.settle(ids[stay], new_computed[stay])
            ids, finish_step = ids[stay], finish_step[stay]
        else:
            kv.settle(ids, new_computed)
        if first_finish <= length - 1:
            self.finish(ids[finish_step == length - 1], self.clock_s)
        # After a stretch every sequence still running decodes and emitted in its last step.
        self._decoding = None if block.is_general or length == 0 else self.scheduler.running
        self._check()

    def resume_prefilled(self, ids: IntArray, first_token_at_s: FloatArray) -> None:
        """Take over requests ``ids`` whose prompts another engine prefilled (a disaggregated
        prefill replica): the prompt's KV and the first token, emitted at ``first_token_at_s``,
        arrive together, so decoding goes on from the first token (a one-token step computes its
        KV and emits the second). Call it before the requests are scheduled."""
        r = self.requests
        r.num_emitted[ids] = 1
        r.num_computed_tokens[ids] = r.prompt_tokens[ids]
        r.first_token_at_s[ids] = first_token_at_s
        r.last_emit_at_s[ids] = first_token_at_s

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
        if self.on_finish is None:
            return
        # In time order, so closed-loop clients and progress see completions as they happen:
        # one call per distinct time, its requests in their order in ``ids``.
        if len(ids) == 1:
            self.on_finish(ids, float(ends[0]))
            return
        order = np.argsort(ends, kind="stable")
        ends_sorted = ends[order].tolist()
        ids = ids[order]
        first = 0
        for i in range(1, len(ends_sorted) + 1):
            if i == len(ends_sorted) or ends_sorted[i] != ends_sorted[first]:
                self.on_finish(ids[first:i], ends_sorted[first])
                first = i

    def _check(self) -> None:
        if self.check:
            self.scheduler.check_invariants()
            decoding = self._decoding
            if (
                decoding is not None
                and len(decoding)
                and not (
                    self.scheduler.decode_mask(decoding).all()
                    and (self.requests.last_emit_step[decoding] == self.num_steps - 1).all()
                )
            ):
                raise InvariantError("a sequence a stretch left running is not decoding")
