"""``sglang-ema``: SGLang's adaptive ``speculative_num_steps``, an EMA controller per batch slot.

The rule (sgl-project/sglang PR #21599, ``python/sglang/srt/speculative/adaptive_spec_params.py``):
an EMA of the batch's mean accepted drafts, ``ema <- (1 - ema_alpha) ema + ema_alpha mean``,
started at ``steps - 1``; after ``warmup_batches`` verify batches, every ``update_interval``
batches, the step count falls to the next lower candidate while
``ema <= lower - 0.5 + down_hysteresis`` and rises to the next higher while
``ema > current - 0.5 + up_hysteresis``. Defaults from that file: candidates (1, 3, 7), ema_alpha
0.2, update_interval 5, warmup_batches 10, down_hysteresis -0.25, up_hysteresis 0.0; SGLang adds
the configured steps to the candidates, and so do we. ``batch_slots`` (PR #24055): one such
controller per batch-size range.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.engine.policies.base import BatchView, IntArray, SpeculationPolicy, _check_range
from sim.errors import ScenarioError

#: SGLang's defaults (PR #21599, adaptive_spec_params.py).
SGLANG_CANDIDATE_STEPS = (1, 3, 7)
SGLANG_EMA_ALPHA = 0.2
SGLANG_UPDATE_INTERVAL = 5
SGLANG_WARMUP_BATCHES = 10
SGLANG_DOWN_HYSTERESIS = -0.25
SGLANG_UP_HYSTERESIS = 0.0


#: SGLang's per-batch-size slots (PR #24055, merged): (lowest batch size, candidate steps,
#: down hysteresis, up hysteresis); each slot keeps its own EMA, step count and counters.
SGLANG_BATCH_SLOTS = (
    (1, (1, 3, 7), -0.25, 0.0),
    (64, (1, 2, 5), 0.0, 0.0),
    (128, (1, 2, 6), 0.25, -0.1),
)


@dataclass
class _EmaSlot:
    """One batch-size range's EMA controller (SGLang's ``AdaptiveSpeculativeParams``)."""

    lowest_batch: int
    steps: tuple[int, ...]
    down_hysteresis: float
    up_hysteresis: float
    current: int
    ema: float
    batch_count: int = 0


class SglangEmaPolicy(SpeculationPolicy):
    """SGLang's adaptive ``speculative_num_steps``: EMA of accepted drafts with hysteresis (rule
    and defaults in the module docstring). One choice for the whole batch.

    ``batch_slots`` (SGLang PR #24055): a list of ``{min_batch_size, candidate_steps,
    down_hysteresis, up_hysteresis}``, or ``sglang`` for that PR's defaults (batch sizes from 1,
    64 and 128). A verify batch of ``b`` sequences reads and updates only the slot of the highest
    ``min_batch_size <= b``; each slot has its own EMA, step count and warm-up. Without it, one
    slot (PR #21599).
    """

    name = "sglang-ema"
    learns = True

    def __init__(
        self,
        k_max: int,
        candidate_steps: tuple[int, ...] | list[int] | None = None,
        ema_alpha: float = SGLANG_EMA_ALPHA,
        update_interval: int = SGLANG_UPDATE_INTERVAL,
        warmup_batches: int = SGLANG_WARMUP_BATCHES,
        down_hysteresis: float = SGLANG_DOWN_HYSTERESIS,
        up_hysteresis: float = SGLANG_UP_HYSTERESIS,
        batch_slots: str | list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(k_max)
        if not 0.0 < ema_alpha <= 1.0:
            raise ScenarioError(
                f"speculation.policy.params.ema_alpha: must be in (0, 1], got {ema_alpha}"
            )
        _check_range("update_interval", update_interval, 1, 1 << 20)
        _check_range("warmup_batches", warmup_batches, 0, 1 << 20)
        self.ema_alpha = float(ema_alpha)
        self.update_interval = int(update_interval)
        self.warmup_batches = int(warmup_batches)
        if batch_slots is None:
            specs = [(1, candidate_steps, down_hysteresis, up_hysteresis, "")]
        else:
            if candidate_steps is not None:
                raise ScenarioError(
                    "speculation.policy.params.candidate_steps: give the steps per slot in "
                    "batch_slots, not both"
                )
            specs = _slot_specs(batch_slots)
        self.slots = [self._slot(*spec) for spec in specs]
        self.batch_dependent = len(self.slots) > 1
        self._active = 0

    def _slot(
        self,
        lowest: int,
        candidate_steps: tuple[int, ...] | list[int] | None,
        down: float,
        up: float,
        where: str,
    ) -> _EmaSlot:
        k_max = self.k_max
        if candidate_steps is None:
            # SGLang adds the configured steps to its candidates; ours stop at k_max.
            steps = {s for s in SGLANG_CANDIDATE_STEPS if s <= k_max} | {k_max}
        elif where:
            # A slot's steps above the configured most are not built; the most always is.
            steps = {int(s) for s in candidate_steps if int(s) <= k_max} | {k_max}
        else:
            steps = {int(s) for s in candidate_steps}
            for s in steps:
                _check_range("candidate_steps", s, 1, k_max)
            steps.add(k_max)
        ordered = tuple(sorted(steps))
        if len(ordered) < 2:
            raise ScenarioError(
                f"speculation.policy.params.{where}candidate_steps: need two steps at least, "
                f"got {list(ordered)} (k_max {k_max})"
            )
        for key, value in (("down_hysteresis", down), ("up_hysteresis", up)):
            if not -1.0 <= value <= 1.0:
                raise ScenarioError(f"speculation.policy.params.{where}{key}: must be in [-1, 1]")
        return _EmaSlot(lowest, ordered, float(down), float(up), k_max, float(k_max - 1))

    # The single-slot view (PR #21599) used by reports and tests.
    @property
    def steps(self) -> tuple[int, ...]:
        return self.slots[0].steps

    @property
    def current(self) -> int:
        return self.slots[self._active].current

    @property
    def ema(self) -> float:
        return self.slots[self._active].ema

    def _slot_of(self, batch_size: int) -> int:
        index = 0
        for i, slot in enumerate(self.slots):
            if slot.lowest_batch <= batch_size:
                index = i
        return index

    def choose(self, view: BatchView) -> IntArray:
        self._active = self._slot_of(len(view.ids))
        return np.full(len(view.ids), self.slots[self._active].current, dtype=np.int64)

    def holds_as_batch_shrinks(self, batch_size: int) -> bool:
        # Within the lowest slot every smaller batch reads and updates that slot too (a verify
        # batch's slot is that of its drafting sequences, which a finish only makes fewer).
        return len(self.slots) == 1 or batch_size < self.slots[1].lowest_batch

    def holds_for(self) -> int:
        c = self.slots[self._active].batch_count
        w, u = self.warmup_batches, self.update_interval
        # The next count after which the choice is recomputed: > w and (count - w) % u == 0.
        following = w + u * ((max(c, w) - w) // u + 1)
        return following - c

    def fork(self) -> SglangEmaPolicy:
        # By hand: copy.copy goes through __reduce_ex__, some microseconds a slot, and a run
        # forks at every planned stretch.
        twin = object.__new__(SglangEmaPolicy)
        twin.__dict__.update(self.__dict__)
        twin.slots = [
            _EmaSlot(s.lowest_batch, s.steps, s.down_hysteresis, s.up_hysteresis, s.current,
                     s.ema, s.batch_count)
            for s in self.slots
        ]  # fmt: skip
        return twin

    def observe(self, ids: IntArray, proposed: IntArray, accepted: IntArray) -> None:
        verifying = proposed > 0
        counts = verifying.sum(axis=0)
        sums = (accepted * verifying).sum(axis=0)
        for count, total in zip(counts.tolist(), sums.tolist(), strict=True):
            if count == 0:
                continue  # SGLang skips an empty verify batch without counting it
            slot = self.slots[self._slot_of(count)]
            slot.ema = (1.0 - self.ema_alpha) * slot.ema + self.ema_alpha * (total / count)
            slot.batch_count += 1
            c, w = slot.batch_count, self.warmup_batches
            if c > w and (c - w) % self.update_interval == 0:
                _recompute(slot)

    def candidates(self) -> tuple[int, ...]:
        return tuple(sorted({s for slot in self.slots for s in slot.steps}))

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "candidate_steps": list(self.steps),
            "ema_alpha": self.ema_alpha,
            "update_interval": self.update_interval,
            "warmup_batches": self.warmup_batches,
            "down_hysteresis": self.slots[0].down_hysteresis,
            "up_hysteresis": self.slots[0].up_hysteresis,
            "source": "sgl-project/sglang PR #21599 adaptive_spec_params.py",
        }
        if len(self.slots) > 1:
            out["batch_slots"] = [
                {
                    "min_batch_size": slot.lowest_batch,
                    "candidate_steps": list(slot.steps),
                    "down_hysteresis": slot.down_hysteresis,
                    "up_hysteresis": slot.up_hysteresis,
                }
                for slot in self.slots
            ]
            out["source"] += "; per-batch-size slots: PR #24055"
        return out


def _recompute(slot: _EmaSlot) -> None:
    """SGLang's step rule with hysteresis on one slot (module docstring)."""
    index = slot.steps.index(slot.current)
    while index > 0 and slot.ema <= slot.steps[index - 1] - 0.5 + slot.down_hysteresis:
        index -= 1
    while index < len(slot.steps) - 1 and slot.ema > slot.steps[index] - 0.5 + slot.up_hysteresis:
        index += 1
    slot.current = slot.steps[index]


def _slot_specs(
    batch_slots: str | list[dict[str, Any]],
) -> list[tuple[int, Any, float, float, str]]:
    """The slots as (lowest batch, steps, down, up, key prefix). Raise ScenarioError naming the
    key if a slot is malformed."""
    if batch_slots == "sglang":
        return [(b, steps, dn, up, f"batch_slots[{i}].") for i, (b, steps, dn, up) in
                enumerate(SGLANG_BATCH_SLOTS)]  # fmt: skip
    if not isinstance(batch_slots, list) or not batch_slots:
        raise ScenarioError(
            "speculation.policy.params.batch_slots: 'sglang' or a non-empty list of "
            f"{{min_batch_size, candidate_steps, down_hysteresis, up_hysteresis}}, got "
            f"{batch_slots!r}"
        )
    specs = []
    for i, entry in enumerate(batch_slots):
        where = f"batch_slots[{i}]."
        known = {"min_batch_size", "candidate_steps", "down_hysteresis", "up_hysteresis"}
        if not isinstance(entry, dict) or not set(entry) <= known or "min_batch_size" not in entry:
            raise ScenarioError(
                f"speculation.policy.params.{where[:-1]}: a mapping with min_batch_size and any "
                f"of candidate_steps, down_hysteresis, up_hysteresis, got {entry!r}"
            )
        _check_range(f"{where}min_batch_size", entry["min_batch_size"], 1, 1 << 20)
        specs.append(
            (
                int(entry["min_batch_size"]),
                entry.get("candidate_steps"),
                float(entry.get("down_hysteresis", SGLANG_DOWN_HYSTERESIS)),
                float(entry.get("up_hysteresis", SGLANG_UP_HYSTERESIS)),
                where,
            )
        )
    lowest = [spec[0] for spec in specs]
    if lowest[0] != 1 or lowest != sorted(set(lowest)):
        raise ScenarioError(
            "speculation.policy.params.batch_slots: min_batch_size must start at 1 and rise, "
            f"got {lowest}"
        )
    return specs
