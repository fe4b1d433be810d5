"""A per-step policy's state as the compiled loop's arrays.

Covered: ``disable-above-batch``, ``oracle``, ``sglang-ema`` (its slots and hysteresis) and
``goodput`` (its EMAs; its step times read from the run's own tabulated cost model, the table the
policy fills in Python, a context bin at a time as the loop meets them:
:data:`~sim.engine.policy_kernel.NEED_STEP_TIME`). ``fixed``
never gets here: the run is built with the fixed-k plan it amounts to
(:meth:`PositionAcceptance.fixed_plan <sim.engine.policies.PositionAcceptance.fixed_plan>`).
Anything else (another policy class, a step time that is not tabulated) keeps the Python path:
:func:`lower` returns None.

:class:`LoweredPolicy` holds the arrays the kernels of :mod:`sim.engine.policy_kernel` read and
write, taken from the Python policy before each call of the loop and given back after it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.engine.policies import (
    DisableAboveBatchPolicy,
    GoodputPolicy,
    OraclePolicy,
    SglangEmaPolicy,
    TabulatedStepTime,
)
from sim.engine.policies.goodput import CONTEXT_BIN_TOKENS
from sim.engine.policy_kernel import (
    _ACTIVE,
    _BIN_TOKENS,
    _COUNT,
    _CURRENT,
    _EMA,
    _INTERVAL,
    _K,
    _K_MAX,
    _KIND,
    _MAX_BATCH,
    _NEED_B,
    _NEED_CONTEXT,
    _NUM_INTS,
    _NUM_SLOTS,
    _SINCE,
    _STEPS,
    _TWO_ROWS,
    _WARMUP,
    DISABLE,
    GOODPUT,
    NONE,
    ORACLE,
    SGLANG,
)


class LoweredPolicy:
    """An :class:`~sim.engine.policies.AdaptivePlan`'s policy as the loop's arrays: taken
    from the policy before each call of the loop (:meth:`take_over`) and given back after it
    (:meth:`hand_back`), so the Python path goes on from where the loop left it. Build with
    :func:`lower`."""

    def __init__(self, plan: Any, max_num_seqs: int, max_context: int) -> None:
        self.plan = plan
        policy = plan.policy
        self.kind = _kind_of(policy)
        ints = np.zeros(_NUM_INTS, dtype=np.int64)
        ints[_KIND] = self.kind
        ints[_K_MAX] = plan.k_max
        ints[_K] = getattr(policy, "k", plan.k_max)
        ints[_MAX_BATCH] = getattr(policy, "max_batch_size", 0)
        ints[_INTERVAL] = getattr(policy, "update_interval", 1)
        ints[_WARMUP] = getattr(policy, "warmup_batches", 0)
        self.ints = ints
        self.floats = np.array([getattr(policy, "ema_alpha", 0.0)], dtype=np.float64)
        self.staged = np.zeros(3, dtype=np.int64)
        num_slots = len(getattr(policy, "slots", ())) or 1
        most = max((len(s.steps) for s in getattr(policy, "slots", ())), default=1)
        self.slots = np.zeros((num_slots, 4), dtype=np.int64)
        self.slot_steps = np.zeros((num_slots, most), dtype=np.int64)
        self.slot_floats = np.zeros((num_slots, 3), dtype=np.float64)
        ints[_NUM_SLOTS] = num_slots
        # Goodput's gathered accepted and tried EMAs (rows 0, 1) and power sums (row 2).
        self.scratch = np.zeros((3, max(max_num_seqs, plan.k_max) + 1), dtype=np.float64)
        self.ema = policy._ema if self.kind == GOODPUT else np.zeros((2, 1))
        # Goodput's step times by (batch size, context bin): NaN until tabulated.
        bins = max_context // _BIN_TOKENS + 2 if self.kind == GOODPUT else 1
        rows = max_num_seqs + 1 if self.kind == GOODPUT else 1
        self.table = np.full((rows, bins, 2, plan.k_max + 1), np.nan)
        # The oracle's acc_len per request: the position last read, its value (-1: none).
        requests = len(plan.acceptance.offsets) - 1 if self.kind == ORACLE else 1
        self.acc_cache = np.full((requests, 2), -1, dtype=np.int64)

    def arrays(self) -> tuple[Any, ...]:
        """What the loop takes (in this order)."""
        acceptance = self.plan.acceptance
        return (
            self.ints,
            self.floats,
            self.staged,
            self.slots,
            self.slot_steps,
            self.slot_floats,
            self.ema,
            self.table,
            self.scratch,
            acceptance.values,
            acceptance.offsets,
            self.acc_cache,
        )

    def take_over(self) -> None:
        """The policy's state into the arrays (the Python path may have moved it; a learning
        policy's object may have been replaced by the state it adopted)."""
        plan, ints = self.plan, self.ints
        object.__setattr__(plan, "_played", None)  # a general step follows, not a window
        policy = plan.policy
        if self.kind == SGLANG:
            ints[_ACTIVE] = policy._active
            for i, slot in enumerate(policy.slots):
                self.slots[i] = (slot.lowest_batch, slot.current, slot.batch_count,
                                 len(slot.steps))  # fmt: skip
                self.slot_steps[i, : len(slot.steps)] = slot.steps
                self.slot_floats[i] = (slot.ema, slot.down_hysteresis, slot.up_hysteresis)
        elif self.kind == GOODPUT:
            self.ema = policy._ema
            ints[_CURRENT] = policy.current
            ints[_SINCE] = policy.since_update

    def hand_back(self) -> None:
        """The arrays' state into the policy."""
        policy, ints = self.plan.policy, self.ints
        if self.kind == SGLANG:
            policy._active = int(ints[_ACTIVE])
            for i, slot in enumerate(policy.slots):
                slot.current = int(self.slots[i, _STEPS])
                slot.batch_count = int(self.slots[i, _COUNT])
                slot.ema = float(self.slot_floats[i, _EMA])
        elif self.kind == GOODPUT:
            policy.current = int(ints[_CURRENT])
            policy.since_update = int(ints[_SINCE])

    def tabulate(self) -> None:
        """Fill the step-time entry the loop asked for (:data:`NEED_STEP_TIME`) from the
        policy's own table (the values its Python path reads)."""
        b, context = int(self.ints[_NEED_B]), int(self.ints[_NEED_CONTEXT])
        per_seq = round(float(context) / max(b, 1) / _BIN_TOKENS)
        k_max = int(self.ints[_K_MAX])
        step_time = self.plan.policy.step_time
        if step_time.rows_of is not None and b <= step_time.max_batch:
            # Every batch size the policy's table holds in that bin (it tabulates many at once).
            row = step_time.row(k_max, per_seq, b)
            if per_seq >= self.table.shape[1]:
                self._grow(len(row), per_seq)
            self.ints[_TWO_ROWS] = row.ndim == 3
            count = min(len(row), self.table.shape[0])
            self.table[:count, per_seq] = row[:count] if row.ndim == 3 else row[:count, None]
            return
        seconds = np.asarray(step_time(b, k_max, context))
        if b >= self.table.shape[0] or per_seq >= self.table.shape[1]:
            self._grow(b + 1, per_seq)
        self.ints[_TWO_ROWS] = seconds.ndim == 2
        self.table[b, per_seq] = seconds if seconds.ndim == 2 else seconds[None, :]

    def _grow(self, sizes: int, per_seq: int) -> None:
        """Room in the step-time table for ``sizes`` batch sizes and bin ``per_seq``."""
        rows, bins = self.table.shape[:2]
        grown = np.full(
            (max(sizes, rows), max(per_seq + 1, 2 * bins), *self.table.shape[2:]), np.nan
        )
        grown[:rows, :bins] = self.table
        self.table = grown


def _kind_of(policy: Any) -> int:
    kind = type(policy)
    if kind is DisableAboveBatchPolicy:
        return DISABLE
    if kind is OraclePolicy:
        return ORACLE
    if kind is SglangEmaPolicy:
        return SGLANG
    if (
        kind is GoodputPolicy
        and isinstance(policy.step_time, TabulatedStepTime)
        and CONTEXT_BIN_TOKENS == _BIN_TOKENS
    ):
        return GOODPUT
    return NONE


def lower(plan: Any, max_num_seqs: int, max_context: int) -> LoweredPolicy | None:
    """``plan``'s policy for the loop, or None where it keeps the Python path: a plan that is
    not an AdaptivePlan, a policy the loop does not compile (another class, ``fixed`` left
    adaptive, a goodput step time that is not the tabulated one)."""
    if not getattr(plan, "adaptive", False):
        return None
    if _kind_of(plan.policy) == NONE:
        return None
    return LoweredPolicy(plan, max_num_seqs, max_context)
