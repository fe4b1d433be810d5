"""The compiled loop's step scheduling: the running rows within the token budget, preemption
when the blocks run short, then FCFS admissions, as :meth:`Scheduler.schedule
<sim.engine.scheduler.Scheduler.schedule>` does for a step without a prefix cache.

Plain Python functions, inlined into the loop of :mod:`sim.engine.loop_kernel` when
:func:`~sim.engine.loop_kernel.compiled` compiles it (a call per step would copy some thirty
arrays' descriptors). They write the step's rows into the buffers of
:func:`~sim.engine.loop_state.step_buffers` and change nothing else: a step the loop abandons
is scheduled again from the same state.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from sim.engine import policy_kernel
from sim.engine.loop_state import (
    ROW_ACCEPTED,
    ROW_COMPUTED,
    ROW_HERE,
    ROW_ID,
    ROW_NEED,
    ROW_POSITION,
    ROW_PROPOSED,
    ROW_TAKE,
    ROW_VICTIM,
)

IntArray = NDArray[np.int64]


def lookup(offsets: IntArray, proposed: Any, accepted: Any, request: int, step: int) -> tuple:
    """The ``step``-th verify step's drafts of ``request``: proposed, accepted (zero past its
    plan), as :meth:`StepPlan.lookup` reads them."""
    position = offsets[request] + step
    if position < offsets[request + 1]:
        return int(proposed[position]), int(accepted[position])
    return 0, 0


def schedule_running(
    running: IntArray,
    num_running: int,
    prompt: IntArray,
    num_emitted: IntArray,
    num_computed: IntArray,
    num_decode_steps: IntArray,
    held: IntArray,
    rows: IntArray,
    is_dec: Any,
    cfg: tuple[int, int, int, int, bool, int],
    num_free: int,
    qhead: int,
    plan: tuple[Any, ...],
    policy: tuple[Any, ...],
) -> tuple[int, int, int, int, bool]:
    """The running rows, in order, within the token budget (Scheduler._schedule_running), and
    their blocks, preempting from the tail of running when short (Scheduler.
    _allocate_with_preemption). ``cfg``: the token budget, the extra tokens of a decode, the
    block size, the pool's blocks, whether there is a plan, the lookahead slots a running
    request holds besides the step's tokens; ``plan``: its offsets, proposed,
    accepted; ``policy``: whether adaptive, whether the oracle, the k chosen, the longest k,
    the acceptance values, offsets and the oracle's per-request cache. Return the rows
    scheduled, the blocks free after their grants, the requests preempted (``rows``'
    victims), the tokens taken, and whether the loop may go on (not: the Python path
    schedules this step)."""
    max_budget, extra, block_size, num_blocks, has_plan, lookahead = cfg
    offsets, plan_proposed, plan_accepted = plan
    adaptive, oracle, k_chosen, k_max, acc_values, acc_offsets, acc_cache = policy
    ids, take, prop, acc = rows[ROW_ID], rows[ROW_TAKE], rows[ROW_PROPOSED], rows[ROW_ACCEPTED]
    comp, need, position = rows[ROW_COMPUTED], rows[ROW_NEED], rows[ROW_POSITION]
    victims, here_row = rows[ROW_VICTIM], rows[ROW_HERE]
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
                    # Read once a row and position: the drafting's look-ahead of the step
                    # before read it there (policy_kernel.acc_len_at).
                    value = policy_kernel.acc_len_at(
                        acc_values, acc_offsets, acc_cache, r, emitted_r - 1
                    )
                    here = value - 1
                    p = min(here, k_max)
                    a = p
                elif k_chosen > 0:
                    # Speculation off for the batch (k_chosen 0): nothing to read.
                    here = policy_kernel.acc_len(acc_values, acc_offsets, r, emitted_r - 1) - 1
                    p = k_chosen
                    a = min(here, p)
            elif has_plan:
                p, a = lookup(offsets, plan_proposed, plan_accepted, r, num_decode_steps[r])
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
            more = -(-(computed + t + lookahead) // block_size) - held[r]
            need[n] = more if more > 0 else 0
            need_sum += need[n]
            position[n] = i
            here_row[n] = here
            n += 1
    if need_sum <= num_free:
        return n, num_free - need_sum, 0, taken, True
    # Short of blocks: grant in order; when one does not fit, preempt from the tail of running
    # until it does, or until it gave way itself. Victims come after the request they make
    # room for, so none was granted blocks in this step.
    free = num_free
    tail = num_running
    kept_rows = 0
    taken = 0
    num_preempted = 0
    for k in range(n):
        if position[k] >= tail:
            break  # preempted, as every row after it
        granted = True
        while need[k] > free:
            if -(-(comp[k] + take[k] + lookahead) // block_size) > num_blocks:
                return 0, free, num_preempted, taken, False  # it could never run
            tail -= 1
            victim = running[tail]
            victims[num_preempted] = victim
            num_preempted += 1
            free += held[victim]
            if tail == position[k]:
                granted = False
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
    # The preempted wait at the front of the queue; a step that kept nothing is scheduled
    # again at once by the Python path.
    go_on = kept_rows > 0 and qhead - num_preempted >= 0
    return kept_rows, free, num_preempted, taken, go_on


def admit(
    queue: IntArray,
    qhead: int,
    qtail: int,
    prompt: IntArray,
    num_emitted: IntArray,
    num_computed: IntArray,
    held: IntArray,
    rows: IntArray,
    is_dec: Any,
    n: int,
    admitting: int,
    max_seqs: int,
    budget: int,
    chunked: bool,
    block_size: int,
    free: int,
) -> tuple[int, int, int, bool]:
    """Admissions in FCFS order from ``queue[qhead:qtail]`` after the ``n`` rows scheduled
    (Scheduler._admit; no prefix cache), ``admitting`` sequences running, within the
    ``budget`` and the ``free`` blocks. Return the rows then, the requests admitted, the
    blocks free, and whether the head of the queue can never fit (the scheduler's error)."""
    ids, take, prop, acc = rows[ROW_ID], rows[ROW_TAKE], rows[ROW_PROPOSED], rows[ROW_ACCEPTED]
    comp, need, here_row = rows[ROW_COMPUTED], rows[ROW_NEED], rows[ROW_HERE]
    num_admitted = 0
    q = qhead
    while q < qtail and budget > 0 and admitting < max_seqs:
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
            return n, num_admitted, free, admitting == 0
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
    return n, num_admitted, free, False
