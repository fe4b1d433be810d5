"""The drafting's look-ahead of a per-step policy inside the compiled loop.

After a step is scheduled, its drafting proposes the next verify step's drafts: on the Python
path :meth:`AdaptivePlan.lookup <sim.engine.policies.AdaptivePlan.lookup>` asks the policy
one step ahead of the decoding rows (their positions moved on by this step's emission, a
learning policy's copy taught this step where its choice may move). :func:`draft_proposed`
answers with the same arithmetic on the policy's arrays (:mod:`sim.engine.policy_kernel`, whose
kernels it calls through that module's names, compiled first), so the loop's drafting work is
the Python path's to the bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from sim.engine import policy_kernel as pk
from sim.engine.policy_kernel import (
    _COUNT,
    _INTERVAL,
    _K,
    _K_MAX,
    _KIND,
    _MAX_BATCH,
    _NUM_SLOTS,
    _S_ACTIVE,
    _S_CURRENT,
    _S_SINCE,
    _STEPS,
    _WARMUP,
    DISABLE,
    GOODPUT,
    ORACLE,
    SGLANG,
)

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


def draft_proposed(
    ints: IntArray,
    floats: FloatArray,
    staged: IntArray,
    slots: IntArray,
    slot_steps: IntArray,
    slot_floats: FloatArray,
    ema: FloatArray,
    table: FloatArray,
    scratch: FloatArray,
    values: Any,
    offsets: IntArray,
    cache: IntArray,
    ids: IntArray,
    is_dec: Any,
    drafting: Any,
    here: IntArray,
    n: int,
    batch_size: int,
    num_decode: int,
    drafting_dec: int,
    drafting_new: int,
    num_emitted: IntArray,
    output: IntArray,
    num_computed: IntArray,
) -> int:
    """The drafts of the next verify step summed over the drafting rows, as the step's drafting
    asks them (AdaptivePlan.lookup one step ahead of the decoding rows, ``batch_size`` the
    running sequences after scheduling); -1 when a step time is missing. ``num_decode`` of the
    ``n`` rows decode; ``drafting_dec`` decoding and ``drafting_new`` other rows draft;
    ``here``: each row's ``acc_len - 1`` at its position where the scheduler read it, else -1.
    A policy whose next k is one for every row of a kind costs no pass over the rows."""
    kind = ints[_KIND]
    k_max = ints[_K_MAX]
    if kind == DISABLE:
        k = int(ints[_K]) if batch_size <= ints[_MAX_BATCH] else 0
        return k * (drafting_dec + drafting_new)
    if kind == ORACLE:
        total = 0
        for j in range(n):
            if drafting[j]:
                r = ids[j]
                emitted = num_emitted[r]
                k = here[j]
                if k < 0:
                    k = pk.acc_len(values, offsets, r, max(emitted - 1, 0)) - 1
                k = min(k, k_max)
                if is_dec[j]:
                    # Where the row is after this step: the next step's scheduler reads it.
                    ahead = pk.acc_len_at(values, offsets, cache, r, emitted - 1 + k + 1)
                    k = min(ahead - 1, k_max)
                total += k
        return total
    if kind == SGLANG:
        num_slots = ints[_NUM_SLOTS]
        active = pk._slot_of(slots, num_slots, n)
        staged[_S_ACTIVE] = active
        k = int(slots[active, _STEPS])
        k_next = k
        if (
            num_decode > 0
            and k > 0
            and pk._holds_for(slots[active, _COUNT], ints[_WARMUP], ints[_INTERVAL]) < 2
        ):
            # A copy of the policy observes this step as planned, then chooses.
            accepted = 0
            for j in range(n):
                if is_dec[j]:
                    a = here[j]
                    if a < 0:
                        a = pk.acc_len(values, offsets, ids[j], num_emitted[ids[j]] - 1) - 1
                    accepted += min(a, k)
            if pk._slot_of(slots, num_slots, num_decode) == active:
                k_next = pk._slot_after(
                    ints, floats, slots, slot_steps, slot_floats, active, num_decode, accepted
                )[2]
        return k_next * drafting_dec + k * drafting_new
    if kind == GOODPUT:
        interval = ints[_INTERVAL]
        since = staged[_S_SINCE]
        if since >= interval:
            context = pk._gather(ema, scratch, ids, n, num_computed)
            best = pk._best_k(ints, table, scratch, n, batch_size, context)
            if best < 0:
                return -1
            staged[_S_CURRENT] = best
            staged[_S_SINCE] = 0
            since = 0
        k = int(staged[_S_CURRENT])
        if num_decode == 0:
            return k * drafting_new
        if max(1, interval - since) >= 2 or min(since + 1, interval) < interval:
            # The copy would not decide at the next step: its k holds for every decoding row
            # that drafts and still runs then.
            if k == 0:
                return 0
            live = 0
            for j in range(n):
                if is_dec[j] and drafting[j]:
                    r = ids[j]
                    emitted = num_emitted[r]
                    a = here[j]
                    if a < 0:
                        a = pk.acc_len(values, offsets, r, emitted - 1) - 1
                    moved = min(a, k) + 1
                    if moved < output[r] - emitted:
                        live += 1
            return k * (drafting_new + live)
        # The copy decides at the next step, over the rows still running then (the finishing
        # ones gone), their EMAs as it learnt this step (a decoding row that drafted), their
        # cached tokens then; the decoding rows that draft and still run then draft its k.
        alpha = floats[0]
        m = 0
        context = 0
        live = 0
        for j in range(n):
            r = ids[j]
            moved = 0
            a = 0
            if is_dec[j]:
                a = here[j]
                if a < 0:
                    a = pk.acc_len(values, offsets, r, num_emitted[r] - 1) - 1
                a = min(a, k)
                moved = a + 1
                if moved >= output[r] - num_emitted[r]:
                    continue
                if drafting[j]:
                    live += 1
            accepted_ema = ema[0, r]
            tried_ema = ema[1, r]
            if is_dec[j] and k > 0:
                accepted_ema = accepted_ema + (a - accepted_ema) * alpha
                tried_ema = tried_ema + (min(a + 1, k) - tried_ema) * alpha
            scratch[0, m] = accepted_ema
            scratch[1, m] = tried_ema
            context += num_computed[r] + moved
            m += 1
        k_next = pk._best_k(ints, table, scratch, m, batch_size - (n - m), context)
        if k_next < 0:
            return -1
        return k * drafting_new + k_next * live
    return 0


#: The kernel as written, for :func:`sim.engine.loop_kernel.compiled` to compile.
KERNEL = draft_proposed
