"""The compiled loop's kernel: a lone node's steps, one after another, in one numba function.

:mod:`sim.engine.compiled_loop` says what it covers and how it stays identical to the Python
path, and hands it the node's state (laid out as :mod:`sim.engine.loop_state` says).
:func:`_loop` is plain Python: it releases arrivals, asks the policy for k
(:mod:`sim.engine.policy_kernel`), schedules the step (:mod:`sim.engine.loop_schedule`), shapes
and prices it (:mod:`sim.engine.loop_emit`, the evaluator of :mod:`sim.engine.cost_eval`),
records it and commits it (:mod:`sim.engine.loop_emit`). :func:`compiled` compiles it with
numba, the machine code cached on disk, with those parts inlined: one function, as a call per
step with some thirty arrays costs more than the step's arithmetic. Nothing in it allocates or
counts references (numba's ``_nrt`` off).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sim.engine import (
    cost_eval,
    loop_arrivals,
    loop_emit,
    loop_schedule,
    loop_state,
    policy_kernel,
    policy_lookahead,
)
from sim.engine.loop_state import (
    _FINISHED_N,
    _FREE,
    _HEAP_N,
    _ITL,
    _MISSING,
    _NEXT,
    _QHEAD,
    _QTAIL,
    _RECORDS,
    _RUNNING_N,
    _STARTED,
    _STEPS,
    DONE,
    FULL,
    MISSING,
    PYTHON,
)

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


def _loop(stamp: int) -> Callable[..., int]:
    """The loop, with ``stamp`` (a digest of the cost evaluator's source, see :func:`compiled`)
    bound in its closure: numba keys its disk cache on the closure's values as well as the code,
    and the evaluator's machine code is kept inside the loop's, so a changed evaluator compiles
    a new loop instead of reusing a stale one."""

    def run_steps(
        columns: tuple[Any, ...],
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
        request columns and the KV holdings (``columns``, as
        :func:`~sim.engine.loop_state.request_columns` gives them) are updated for every step
        run, and nothing of the step that stopped the loop is. ``clock`` holds the node's clock
        and the horizon: after its first step the loop starts no step at or after ``clock[1]``
        (:data:`FULL`).

        The waiting queue is ``queue[ints[_QHEAD]:ints[_QTAIL]]``; arrivals join its end.
        Open loop: the arrivals are ``times`` (sorted), from ``ints[_NEXT]`` on, sent by their
        clients at ``client_at``. Closed loop (``cfg[_CLOSED]``): the pending arrivals are a
        binary heap of ``ints[_HEAP_N]`` entries (``heap_t``, ``heap_r``) and each finish sends
        the next request of ``starts`` (from ``ints[_STARTED]``), ``follow_s`` (the egress delay,
        then the think time) after it ends, noting when in ``client_sent_at``; with a front end
        (``server``: enabled, when its server is free, the latest time offered) the request
        reaches the engine after its ingress (``service_s``). The records go to ``rec_f`` and
        ``rec_i`` (rows: loop_state's columns), the gaps longer than a step to ``itl_values``/
        ``itl_at``. ``cost``: the cost evaluator's
        parameters and tables (:class:`~sim.engine.cost_kernel.LoweredCost`), as it takes them
        after the step's shape. ``policy``: a per-step policy's state and the acceptance per
        output position (:class:`~sim.engine.policy_state.LoweredPolicy`; kind 0: none, the
        plan is ``offsets``/``plan_proposed``/``plan_accepted``). ``buffers``: one step's rows
        and the evaluator's inputs (:func:`~sim.engine.loop_state.step_buffers`)."""
        if stamp < 0:
            return PYTHON
        # The request columns, in loop_state.REQUEST_COLUMNS's order.
        (prompt, output, num_emitted, num_computed, num_decode_steps, last_emit_step,
         last_emit_at, first_token_at, finished_at, scheduled_at, num_cached, state, arrival_at,
         engine_arrival_at, num_drafted, num_accepted, num_preemptions, held,
         logical) = columns  # fmt: skip
        (max_seqs, max_budget, chunked, extra, block_size, num_blocks, has_plan, speculative,
         max_steps, closed, lookahead) = _config(cfg)  # fmt: skip
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
        ids, here_row = row_ints[loop_state.ROW_ID], row_ints[loop_state.ROW_HERE]
        prop, acc = row_ints[loop_state.ROW_PROPOSED], row_ints[loop_state.ROW_ACCEPTED]
        sched_cfg = (max_budget, extra, block_size, num_blocks, has_plan, lookahead)
        plan = (offsets, plan_proposed, plan_accepted)
        fixed_plan = (has_plan and not adaptive, offsets, plan_proposed, plan_accepted)
        requests = (num_emitted, num_computed, num_decode_steps, last_emit_step, last_emit_at,
                    first_token_at, finished_at, scheduled_at, num_cached, state, num_drafted,
                    num_accepted, num_preemptions, output)  # fmt: skip
        status = FULL
        while True:
            # Arrivals at or before the clock join the queue.
            qtail, nxt, heap_n = _release(
                now, closed, queue, qtail, state, arrival_at, engine_arrival_at,
                (times, client_at, nxt), (heap_t, heap_r, heap_n, client_sent_at),
            )  # fmt: skip
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
            # --- the step's rows: the running within the budget, then admissions
            n, free, num_preempted, taken, go_on = _schedule_running(
                running, num_running, prompt, num_emitted, num_computed, num_decode_steps, held,
                row_ints, is_dec, sched_cfg, num_free, qhead, plan, (adaptive, oracle, k_chosen,
                k_max, acc_values, acc_offsets, acc_cache),
            )  # fmt: skip
            if not go_on:
                status = PYTHON
                break
            num_scheduled = n
            stop = False
            if num_preempted == 0:  # none admitted after a preemption
                n, _, free, stop = _admit(
                    queue, qhead, qtail, prompt, num_emitted, num_computed, held, row_ints,
                    is_dec, n, num_running, max_seqs, max_budget - taken, chunked, block_size,
                    free,
                )  # fmt: skip
            if stop or n == 0:
                status = PYTHON
                break
            # --- the step's emission, its shape and its drafting work (general_block)
            step0 = num_steps
            batch_after = num_running - num_preempted + n - num_scheduled
            # A step after which the policy drafts nothing (disable-above-batch above its batch
            # size) gathers no drafting work: a plain step's. (Each call with its own flag: a
            # flag that varies by step made fixed-k steps 0.17 s against 0.095 s at 30,000.)
            drafts = speculative
            if adaptive and speculative and not _pk_drafts(pol_ints, batch_after):
                drafts = False
                shaped = _step_shape(
                    row_ints, is_dec, drafting, n, prompt, output, num_emitted,
                    num_decode_steps, last_emit_step, step0, False, fixed_plan, shape,
                )  # fmt: skip
            else:
                shaped = _step_shape(
                    row_ints, is_dec, drafting, n, prompt, output, num_emitted,
                    num_decode_steps, last_emit_step, step0, speculative, fixed_plan, shape,
                )  # fmt: skip
            (num_decode, decode_tokens, emitted_sum, drafted_sum, accepted_sum, spec_k, regular,
             drafting_dec, verified) = shaped  # fmt: skip
            if adaptive and drafts:
                # The next verify step's drafts (AdaptivePlan.lookup one step ahead).
                work_seqs = shape[5, 0]
                work_proposed = _pk_draft(
                    pol_ints, pol_floats, staged, slots, slot_steps, slot_floats, pol_ema,
                    pol_table, pol_scratch, acc_values, acc_offsets, acc_cache, ids, is_dec,
                    drafting, here_row, n, batch_after, num_decode, drafting_dec,
                    work_seqs - drafting_dec, num_emitted, output, num_computed,
                )  # fmt: skip
                if work_proposed < 0:
                    status = policy_kernel.NEED_STEP_TIME
                    break
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
            # --- the step's record, then its commit (Scheduler.schedule, EngineCore.apply_block)
            duration = out[6, 0]
            if adaptive:
                _pk_observe(pol_ints, pol_floats, staged, slots, slot_steps, slot_floats,
                            pol_ema, ids, prop, acc, n, verified, accepted_sum)  # fmt: skip
            j = num_records
            rec_f[0, j] = now
            rec_f[1, j] = duration
            for row in range(6):
                rec_f[2 + row, j] = out[row, 0]
            num_tokens = shape[1, 0]
            rec_i[0, j] = n
            rec_i[1, j] = num_decode
            rec_i[2, j] = n - num_decode
            rec_i[3, j] = num_tokens
            rec_i[4, j] = num_tokens - decode_tokens
            rec_i[5, j] = emitted_sum
            rec_i[6, j] = drafted_sum
            rec_i[7, j] = spec_k
            rec_i[8, j] = accepted_sum
            rec_i[9, j] = num_blocks - free
            rec_i[10, j] = num_waiting
            rec_i[11, j] = regular
            num_records += 1
            end = now + duration
            (num_free, qhead, num_itl, heap_n, started, finished, num_running) = _commit(
                requests, (held, logical, free, block_size), row_ints, is_dec, n, num_scheduled,
                num_preempted, queue, qhead, running, num_running, (now, end, step0),
                (itl_values, itl_at, num_itl), (closed, starts, started, follow_s, server,
                service_s, client_sent_at, (heap_t, heap_r, heap_n)),
            )  # fmt: skip
            num_finished += finished
            now = end
            num_steps += 1
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


# The loop's parts, bound compiled by :func:`compiled`.
_config = loop_state.config
_release = loop_arrivals.release
_schedule_running = loop_schedule.schedule_running
_admit = loop_schedule.admit
_step_shape = loop_emit.step_shape
_commit = loop_emit.commit
_pk_stage = policy_kernel.stage
_pk_schedule = policy_kernel.schedule_k
_pk_drafts = policy_kernel.drafts_next
_pk_draft = policy_lookahead.draft_proposed
_pk_observe = policy_kernel.observe


def _evaluate(*args: Any) -> int:
    """The cost evaluator (:func:`sim.engine.cost_eval.evaluate`), bound by :func:`compiled`."""
    raise RuntimeError("the compiled loop's evaluator is bound by compiled()")


@cache
def compiled() -> Callable[..., int] | None:
    """The loop of :func:`_loop` compiled by numba (cached on disk), or None without numba."""
    evaluator = cost_eval.compiled()
    if evaluator is None:
        return None
    import numba

    # The helpers and the policy kernels allocate nothing, so they run without numba's
    # reference counting (_nrt=False, numba's own option, left out of its type stubs): with
    # it, a compiled function takes a reference on each array it is passed, on entry, and
    # drops it on return, two atomic operations per array per call. The policy kernels are
    # called three times a step with some twenty arrays: that was a third of an sglang-ema
    # run's loop (0.24 s against 0.18 s of CPU at 30,000 requests, with the same steps).
    plain: Any = numba.njit(cache=True, nogil=True, _nrt=False)  # type: ignore[call-overload]
    inline: Any = numba.njit(cache=True, nogil=True, inline="always")
    # Each module's functions call the others through their module's names: every one
    # compiled before its callers. The step's parts are inlined: a call a step would copy some
    # thirty arrays' descriptors.
    parts = ((loop_arrivals, ("before", "heap_push", "heap_pop"), plain),
             (loop_schedule, ("lookup",), plain),
             (loop_state, ("config",), inline),
             (policy_kernel, tuple(kernel.__name__ for kernel in policy_kernel.KERNELS), plain),
             (loop_arrivals, ("release",), inline),
             (loop_schedule, ("schedule_running", "admit"), inline),
             (loop_emit, ("step_shape", "commit"), inline))  # fmt: skip
    for module, names, how in parts:
        for name in names:
            setattr(module, name, how(getattr(module, name)))
    policy_lookahead.draft_proposed = plain(policy_lookahead.KERNEL)
    globals().update(
        _config=loop_state.config, _release=loop_arrivals.release,
        _schedule_running=loop_schedule.schedule_running, _admit=loop_schedule.admit,
        _step_shape=loop_emit.step_shape, _commit=loop_emit.commit,
        _pk_stage=policy_kernel.stage, _pk_schedule=policy_kernel.schedule_k,
        _pk_drafts=policy_kernel.drafts_next, _pk_draft=policy_lookahead.draft_proposed,
        _pk_observe=policy_kernel.observe,
    )  # fmt: skip
    # The evaluator inlined into the loop, not called: the step's cost at 0.39 us a step
    # instead of 0.75 (1,000 requests at 1 request/s, 115,200 steps; 0.58 against 0.96 us at 5
    # requests/s), the same operations in the same order.
    globals()["_evaluate"] = inline(cost_eval.evaluate)
    stamp = _source_stamp()
    # The loop allocates nothing (its buffers are the caller's: loop_state.step_buffers), so
    # it too runs without reference counting.
    loop: Any = plain(_loop(stamp))
    return loop


def _source_stamp() -> int:
    """A digest of the source of this module and of every one whose code the loop's machine
    code holds (non-negative)."""
    digest = hashlib.sha256()
    for module in (cost_eval, loop_emit, loop_arrivals, loop_schedule, loop_state, policy_kernel,
                   policy_lookahead):  # fmt: skip
        digest.update(Path(module.__file__ or "").read_bytes())
    digest.update(Path(__file__).read_bytes())
    return int.from_bytes(digest.digest()[:7], "little")
