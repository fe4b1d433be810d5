"""The compiled loop's emission: what a scheduled step emits and costs, and its commit.

:func:`step_shape` is :func:`~sim.engine.block.general_block` for one step: each row's tokens
emitted and computed after it, whether it drafts next, and the step's shape for the cost
evaluator. :func:`commit` is :meth:`EngineCore.apply_block
<sim.engine.core.EngineCore.apply_block>` with the scheduler's commands (preemption, admission,
``BlockManager.settle``, ``Scheduler.finish``) in one pass over the step's rows, and the
clients' next requests of a closed loop. Plain Python functions, inlined into the loop of
:mod:`sim.engine.loop_kernel` when :func:`~sim.engine.loop_kernel.compiled` compiles it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from sim.engine import loop_arrivals, loop_schedule
from sim.engine.loop_state import (
    FINISHED,
    ROW_ACCEPTED,
    ROW_COMPUTED,
    ROW_EMIT,
    ROW_ID,
    ROW_NEED,
    ROW_NEW_COMPUTED,
    ROW_PROPOSED,
    ROW_TAKE,
    ROW_VICTIM,
    RUNNING,
    WAITING,
)

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


def step_shape(
    rows: IntArray,
    is_dec: Any,
    drafting: Any,
    n: int,
    prompt: IntArray,
    output: IntArray,
    num_emitted: IntArray,
    num_decode_steps: IntArray,
    last_emit_step: IntArray,
    step0: int,
    speculative: bool,
    plan: tuple[Any, ...],
    shape: IntArray,
) -> tuple[int, int, int, int, int, int, int, int, int]:
    """Each of the ``n`` rows' emission (``rows``' emitted and computed-after rows, whether it
    drafts next in ``drafting``) and the step's shape for the evaluator (``shape``'s rows but
    the last, the drafts of the next verify step: the plan's (``plan``: whether there is one
    and not a policy, its offsets, proposed, accepted) or none). Return the decoding rows,
    their tokens, the tokens emitted, drafted, accepted, the most drafts of a row, the
    regular inter-token gaps, the drafting decoding rows and the rows that verified drafts."""
    fixed_plan, offsets, plan_proposed, plan_accepted = plan
    ids, take, prop, acc = rows[ROW_ID], rows[ROW_TAKE], rows[ROW_PROPOSED], rows[ROW_ACCEPTED]
    comp, emit, new_comp = rows[ROW_COMPUTED], rows[ROW_EMIT], rows[ROW_NEW_COMPUTED]
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
            if fixed_plan:
                step_next = num_decode_steps[r] + (1 if dec else 0)
                next_p = loop_schedule.lookup(offsets, plan_proposed, plan_accepted, r, step_next)[
                    0
                ]
            work_seqs += 1
            if dec:
                drafting_dec += 1
            work_new += advanced
            work_context += new_comp[k]
            work_proposed += next_p
    shape[0, 0] = n
    shape[1, 0] = num_tokens
    shape[2, 0] = decode_tokens + completing
    shape[3, 0] = computed_sum + num_tokens
    shape[4, 0] = pairs_x2
    shape[5, 0] = work_seqs
    shape[6, 0] = work_new
    shape[7, 0] = work_context
    shape[8, 0] = work_proposed
    return (num_decode, decode_tokens, emitted_sum, drafted_sum, accepted_sum, spec_k, regular,
            drafting_dec, verified)  # fmt: skip


def commit(
    requests: tuple[Any, ...],
    kv: tuple[IntArray, IntArray, int, int],
    rows: IntArray,
    is_dec: Any,
    n: int,
    num_scheduled: int,
    num_preempted: int,
    queue: IntArray,
    qhead: int,
    running: IntArray,
    num_running: int,
    times: tuple[float, float, int],
    itl: tuple[FloatArray, FloatArray, int],
    clients: tuple[Any, ...],
) -> tuple[int, int, int, int, int, int, int]:
    """Apply the step of ``n`` rows (the first ``num_scheduled`` running, the others admitted)
    run from ``times`` (its start, end, index): the ``num_preempted`` victims back to the
    front of the queue with every block, the admitted running, each row's progress and
    inter-token gap (``itl``: values, times, count), its blocks settled to its committed
    tokens (``kv``: held, logical, free, block size), the finished ones' blocks back and, in
    a closed loop (``clients``), their clients' next requests pushed on the heap of arrivals;
    then the running order (still running, then admitted). Return the blocks free, the queue's head,
    the gaps, the heap's size, the next client request's index, the finished and the running
    then."""
    (num_emitted, num_computed, num_decode_steps, last_emit_step, last_emit_at, first_token_at,
     finished_at, scheduled_at, num_cached, state, num_drafted, num_accepted, num_preemptions,
     output) = requests  # fmt: skip
    held, logical, num_free, block_size = kv
    step_at, end, step0 = times
    itl_values, itl_at, num_itl = itl
    closed, starts, started, follow_s, server, service_s, client_sent_at, heap = clients
    heap_t, heap_r, heap_n = heap
    ids, prop, acc, comp = rows[ROW_ID], rows[ROW_PROPOSED], rows[ROW_ACCEPTED], rows[ROW_COMPUTED]
    need, emit, new_comp = rows[ROW_NEED], rows[ROW_EMIT], rows[ROW_NEW_COMPUTED]
    victims = rows[ROW_VICTIM]
    for v in range(num_preempted):
        # Preempted for recompute (Scheduler._preempt_tail): every block back, to the front of
        # the queue.
        r = victims[v]
        held[r] = 0
        logical[r] = 0
        num_computed[r] = 0
        num_preemptions[r] += 1
        state[r] = WAITING
        qhead -= 1
        queue[qhead] = r
    qhead += n - num_scheduled
    num_finished = 0
    for k in range(n):
        r = ids[k]
        if k >= num_scheduled:
            state[r] = RUNNING
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
        # KV: the sequence holds exactly the blocks of its committed tokens (BlockManager.
        # settle: the step's grant, then the change to the committed).
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
            state[r] = FINISHED
            num_finished += 1
            if closed and started < len(starts):
                # The client sees the end after the egress and sends its next request after
                # thinking (ArrivalSchedule.on_finish).
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
                heap_n = loop_arrivals.heap_push(heap_t, heap_r, heap_n, at, follow)
    # The running order: the running ones still running, then the admitted (in place: each is
    # written at or before where it is read).
    m = 0
    for i in range(num_running):
        r = running[i]
        if state[r] == RUNNING:
            running[m] = r
            m += 1
    for k in range(num_scheduled, n):
        r = ids[k]
        if state[r] == RUNNING:
            running[m] = r
            m += 1
    return num_free, qhead, num_itl, heap_n, started, num_finished, m
