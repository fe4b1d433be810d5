"""Per-step speculation policies inside the compiled loop.

On the Python path :class:`~sim.engine.policies.AdaptivePlan` answers three queries a step:
the scheduler's (each running row's k at its verify step), the drafting's (the next verify
step's k, one step ahead, on a copy of a learning policy where its choice may move:
:mod:`sim.engine.policy_lookahead`) and the step applied (``observe``). :func:`schedule_k`,
:func:`~sim.engine.policy_lookahead.draft_proposed` and :func:`observe` do the same
with the same arithmetic on the policy's state in arrays
(:class:`~sim.engine.policy_state.LoweredPolicy`, which says what is covered), reading acceptance
as ``PositionAcceptance.at`` does, so :mod:`sim.engine.loop_kernel` gives the Python path's
records bit for bit (``tests/engine/test_compiled_policies.py``). Nothing of the policy changes
until the step commits: a step the loop abandons is computed again from the same state.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

#: What the loop returns when a goodput decision needs a step time not tabulated yet (after the
#: loop's own DONE, FULL, PYTHON and MISSING).
NEED_STEP_TIME = 4

#: Policy kinds (``ints[_KIND]``): none (a fixed plan), then the compiled policies.
NONE, DISABLE, ORACLE, SGLANG, GOODPUT = 0, 1, 2, 3, 4

# Slots of the policy's integer state.
(
    _KIND,
    _K,
    _MAX_BATCH,
    _K_MAX,
    _INTERVAL,
    _WARMUP,
    _NUM_SLOTS,
    _ACTIVE,
    _CURRENT,
    _SINCE,
    _NEED_B,
    _NEED_CONTEXT,
    _TWO_ROWS,
) = range(13)
_NUM_INTS = 13
# Slots of the staged state (the scheduler's and the drafting's choices within one step).
_S_ACTIVE, _S_CURRENT, _S_SINCE = range(3)
# Columns of a slot (sglang-ema): lowest batch size, current steps, batches counted, candidates.
_LOWEST, _STEPS, _COUNT, _NUM_STEPS = range(4)
# Columns of a slot's floats: EMA, down and up hysteresis.
_EMA, _DOWN, _UP = range(3)
#: Tokens per context bin of the goodput step-time table (goodput.CONTEXT_BIN_TOKENS, checked
#: in :func:`sim.engine.policy_state.lower`).
_BIN_TOKENS = 128


def acc_len(values: Any, offsets: IntArray, r: int, position: int) -> int:
    """``acc_len`` of request ``r`` at output ``position`` (PositionAcceptance.at)."""
    start = offsets[r]
    length = offsets[r + 1] - start
    if position >= length:  # a trace shorter than the request wraps (positions are >= 0)
        position = position % length
    return int(values[start + position])


def acc_len_at(values: Any, offsets: IntArray, cache: IntArray, r: int, position: int) -> int:
    """:func:`acc_len`, kept per request: ``cache[r]`` holds the position last read and its
    value, so the scheduler's read of a row's position, after the drafting's look-ahead of the
    step before read it, costs no second look-up (the value of a position never changes)."""
    if cache[r, 0] == position:
        return int(cache[r, 1])
    value = acc_len(values, offsets, r, position)
    cache[r, 0] = position
    cache[r, 1] = value
    return value


def _slot_of(slots: IntArray, num_slots: int, batch_size: int) -> int:
    """The slot of the highest lowest batch size at or under ``batch_size``
    (SglangEmaPolicy._slot_of)."""
    index = 0
    for i in range(num_slots):
        if slots[i, _LOWEST] <= batch_size:
            index = i
    return index


def _slot_after(
    ints: IntArray,
    floats: FloatArray,
    slots: IntArray,
    slot_steps: IntArray,
    slot_floats: FloatArray,
    s: int,
    count: int,
    accepted: int,
) -> tuple[float, int, int]:
    """Slot ``s``'s EMA, batch count and steps after a verify batch of ``count`` sequences that
    accepted ``accepted`` drafts in all (SglangEmaPolicy.observe of one step; nothing
    written)."""
    alpha = floats[0]
    ema = (1.0 - alpha) * slot_floats[s, _EMA] + alpha * (accepted / count)
    c = int(slots[s, _COUNT]) + 1
    current = int(slots[s, _STEPS])
    w = ints[_WARMUP]
    if not (c > w and (c - w) % ints[_INTERVAL] == 0):
        return ema, c, current
    # SGLang's step rule with hysteresis (sglang_ema._recompute).
    steps, down, up = slot_steps[s], slot_floats[s, _DOWN], slot_floats[s, _UP]
    num_steps = slots[s, _NUM_STEPS]
    index = 0
    for i in range(num_steps):
        if steps[i] == current:
            index = i
    while index > 0 and ema <= steps[index - 1] - 0.5 + down:
        index -= 1
    while index < num_steps - 1 and ema > steps[index] - 0.5 + up:
        index += 1
    return ema, c, int(steps[index])


def _holds_for(count: int, warmup: int, interval: int) -> int:
    """SglangEmaPolicy.holds_for of a slot that counted ``count`` batches."""
    following = warmup + interval * ((max(count, warmup) - warmup) // interval + 1)
    return following - count


def _best_k(
    ints: IntArray,
    table: FloatArray,
    scratch: FloatArray,
    m: int,
    batch_size: int,
    context: int,
) -> int:
    """GoodputPolicy._best_k over the ``m`` rows whose accepted and tried EMAs are
    ``scratch[0]`` and ``scratch[1]`` (its row 2 takes the power sums: no allocation a
    decision), ``context`` cached tokens in all, a batch of ``batch_size``; -1 (and the key in
    ``ints``) when the step time of that batch and context bin is not tabulated yet."""
    k_max = ints[_K_MAX]
    b = batch_size if batch_size > 1 else 1
    per_seq = int(np.rint(float(context) / b / _BIN_TOKENS))
    if (
        batch_size < 0
        or batch_size >= table.shape[0]
        or per_seq >= table.shape[1]
        or math.isnan(table[batch_size, per_seq, 0, 0])
    ):
        ints[_NEED_B] = batch_size
        ints[_NEED_CONTEXT] = context
        return -1
    power_sums = scratch[2]
    for d in range(k_max + 1):
        power_sums[d] = 0.0
    for i in range(m):
        alpha = min(max(scratch[0, i] / scratch[1, i], 0.0), 0.999)
        p = 1.0
        for d in range(k_max + 1):
            power_sums[d] += p
            p = p * alpha
    best_k = 0
    best = 0.0
    tokens = 0.0
    rows = m if m > 1 else 1
    for d in range(k_max + 1):
        tokens += power_sums[d]
        seconds = table[batch_size, per_seq, 0, d]
        if ints[_TWO_ROWS] != 0:
            share = power_sums[d] / rows
            seconds = seconds + share * (table[batch_size, per_seq, 1, d] - seconds)
        rate = tokens / seconds
        if d == 0 or rate > best:
            best, best_k = rate, d
    return best_k


def _gather(
    ema: FloatArray, scratch: FloatArray, rows: IntArray, m: int, num_computed: IntArray
) -> int:
    """The accepted and tried EMAs of the first ``m`` ``rows`` into ``scratch``; return their
    cached tokens in all."""
    context = 0
    for i in range(m):
        r = rows[i]
        scratch[0, i] = ema[0, r]
        scratch[1, i] = ema[1, r]
        context += num_computed[r]
    return context


def schedule_k(
    ints: IntArray,
    staged: IntArray,
    slots: IntArray,
    ema: FloatArray,
    table: FloatArray,
    scratch: FloatArray,
    running: IntArray,
    num_running: int,
    num_computed: IntArray,
) -> int:
    """The k the policy gives the running rows at the scheduler's query (one k for all; the
    oracle's is per row, read by the caller); -1 when a step time is missing. Stages the
    policy's own changes (its decision) in ``staged``."""
    kind = ints[_KIND]
    if kind == DISABLE:
        return int(ints[_K]) if num_running <= ints[_MAX_BATCH] else 0
    if kind == SGLANG:
        active = _slot_of(slots, ints[_NUM_SLOTS], num_running)
        staged[_S_ACTIVE] = active
        return int(slots[active, _STEPS])
    if kind == GOODPUT:
        if staged[_S_SINCE] >= ints[_INTERVAL]:
            context = _gather(ema, scratch, running, num_running, num_computed)
            k = _best_k(ints, table, scratch, num_running, num_running, context)
            if k < 0:
                return -1
            staged[_S_CURRENT] = k
            staged[_S_SINCE] = 0
        return int(staged[_S_CURRENT])
    return 0


def observe(
    ints: IntArray,
    floats: FloatArray,
    staged: IntArray,
    slots: IntArray,
    slot_steps: IntArray,
    slot_floats: FloatArray,
    ema: FloatArray,
    ids: IntArray,
    proposed: IntArray,
    accepted: IntArray,
    n: int,
    verified: int,
    accepted_sum: int,
) -> None:
    """Commit the step's choices (``staged``) and teach the policy the step's ``n`` rows:
    drafts proposed and accepted (SpeculationPolicy.observe of one step); ``verified`` rows
    proposed drafts, which accepted ``accepted_sum`` in all (a row that proposed none accepted
    none). Only the rows that verified learn: a step that verified nothing costs no pass."""
    kind = ints[_KIND]
    if kind == SGLANG:
        ints[_ACTIVE] = staged[_S_ACTIVE]
        if verified == 0:
            return
        s = _slot_of(slots, ints[_NUM_SLOTS], verified)
        value, c, current = _slot_after(
            ints, floats, slots, slot_steps, slot_floats, s, verified, accepted_sum
        )
        slot_floats[s, _EMA] = value
        slots[s, _COUNT] = c
        slots[s, _STEPS] = current
    elif kind == GOODPUT:
        if verified > 0:
            alpha = floats[0]
            for j in range(n):
                if proposed[j] > 0:
                    r = ids[j]
                    a = accepted[j]
                    ema[0, r] = ema[0, r] + (a - ema[0, r]) * alpha
                    ema[1, r] = ema[1, r] + (min(a + 1, proposed[j]) - ema[1, r]) * alpha
        ints[_CURRENT] = staged[_S_CURRENT]
        ints[_SINCE] = min(staged[_S_SINCE] + 1, ints[_INTERVAL])


def drafts_next(ints: IntArray, batch_size: int) -> bool:
    """Whether the policy may give a row drafts at the next verify step, ``batch_size`` the
    running sequences after scheduling: not ``disable-above-batch`` above its batch size (nor
    at k = 0), so the step gathers no drafting work (every other policy may)."""
    if ints[_KIND] == DISABLE:
        return ints[_K] > 0 and batch_size <= ints[_MAX_BATCH]
    return True


def stage(ints: IntArray, staged: IntArray) -> None:
    """Start a step's staged state from the policy's."""
    staged[_S_ACTIVE] = ints[_ACTIVE]
    staged[_S_CURRENT] = ints[_CURRENT]
    staged[_S_SINCE] = ints[_SINCE]


#: Every kernel, for :func:`sim.engine.loop_kernel.compiled` to compile.
KERNELS: tuple[Callable[..., Any], ...] = (
    acc_len, acc_len_at, _slot_of, _slot_after, _holds_for, _best_k,
    _gather, schedule_k, observe, drafts_next, stage,
)  # fmt: skip
