"""The compiled loop's kernel: a lone node's steps, one after another, in one numba function.

:mod:`sim.engine.compiled_loop` says what it covers and how it stays identical to the Python
path, and hands it the node's state. :func:`_loop` is plain Python; :func:`compiled` compiles it
and the helpers it calls with numba, the machine code cached on disk. The loop is one function
on purpose: the scheduler's part as a function of its own, called each step with two dozen
arrays, made the 10,000-request loop a fifth slower (0.23 s against 0.19 s of CPU, measured back
to back), inlined or not.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sim.engine import cost_eval, policy_kernel
from sim.engine.recorder import STEP_COLUMNS

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

#: What the loop returns: every arrival served; the step records buffer is full; the
#: next step needs the Python path; the next step's cost needs table entries priced first.
DONE, FULL, PYTHON, MISSING = 0, 1, 2, 3

#: Request states (as :mod:`sim.engine.requests` numbers them).
_WAITING, _RUNNING, _FINISHED = 1, 2, 3

#: The float record columns, in the order of the loop's float output rows.
FLOAT_COLUMNS = (
    "start_at_s",
    "duration_s",
    "fixed_s",
    "linear_s",
    "attention_s",
    "allreduce_s",
    "sampling_s",
    "draft_s",
)
#: The integer record columns, in the order of the loop's integer output rows.
INT_COLUMNS = (
    "num_seqs",
    "num_decode_seqs",
    "num_prefill_seqs",
    "num_tokens",
    "num_prefill_tokens",
    "num_emitted_tokens",
    "num_draft_tokens",
    "spec_k",
    "num_accepted_tokens",
    "kv_blocks_used",
    "num_waiting",
    "num_regular_itl",
)
assert set(FLOAT_COLUMNS + INT_COLUMNS) == set(STEP_COLUMNS)

# Slots of the loop's integer state.
(
    _FREE,
    _STEPS,
    _NEXT,
    _QHEAD,
    _QTAIL,
    _RUNNING_N,
    _FINISHED_N,
    _RECORDS,
    _ITL,
    _MISSING,
    _HEAP_N,
    _STARTED,
) = range(12)
# Slots of its configuration.
_MAX_SEQS, _BUDGET, _CHUNKED, _EXTRA, _BLOCK, _BLOCKS = range(6)
_PLAN, _SPECULATIVE, _MAX_STEPS, _CLOSED = range(6, 10)


def _lookup(offsets: IntArray, proposed: Any, accepted: Any, request: int, step: int) -> tuple:
    """The ``step``-th verify step's drafts of ``request``: proposed, accepted (zero past its
    plan), as :meth:`StepPlan.lookup` reads them."""
    position = offsets[request] + step
    if position < offsets[request + 1]:
        return int(proposed[position]), int(accepted[position])
    return 0, 0


def _before(t1: float, r1: int, t2: float, r2: int) -> bool:
    """Whether arrival ``(t1, r1)`` comes before ``(t2, r2)``: by time, then request id (as
    the Python path's heap of ``(time, request)`` tuples orders them)."""
    return t1 < t2 or (t1 == t2 and r1 < r2)


def _heap_push(heap_t: FloatArray, heap_r: IntArray, size: int, t: float, r: int) -> int:
    """Add arrival ``(t, r)`` to the binary heap of ``size`` entries; return the new size."""
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if not _before(t, r, heap_t[parent], heap_r[parent]):
            break
        heap_t[i] = heap_t[parent]
        heap_r[i] = heap_r[parent]
        i = parent
    heap_t[i] = t
    heap_r[i] = r
    return size + 1


def _heap_pop(heap_t: FloatArray, heap_r: IntArray, size: int) -> int:
    """Remove the heap's first entry (read it from ``heap_t[0]``, ``heap_r[0]`` before);
    return the new size."""
    size -= 1
    t, r = heap_t[size], heap_r[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and _before(
            heap_t[child + 1], heap_r[child + 1], heap_t[child], heap_r[child]
        ):
            child += 1
        if not _before(heap_t[child], heap_r[child], t, r):
            break
        heap_t[i] = heap_t[child]
        heap_r[i] = heap_r[child]
        i = child
    heap_t[i] = t
    heap_r[i] = r
    return size


def _loop(stamp: int) -> Callable[..., int]:
    """The loop, with ``stamp`` (a digest of the cost evaluator's source, see :func:`compiled`)
    bound in its closure: numba keys its disk cache on the closure's values as well as the code,
    and the evaluator's machine code is kept inside the loop's, so a changed evaluator compiles
    a new loop instead of reusing a stale one."""

    def run_steps(
        prompt: IntArray,
        output: IntArray,
        num_emitted: IntArray,
        num_computed: IntArray,
        num_decode_steps: IntArray,
        last_emit_step: IntArray,
        last_emit_at: FloatArray,
        first_token_at: FloatArray,
        finished_at: FloatArray,
        scheduled_at: FloatArray,
        num_cached: IntArray,
        state: NDArray[np.int8],
        arrival_at: FloatArray,
        engine_arrival_at: FloatArray,
        num_drafted: IntArray,
        num_accepted: IntArray,
        num_preemptions: IntArray,
        held: IntArray,
        logical: IntArray,
        offsets: IntArray,
        plan_proposed: Any,
        plan_accepted: Any,
        times: FloatArray,
        client_at: FloatArray,
        client_sent_at: FloatArray,
        heap_t: FloatArray,
        heap_r: IntArray,
        starts: IntArray,
        follow_s: FloatArray,
        service_s: FloatArray,
        server: FloatArray,
        queue: IntArray,
        running: IntArray,
        ints: IntArray,
        clock: FloatArray,
        cfg: IntArray,
        cost: tuple[Any, ...],
        rec_f: FloatArray,
        rec_i: IntArray,
        itl_values: FloatArray,
        itl_at: FloatArray,
        missing: FloatArray,
        policy: tuple[Any, ...],
        buffers: tuple[Any, ...],
    ) -> int:
        """Run steps from the state in ``ints``/``clock``/``running``/the queue until one of
        :data:`DONE`, :data:`FULL`, :data:`PYTHON` or :data:`MISSING` (returned); the state, the
        request columns and the KV holdings are updated for every step run, and nothing of the step
        that stopped the loop is. ``clock`` holds the node's clock and the horizon: after its
        first step the loop starts no step at or after ``clock[1]`` (:data:`FULL`).

        The waiting queue is ``queue[ints[_QHEAD]:ints[_QTAIL]]``; arrivals join its end.
        Open loop: the arrivals are ``times`` (sorted), from ``ints[_NEXT]`` on, sent by their
        clients at ``client_at``. Closed loop (``cfg[_CLOSED]``): the pending arrivals are a
        binary heap of ``ints[_HEAP_N]`` entries (``heap_t``, ``heap_r``) and each finish sends
        the next request of ``starts`` (from ``ints[_STARTED]``), ``follow_s`` (the egress delay,
        then the think time) after it ends, noting when in ``client_sent_at``; with a front end
        (``server``: enabled, when its server is free, the latest time offered) the request
        reaches the engine after its ingress (``service_s``).
        The records of the steps run go to ``rec_f``
        (:data:`FLOAT_COLUMNS` rows) and ``rec_i`` (:data:`INT_COLUMNS` rows), the inter-token
        gaps longer than one step to ``itl_values``/``itl_at``. ``cost``: the cost evaluator's
        parameters and tables (:class:`~sim.engine.cost_kernel.LoweredCost`), as it takes them
        after the step's shape. ``policy``: a per-step policy's state and the acceptance per
        output position (:class:`~sim.engine.policy_state.LoweredPolicy`; kind 0: none, the
        plan is ``offsets``/``plan_proposed``/``plan_accepted``). ``buffers``: one step's rows and
        the evaluator's inputs (:func:`step_buffers`), so that the loop allocates nothing."""
        if stamp < 0:
            return PYTHON
        max_seqs = cfg[_MAX_SEQS]
        max_budget = cfg[_BUDGET]
        chunked = cfg[_CHUNKED] != 0
        extra = cfg[_EXTRA]
        block_size = cfg[_BLOCK]
        num_blocks = cfg[_BLOCKS]
        has_plan = cfg[_PLAN] != 0
        speculative = cfg[_SPECULATIVE] != 0
        max_steps = cfg[_MAX_STEPS]
        closed = cfg[_CLOSED] != 0
        (pol_ints, pol_floats, staged, slots, slot_steps, slot_floats, pol_ema, pol_table,
         pol_scratch, acc_values, acc_offsets, acc_cache) = policy  # fmt: skip
        adaptive = pol_ints[0] != 0
        oracle = pol_ints[0] == policy_kernel.ORACLE
        k_max = pol_ints[3]
        num_free = ints[_FREE]
        num_steps = ints[_STEPS]
        nxt = ints[_NEXT]
        qhead = ints[_QHEAD]
        qtail = ints[_QTAIL]
        heap_n = ints[_HEAP_N]
        started = ints[_STARTED]
        num_running = ints[_RUNNING_N]
        num_finished = 0
        num_records = 0
        num_itl = 0
        now = clock[0]
        num_arrivals = len(times)
        capacity = rec_f.shape[1]
        # One step's rows (running ones scheduled, then admissions): see step_buffers.
        rows = max_seqs + 1
        row_ints, is_dec, drafting, shape, given, out = buffers
        ids, take, prop, acc = row_ints[0], row_ints[1], row_ints[2], row_ints[3]
        comp, need, position, victims = row_ints[4], row_ints[5], row_ints[6], row_ints[7]
        emit, new_comp, here_row = row_ints[8], row_ints[9], row_ints[10]
        status = FULL
        while True:
            # Arrivals at or before the clock join the queue (a step at t sees those at <= t).
            if closed:
                while heap_n > 0 and heap_t[0] <= now:
                    r = heap_r[0]
                    engine_arrival_at[r] = heap_t[0]
                    heap_n = _heap_pop(heap_t, heap_r, heap_n)
                    arrival_at[r] = client_sent_at[r]
                    state[r] = _WAITING
                    queue[qtail] = r
                    qtail += 1
            else:
                while nxt < num_arrivals and times[nxt] <= now:
                    arrival_at[nxt] = client_at[nxt]
                    engine_arrival_at[nxt] = times[nxt]
                    state[nxt] = _WAITING
                    queue[qtail] = nxt
                    qtail += 1
                    nxt += 1
            num_waiting = qtail - qhead
            if num_running == 0 and num_waiting == 0:
                if (closed and heap_n == 0) or (not closed and nxt >= num_arrivals):
                    status = DONE
                    break
                next_at = heap_t[0] if closed else times[nxt]
                if next_at > now:
                    now = next_at
                continue
            if num_records >= capacity or num_records >= max_steps:
                status = FULL
                break
            # A caller pausing the simulation at clock[1] (env.run(until=...)): no step starts
            # at or after it once one step ran, so the state runs at most one step past it.
            if now >= clock[1] and num_records > 0:
                status = FULL
                break
            if num_itl + rows > len(itl_values):
                status = FULL
                break
            # --- the policy's k for the running (AdaptivePlan.lookup at the scheduler's query)
            k_chosen = 0
            if adaptive:
                _pk_stage(pol_ints, staged)
                if num_running > 0:
                    k_chosen = _pk_schedule(
                        pol_ints, staged, slots, pol_ema, pol_table, pol_scratch, running,
                        num_running, num_computed,
                    )  # fmt: skip
                    if k_chosen < 0:
                        status = policy_kernel.NEED_STEP_TIME
                        break
            # --- the running, in order, within the token budget (Scheduler._schedule_running)
            n = 0
            want_before = 0
            need_sum = 0
            taken = 0
            for i in range(num_running):
                r = running[i]
                emitted_r = num_emitted[r]
                computed = num_computed[r]
                known = prompt[r] + emitted_r
                dec = emitted_r >= 1 and computed == known - 1
                p = 0
                a = 0
                here = -1
                if dec:
                    if adaptive:
                        if oracle:
                            # Read once a row and position: the drafting's look-ahead of the
                            # step before read it there (policy_kernel.acc_len_at).
                            here = (
                                _acc_len_at(acc_values, acc_offsets, acc_cache, r, emitted_r - 1)
                                - 1
                            )
                            p = min(here, k_max)
                            a = p
                        elif k_chosen > 0:
                            # Speculation off for the batch (k_chosen 0): nothing to read.
                            here = _acc_len(acc_values, acc_offsets, r, emitted_r - 1) - 1
                            p = k_chosen
                            a = min(here, p)
                    elif has_plan:
                        p, a = _lookup(
                            offsets, plan_proposed, plan_accepted, r, num_decode_steps[r]
                        )
                    want = 1 + extra + p
                else:
                    want = known - computed
                t = max_budget - want_before
                if t < 0:
                    t = 0
                if t > want:
                    t = want
                want_before += want
                if has_plan:
                    # A decode short of budget verifies fewer drafts.
                    p = t - 1 - extra if dec and t - 1 - extra > 0 else 0
                    if a > p:
                        a = p
                if t > 0:
                    taken += t
                    ids[n] = r
                    take[n] = t
                    is_dec[n] = dec
                    prop[n] = p
                    acc[n] = a
                    comp[n] = computed
                    more = -(-(computed + t) // block_size) - held[r]
                    need[n] = more if more > 0 else 0
                    need_sum += need[n]
                    position[n] = i
                    here_row[n] = here
                    n += 1
            free = num_free - need_sum
            num_preempted = 0
            stop = False
            if need_sum > num_free:
                # Short of blocks: grant in order; when one does not fit, preempt from the
                # tail of running until it does, or until it gave way itself
                # (Scheduler._allocate_with_preemption). Victims come after the request they
                # make room for, so none was granted blocks in this step.
                free = num_free
                tail = num_running
                kept_rows = 0
                taken = 0
                for k in range(n):
                    if position[k] >= tail:
                        break  # preempted, as every row after it
                    granted = True
                    while need[k] > free:
                        if -(-(comp[k] + take[k]) // block_size) > num_blocks:
                            stop = True  # it could never run: the scheduler says so
                            break
                        tail -= 1
                        victim = running[tail]
                        victims[num_preempted] = victim
                        num_preempted += 1
                        free += held[victim]
                        if tail == position[k]:
                            granted = False
                            break
                    if stop:
                        break
                    if granted:
                        free -= need[k]
                        taken += take[k]
                        ids[kept_rows] = ids[k]
                        take[kept_rows] = take[k]
                        is_dec[kept_rows] = is_dec[k]
                        prop[kept_rows] = prop[k]
                        acc[kept_rows] = acc[k]
                        comp[kept_rows] = comp[k]
                        need[kept_rows] = need[k]
                        here_row[kept_rows] = here_row[k]
                        kept_rows += 1
                n = kept_rows
                # The preempted wait at the front of the queue; a step that kept nothing is
                # scheduled again at once by the Python path.
                if stop or n == 0 or qhead - num_preempted < 0:
                    status = PYTHON
                    break
            num_scheduled = n
            budget = max_budget - taken
            # --- admissions in FCFS order (Scheduler._admit; no prefix cache), none after a
            # preemption
            num_admitted = 0
            admitting = num_running
            q = qhead
            while num_preempted == 0 and q < qtail and budget > 0 and admitting < max_seqs:
                r = queue[q]
                known = prompt[r] + num_emitted[r]
                computed = num_computed[r]
                want = known - computed
                if want > budget and not chunked:
                    break
                t = want if want < budget else budget
                more = -(-(computed + t) // block_size) - held[r]
                if more < 0:
                    more = 0
                if more > free:
                    if admitting == 0:
                        stop = True  # it can never fit: the scheduler says so
                    break
                free -= more
                ids[n] = r
                take[n] = t
                is_dec[n] = False
                prop[n] = 0
                acc[n] = 0
                comp[n] = computed
                need[n] = more
                here_row[n] = -1
                n += 1
                num_admitted += 1
                q += 1
                admitting += 1
                budget -= t
            if stop or n == 0:
                status = PYTHON
                break
            # --- the step's shape and drafting work (general_block)
            step0 = num_steps
            num_tokens = 0
            num_decode = 0
            decode_tokens = 0
            completing = 0
            computed_sum = 0
            pairs_x2 = 0
            emitted_sum = 0
            drafted_sum = 0
            accepted_sum = 0
            spec_k = 0
            regular = 0
            work_seqs = 0
            work_new = 0
            work_context = 0
            work_proposed = 0
            drafting_dec = 0
            verified = 0
            for k in range(n):
                r = ids[k]
                t = take[k]
                computed = comp[k]
                dec = is_dec[k]
                prior = num_emitted[r]
                known = prompt[r] + prior
                remaining = output[r] - prior
                completes = (not dec) and computed + t == known
                if dec:
                    e = acc[k] + 1
                    if e > remaining:
                        e = remaining
                else:
                    e = 1 if completes else 0
                finishing = e > 0 and e == remaining
                advanced = e if dec else t
                emit[k] = e
                new_comp[k] = computed + advanced
                num_tokens += t
                computed_sum += computed
                pairs_x2 += t * (2 * computed + t + 1)
                if dec:
                    num_decode += 1
                    decode_tokens += t
                if completes:
                    completing += 1
                emitted_sum += e
                drafted_sum += prop[k]
                accepted_sum += acc[k]
                if prop[k] > 0:
                    verified += 1
                    if prop[k] > spec_k:
                        spec_k = prop[k]
                if e > 0 and prior > 0 and last_emit_step[r] == step0 - 1:
                    regular += 1
                drafting[k] = speculative and (dec or completes) and not finishing
                if drafting[k]:
                    next_p = 0
                    if has_plan and not adaptive:
                        step_next = num_decode_steps[r] + (1 if dec else 0)
                        next_p = _lookup(offsets, plan_proposed, plan_accepted, r, step_next)[0]
                    work_seqs += 1
                    if dec:
                        drafting_dec += 1
                    work_new += advanced
                    work_context += new_comp[k]
                    work_proposed += next_p
            if adaptive and speculative:
                # The next verify step's drafts (AdaptivePlan.lookup one step ahead).
                batch_after = num_running - num_preempted + num_admitted
                work_proposed = _pk_draft(
                    pol_ints, pol_floats, staged, slots, slot_steps, slot_floats, pol_ema,
                    pol_table, pol_scratch, acc_values, acc_offsets, acc_cache, ids, is_dec,
                    drafting,
                    here_row, n, batch_after, num_decode, drafting_dec, work_seqs - drafting_dec,
                    num_emitted, output, num_computed,
                )  # fmt: skip
                if work_proposed < 0:
                    status = policy_kernel.NEED_STEP_TIME
                    break
            shape[0, 0] = n
            shape[1, 0] = num_tokens
            shape[2, 0] = decode_tokens + completing
            shape[3, 0] = computed_sum + num_tokens
            shape[4, 0] = pairs_x2
            shape[5, 0] = work_seqs
            shape[6, 0] = work_new
            shape[7, 0] = work_context
            shape[8, 0] = work_proposed
            # The evaluator is inlined (compiled()): numba inlines no call with *args.
            num_missing = _evaluate(
                shape[0], shape[1], shape[2], shape[3], shape[4], shape[5], shape[6], shape[7],
                shape[8], given, cost[0], cost[1], cost[2], cost[3], cost[4], cost[5], cost[6],
                cost[7], cost[8], cost[9], cost[10], cost[11], cost[12], cost[13], out, missing,
            )  # fmt: skip
            if num_missing:
                ints[_MISSING] = num_missing
                status = MISSING
                break
            # --- commit: blocks, admissions, progress (Scheduler.schedule, EngineCore.apply_block)
            duration = out[6, 0]
            step_at = now
            end = now + duration
            for v in range(num_preempted):
                # Preempted for recompute (Scheduler._preempt_tail): every block back, to the
                # front of the queue.
                r = victims[v]
                held[r] = 0
                logical[r] = 0
                num_computed[r] = 0
                num_preemptions[r] += 1
                state[r] = _WAITING
                qhead -= 1
                queue[qhead] = r
            num_free = free
            kv_used = num_blocks - num_free
            qhead += num_admitted
            if adaptive:
                _pk_observe(pol_ints, pol_floats, staged, slots, slot_steps, slot_floats,
                            pol_ema, ids, prop, acc, n, verified, accepted_sum)  # fmt: skip
            j = num_records
            rec_f[0, j] = now
            rec_f[1, j] = duration
            for row in range(6):
                rec_f[2 + row, j] = out[row, 0]
            rec_i[0, j] = n
            rec_i[1, j] = num_decode
            rec_i[2, j] = n - num_decode
            rec_i[3, j] = num_tokens
            rec_i[4, j] = num_tokens - decode_tokens
            rec_i[5, j] = emitted_sum
            rec_i[6, j] = drafted_sum
            rec_i[7, j] = spec_k
            rec_i[8, j] = accepted_sum
            rec_i[9, j] = kv_used
            rec_i[10, j] = num_waiting
            rec_i[11, j] = regular
            num_records += 1
            now = end
            num_steps += 1
            # One pass over the step's rows: admission, progress, KV, finish.
            for k in range(n):
                r = ids[k]
                if k >= num_scheduled:
                    state[r] = _RUNNING
                    if scheduled_at[r] != scheduled_at[r]:  # NaN: not a readmission
                        scheduled_at[r] = step_at
                        num_cached[r] = comp[k]
                e = emit[k]
                prior = num_emitted[r]
                if is_dec[k]:
                    num_decode_steps[r] += 1
                if prop[k] > 0:  # a row that verified nothing (speculation off) accepted none
                    num_drafted[r] += prop[k]
                    num_accepted[r] += acc[k]
                if e > 0:
                    if prior > 0 and last_emit_step[r] != step0 - 1:
                        itl_values[num_itl] = end - last_emit_at[r]
                        itl_at[num_itl] = end
                        num_itl += 1
                    if prior == 0:
                        first_token_at[r] = end
                    last_emit_at[r] = end
                    last_emit_step[r] = step0
                emitted_r = prior + e
                num_emitted[r] = emitted_r
                computed = new_comp[k]
                num_computed[r] = computed
                # KV: the sequence holds exactly the blocks of its committed tokens
                # (BlockManager.settle: the step's grant, then the change to the committed).
                blocks = -(-computed // block_size)
                num_free -= blocks - (held[r] + need[k])
                held[r] = blocks
                logical[r] = computed
                if emitted_r == output[r]:
                    # Finished: its blocks back (Scheduler.finish).
                    finished_at[r] = end
                    num_free += blocks
                    held[r] = 0
                    logical[r] = 0
                    state[r] = _FINISHED
                    num_finished += 1
                    if closed and started < len(starts):
                        # The client sees the end after the egress and sends its next request
                        # after thinking (ArrivalSchedule.on_finish).
                        follow = starts[started]
                        started += 1
                        at = (end + follow_s[0]) + follow_s[1]
                        client_sent_at[follow] = at
                        if server[0] != 0.0:
                            # The front end's ingress (ArrivalSchedule._issue, FrontEndServer).
                            if at >= server[2]:
                                server[2] = at
                                server[1] = max(at, server[1]) + service_s[follow]
                                at = server[1]
                            else:
                                at = at + service_s[follow]
                        heap_n = _heap_push(heap_t, heap_r, heap_n, at, follow)
            # The running order: the running ones still running, then the admitted (in place:
            # each is written at or before where it is read).
            m = 0
            for i in range(num_running):
                r = running[i]
                if state[r] == _RUNNING:
                    running[m] = r
                    m += 1
            for k in range(num_scheduled, n):
                r = ids[k]
                if state[r] == _RUNNING:
                    running[m] = r
                    m += 1
            num_running = m
        ints[_FREE] = num_free
        ints[_STEPS] = num_steps
        ints[_NEXT] = nxt
        ints[_QHEAD] = qhead
        ints[_QTAIL] = qtail
        ints[_HEAP_N] = heap_n
        ints[_STARTED] = started
        ints[_RUNNING_N] = num_running
        ints[_FINISHED_N] = num_finished
        ints[_RECORDS] = num_records
        ints[_ITL] = num_itl
        clock[0] = now
        return status

    return run_steps


# The policy kernels (:mod:`sim.engine.policy_kernel`), bound compiled by :func:`compiled`.
_acc_len = policy_kernel.acc_len
_acc_len_at = policy_kernel.acc_len_at
_pk_stage = policy_kernel.stage
_pk_schedule = policy_kernel.schedule_k
_pk_draft = policy_kernel.draft_proposed
_pk_observe = policy_kernel.observe


def _evaluate(*args: Any) -> int:
    """The cost evaluator (:func:`sim.engine.cost_eval.evaluate`, compiled), set by
    :func:`compiled` before the loop is compiled."""
    raise RuntimeError("the compiled loop's evaluator is bound by compiled()")


@cache
def compiled() -> Callable[..., int] | None:
    """The loop of :func:`_loop` compiled by numba (cached on disk), or None without numba."""
    evaluator = cost_eval.compiled()
    if evaluator is None:
        return None
    import numba

    # The helpers and the policy kernels allocate nothing, so they run without numba's
    # reference counting (_nrt=False): with it, a compiled function takes a reference on each
    # array it is passed, on entry, and drops it on return, two atomic operations per array
    # per call. The policy kernels are called three times a step with some twenty arrays:
    # that was a third of an sglang-ema run's loop (0.24 s against 0.18 s of CPU at 30,000
    # requests, with the same steps), more than all their arithmetic.
    # (_nrt is numba's own option for that, left out of its type stubs.)
    plain: Any = numba.njit(cache=True, nogil=True, _nrt=False)  # type: ignore[call-overload]
    for helper in (_lookup, _before, _heap_push, _heap_pop):
        globals()[helper.__name__] = plain(helper)
    # The policy kernels call each other through their module's names: all compiled first.
    for kernel in policy_kernel.KERNELS:
        setattr(policy_kernel, kernel.__name__, plain(kernel))
    for name, attribute in (
        ("_acc_len", "acc_len"),
        ("_acc_len_at", "acc_len_at"),
        ("_pk_stage", "stage"),
        ("_pk_schedule", "schedule_k"),
        ("_pk_draft", "draft_proposed"),
        ("_pk_observe", "observe"),
    ):
        globals()[name] = getattr(policy_kernel, attribute)
    # The evaluator inlined into the loop, not called: the step's cost at 0.39 us a step
    # instead of 0.75 (1,000 requests at 1 request/s, 115,200 steps; 0.58 against 0.96 us at 5
    # requests/s), the same operations in the same order.
    globals()["_evaluate"] = numba.njit(cache=True, nogil=True, inline="always")(cost_eval.evaluate)
    stamp = _source_stamp()
    # The loop allocates nothing (its buffers are the caller's: step_buffers), so it too runs
    # without reference counting: the evaluator's twenty-odd arrays, inlined, took a reference
    # each a step.
    loop: Any = plain(_loop(stamp))
    return loop


def step_buffers(max_num_seqs: int) -> tuple[Any, ...]:
    """The loop's working arrays for one step of up to ``max_num_seqs`` running rows and one
    admission (the ``buffers`` it takes): the rows' integers (request, tokens taken, drafts
    proposed and accepted, computed tokens, blocks needed, place in running, preemption
    victims, tokens emitted, computed after, acc_len - 1 read or -1), whether each decodes and
    drafts, and the evaluator's inputs and output for one step."""
    rows = max_num_seqs + 1
    return (
        np.zeros((11, rows), dtype=np.int64),
        np.zeros(rows, dtype=np.bool_),
        np.zeros(rows, dtype=np.bool_),
        np.zeros((9, 1), dtype=np.int64),
        np.zeros(1, dtype=np.float64),
        np.zeros((7, 1), dtype=np.float64),
    )


def _source_stamp() -> int:
    """A digest of the cost evaluator's and this module's source (non-negative)."""
    digest = hashlib.sha256()
    for path in (Path(cost_eval.__file__), Path(policy_kernel.__file__), Path(__file__)):
        digest.update(path.read_bytes())
    return int.from_bytes(digest.digest()[:7], "little")
