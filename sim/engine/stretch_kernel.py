"""The speculative stretch planner's per-sequence arithmetic as one compiled pass.

:func:`sim.engine.planner.plan_stretch` turns the running sequences' acceptance plans into each
planned step's aggregates. In numpy that is some thirty operations on (sequence × step) arrays
per stretch; :func:`stretch_aggregates` does the same integer arithmetic in one loop over the
sequences, compiled with numba when it is installed (imported on first use, the machine code
cached on disk). Everything here is integer arithmetic, so the compiled pass and the numpy
reference path give identical plans; a test runs whole scenarios both ways and compares the
records. Without numba the planner uses the numpy path.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

IntArray = NDArray[np.int64]


def _aggregates(
    plan_proposed: IntArray,
    plan_accepted: IntArray,
    start: IntArray,
    end: IntArray,
    shift: IntArray,
    computed0: IntArray,
    remaining: IntArray,
    num_steps: int,
    decode_take: int,
    num_old: int,
    block_size: int,
    in_place: bool,
    lookahead: int,
    steps_out: IntArray,
    emitted: IntArray,
    proposed: IntArray,
    accepted: IntArray,
    finish_step: IntArray,
) -> None:
    """Fill ``steps_out`` (10 × ``num_steps``: sequences, logit tokens, KV read tokens, causal
    pairs × 2, table blocks, drafting sequences, their new tokens, their context, full accepts,
    drafts proposed next) and the (sequence × step) ``emitted``, ``proposed``, ``accepted`` and
    ``finish_step`` of a stretch, as the numpy path computes them.

    Row r's verify step c reads its plan at ``start[r] + c - shift[r]`` (zero before ``shift``
    or from ``end[r]`` on); rows from ``num_old`` on are admitted in step 0, which they prefill
    (one token over ``prompt - 1`` computed). A running row's blocks also hold ``lookahead``
    slots (:attr:`SchedulerConfig.lookahead_slots <sim.engine.queues.SchedulerConfig>`), an
    admitted row's from step 1 on.
    """
    num_rows = len(computed0)
    for r in range(num_rows):
        cum = 0
        finish = num_steps
        for c in range(num_steps):
            position = start[r] + c - shift[r]
            a = plan_accepted[position] if shift[r] <= c and position < end[r] else 0
            before = cum
            cum += a + 1
            if finish == num_steps and cum >= remaining[r]:
                finish = c
            if c > finish:
                break
            position_next = position + 1
            p = plan_proposed[position] if shift[r] <= c and position < end[r] else 0
            p_next = plan_proposed[position_next] if position_next < end[r] else 0
            if shift[r] > c + 1:
                p_next = 0
            emit = min(a + 1, remaining[r] - before)
            take = decode_take + p
            if r >= num_old and c == 0:
                take = 1
            computed = computed0[r] + before
            held = computed + (0 if r >= num_old and c == 0 else lookahead)
            emitted[r, c] = emit
            proposed[r, c] = p
            accepted[r, c] = a
            steps_out[0, c] += 1
            steps_out[1, c] += take
            steps_out[2, c] += computed + take
            steps_out[3, c] += take * (2 * computed + take + 1)
            if in_place:
                steps_out[4, c] += -(-(held + take) // block_size)
            else:
                steps_out[4, c] += -(-(held + 1) // block_size) - (-(take - 1) // block_size)
            if c != finish:
                steps_out[5, c] += 1
                steps_out[6, c] += emit
                steps_out[7, c] += computed + emit
                if p > 0 and a == p:
                    steps_out[8, c] += 1
                steps_out[9, c] += p_next
        finish_step[r] = finish


@cache
def compiled() -> Callable[..., None] | None:
    """:func:`_aggregates` compiled by numba (cached on disk), or None without numba."""
    try:
        import numba
    except ImportError:
        return None
    function: Any = numba.njit(cache=True, nogil=True)(_aggregates)
    return function
