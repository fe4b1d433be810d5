"""The drafts of a planned stretch: from the running sequences' acceptance plans, per step the
sequences, logit tokens and blocks, and per sequence and step the tokens emitted and the drafts
proposed and accepted (:func:`_drafts` in numpy, :func:`_drafts_compiled` by the compiled pass of
:mod:`sim.engine.stretch_kernel`; the same numbers either way), for
:func:`sim.engine.planner.plan_stretch` to plan a stretch with drafts.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from sim.engine.kv_cache import blocks_for
from sim.engine.scheduler import Scheduler

IntArray = NDArray[np.int64]

#: What :func:`_drafts` returns: per step (over the planned steps) the sequences, logit tokens and
#: block-table blocks; a function giving the other per-step sums over the first ``length`` steps
#: (KV read tokens, causal pairs × 2, and the drafting work: sequences, new tokens, context, full
#: accepts, drafts proposed next); per sequence and step the tokens emitted, drafts proposed and
#: accepted; each sequence's finishing step.
Drafts = tuple[
    tuple[IntArray, IntArray, IntArray],
    Callable[[int], list[IntArray]],
    IntArray,
    IntArray,
    IntArray,
    IntArray,
]


def _drafts(
    s: Scheduler,
    ids: IntArray,
    computed0: IntArray,
    remaining: IntArray,
    m: int,
    num_old: int,
) -> Drafts:
    """The numpy reference of the stretch arithmetic with drafts over ``m`` steps (see
    :data:`Drafts`). Rows from ``num_old`` on are admitted in step 0."""
    r, kv, plan = s.requests, s.kv, s.plan
    j = np.arange(m)
    if not len(plan.proposed):
        proposed_all = accepted = np.zeros((len(ids), m + 1), dtype=np.int64)
    elif num_old == len(ids):
        proposed_all, accepted = plan.window(ids, r.num_decode_steps[ids], m + 1)
    elif not plan.adaptive:
        # Admitted requests draft from step 1: their plans start one column later, one window
        # for all rows read from step -1 for them (column 0, before their plan, is set to 0).
        step_index = r.num_decode_steps[ids]
        step_index[num_old:] = -1
        proposed_all, accepted = plan.window(ids, step_index, m + 1)
        proposed_all[num_old:, 0] = 0
        accepted[num_old:, 0] = 0
    else:
        # A policy plays its plan forward from each row's position: a window per group.
        old, admit = ids[:num_old], ids[num_old:]
        old_proposed, old_accepted = plan.window(old, r.num_decode_steps[old], m + 1)
        new_proposed, new_accepted = plan.window(admit, np.zeros(len(admit), np.int64), m)
        pad = np.zeros((len(admit), 1), dtype=np.int64)
        proposed_all = np.vstack((old_proposed, np.hstack((pad, new_proposed))))
        accepted = np.vstack((old_accepted, np.hstack((pad, new_accepted))))
    accepted = accepted[:, :m]
    raw = accepted + 1
    cum = np.cumsum(raw, axis=1)
    before = cum - raw
    # Emissions only grow: the finishing step is the count of steps still short of the end
    # (m when the request does not finish within the plan).
    finish_step = (cum < remaining[:, None]).sum(axis=1)
    active = j <= finish_step[:, None]
    drafting = active & (j != finish_step[:, None])
    # Emissions stop at the request's end: the last step emits what is left.
    emitted = np.minimum(accepted + 1, remaining[:, None] - before) * active
    proposed = proposed_all[:, :m] * active
    accepted = accepted * active
    computed = computed0[:, None] + before
    take = ((1 + s.config.extra_tokens_per_decode) + proposed) * active
    # With computed = prompt - 1 and one token, an admitted request's step 0 holds and reads
    # exactly its prompt's KV; its token count and causal pairs are corrected after.
    take[num_old:, 0] = 1
    # A running sequence also holds the lookahead slots; one admitted in step 0 does not yet.
    held = computed + s.config.lookahead_slots
    held[num_old:, 0] -= s.config.lookahead_slots
    if s.config.rollback_policy == "in_place":
        blocks = (blocks_for(held + take, kv.block_size) * active).sum(axis=0)
    else:
        blocks = (
            (blocks_for(held + 1, kv.block_size) + blocks_for(take - 1, kv.block_size)) * active
        ).sum(axis=0)

    def rest(length: int) -> list[IntArray]:
        c = slice(0, length)
        comp, tk, act, dr, em = (
            computed[:, c],
            take[:, c],
            active[:, c],
            drafting[:, c],
            emitted[:, c],
        )
        pr, ac = proposed[:, c], accepted[:, c]
        return [
            ((comp + tk) * act).sum(axis=0),
            (tk * (2 * comp + tk + 1)).sum(axis=0),
            dr.sum(axis=0),
            (em * dr).sum(axis=0),
            ((comp + em) * dr).sum(axis=0),
            (dr & (pr > 0) & (ac == pr)).sum(axis=0),
            (proposed_all[:, 1 : length + 1] * dr).sum(axis=0),
        ]

    first = (active.sum(axis=0), take.sum(axis=0), blocks)
    return first, rest, emitted, proposed, accepted, finish_step


def _drafts_compiled(
    kernel: Callable[..., None],
    s: Scheduler,
    ids: IntArray,
    computed0: IntArray,
    remaining: IntArray,
    m: int,
    num_old: int,
) -> Drafts:
    """:func:`_drafts` by the compiled pass of :mod:`sim.engine.stretch_kernel`."""
    r, plan = s.requests, s.plan
    if len(plan.proposed):
        plan_proposed, plan_accepted = plan._padded()
        start = plan.offsets[ids].copy()
        start[:num_old] += r.num_decode_steps[ids[:num_old]]
        end = plan.offsets[ids + 1]
    else:
        plan_proposed = plan_accepted = np.zeros(1, dtype=np.int64)
        start = end = np.zeros(len(ids), dtype=np.int64)
    shift = np.zeros(len(ids), dtype=np.int64)
    shift[num_old:] = 1
    steps_out = np.zeros((10, m), dtype=np.int64)
    emitted = np.zeros((len(ids), m), dtype=np.int64)
    proposed = np.zeros((len(ids), m), dtype=np.int64)
    accepted = np.zeros((len(ids), m), dtype=np.int64)
    finish_step = np.zeros(len(ids), dtype=np.int64)
    kernel(
        plan_proposed,
        plan_accepted,
        start,
        end,
        shift,
        computed0,
        remaining,
        m,
        1 + s.config.extra_tokens_per_decode,
        num_old,
        s.kv.block_size,
        s.config.rollback_policy == "in_place",
        s.config.lookahead_slots,
        steps_out,
        emitted,
        proposed,
        accepted,
        finish_step,
    )

    def rest(length: int) -> list[IntArray]:
        return [steps_out[row, :length] for row in (2, 3, 5, 6, 7, 8, 9)]

    first = (steps_out[0], steps_out[1], steps_out[4])
    return first, rest, emitted, proposed, accepted, finish_step
