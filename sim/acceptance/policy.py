"""Adaptive speculation: how many drafts each sequence proposes, chosen step by step.

A fixed-k plan (:mod:`sim.acceptance.plan`) draws every verify step of a request before the run.
Here the acceptance is drawn per output position instead, once, before the run
(:class:`PositionAcceptance`): ``acc_len[pos]`` is how many tokens a verify step starting at
output position ``pos`` emits with a long enough chain, bonus token included. A chain of k drafts
starting there emits ``min(acc_len[pos], k + 1)`` tokens and the next step starts that many
positions on, so any k at any step is replayed exactly, and every policy compared on one seed
sees the same content (common random numbers). The source is a request's acceptance trace
(:mod:`sim.acceptance.traces`, the SpecDecode-Bench convention) or, for the parametric models,
one uniform per request position through the chain's reach ``P(accepted >= d)`` (inverse CDF:
``acc_len = 1 + #{d : u < reach_d}``), which gives each k its model's distribution.

A :class:`SpeculationPolicy` sees the batch (its size, the sequences, their positions and each
sequence's recent acceptance) and returns k per sequence (0: no drafts this step). The engine
asks through :class:`AdaptivePlan`, which stands where the fixed plan stands; a policy says how
many steps its choice holds (:meth:`SpeculationPolicy.holds_for`) and whether the batch size
enters it, so the stretch planner keeps fast-forwarding where the choice is stable. A policy
that can be copied (:meth:`SpeculationPolicy.fork`) is played forward inside a stretch; the
engine then adopts the copy's state at its last decision before the cut
(:meth:`SpeculationPolicy.adopt`), which is where stepping one step at a time would leave it.

Policies and their sources:

- ``fixed``: today's k at every step (with trace replay, the records equal the fixed-k plan's).
- ``disable-above-batch``: k while the batch holds at most ``max_batch_size`` sequences, none
  above, as vLLM's ``speculative_disable_by_batch_size`` (vLLM SpeculativeConfig docs: "disable
  speculative decoding for new incoming requests when the number of enqueued requests is larger
  than this value").
- ``sglang-ema``: SGLang's adaptive ``speculative_num_steps`` (sgl-project/sglang PR #21599,
  ``python/sglang/srt/speculative/adaptive_spec_params.py``): an EMA of the batch's mean
  accepted drafts, ``ema <- (1 - ema_alpha) ema + ema_alpha mean``, started at ``steps - 1``;
  after ``warmup_batches`` verify batches, every ``update_interval`` batches, the step count
  falls to the next lower candidate while ``ema <= lower - 0.5 + down_hysteresis`` and rises to
  the next higher while ``ema > current - 0.5 + up_hysteresis``. Defaults from that file:
  candidates (1, 3, 7), ema_alpha 0.2, update_interval 5, warmup_batches 10, down_hysteresis
  -0.25, up_hysteresis 0.0; SGLang adds the configured steps to the candidates, and so do we.
  ``batch_slots`` (PR #24055): one such controller per batch-size range.
- ``goodput``: every ``update_interval`` steps, the k that maximises expected tokens per second
  of the batch from the cost model's own step time and each sequence's recent acceptance
  (SmartSpec, Liu et al. 2024, arXiv:2406.14066: goodput = E[generated tokens] / step time).
- ``oracle``: each sequence proposes exactly what the target will accept (an upper bound on
  what any k-policy saves in wasted drafts; no engine can do it).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sim.acceptance.plan import AcceptanceModel, Proposal
from sim.engine.drafter import DraftWork, StepPlan
from sim.errors import ScenarioError

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

#: A choice that holds "for ever" (until the batch changes).
HOLDS_FOREVER = 1 << 30


@dataclass(frozen=True)
class PositionAcceptance:
    """``acc_len`` of every request at every output position it reads: request r's positions
    are ``values[offsets[r]:offsets[r+1]]``, read modulo their count (a request longer than its
    trace continues from the trace's start, as :class:`TraceReplayModel` does)."""

    values: NDArray[np.uint8]
    offsets: IntArray

    def at(self, requests: IntArray, positions: IntArray) -> IntArray:
        """``acc_len`` of each request at its position (int64)."""
        start = self.offsets[requests]
        length = self.offsets[requests + 1] - start
        return self.values[start + positions % length].astype(np.int64)

    @classmethod
    def from_model(
        cls,
        model: AcceptanceModel,
        num_decode_tokens: IntArray,
        k_max: int,
        rng: np.random.Generator,
    ) -> PositionAcceptance:
        """Every request's positions from a chain acceptance model (traces or parametric).

        Trace replay draws the trace keys first, exactly as the fixed-k plan does from the same
        stream, so k fixed reproduces that plan step for step. Raise ScenarioError for a model
        whose per-step draws are not a function of position (n-gram misses).
        """
        from sim.acceptance.models import PositionalAcceptanceModel, TargetTauModel
        from sim.acceptance.traces import TraceReplayModel

        needed = np.maximum(np.asarray(num_decode_tokens, dtype=np.int64), 1)
        if isinstance(model, TraceReplayModel):
            if model.miss_probability > 0.0:
                raise ScenarioError(
                    "speculation.policy: adaptive policies replay chain traces; n-gram traces "
                    "(misses at acc_len 1) are not supported"
                )
            keys = model._keys(needed.size, None, rng)
            traces = model.traces
            lengths = traces.lengths[keys]
            offsets = np.zeros(needed.size + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            starts = traces.offsets[keys]
            gather = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
            return cls(traces.acc_len[gather], offsets)
        chain = Proposal.chain(k_max)
        if isinstance(model, TargetTauModel):
            model = PositionalAcceptanceModel([model.alpha_for(chain)])
        if not isinstance(model, PositionalAcceptanceModel) or model.match_rate < 1.0:
            raise ScenarioError(
                "speculation.policy: adaptive policies need a chain acceptance model (alpha, "
                "per_position, mean_acceptance_length or a trace) without n-gram misses"
            )
        reach = model.reach(chain)
        offsets = np.zeros(needed.size + 1, dtype=np.int64)
        np.cumsum(needed, out=offsets[1:])
        uniforms = rng.random(int(offsets[-1]))
        # reach is decreasing: acc_len - 1 counts the depths whose reach exceeds the uniform.
        depth = np.searchsorted(-reach, -uniforms, side="left")
        return cls((1 + depth).astype(np.uint8), offsets)


@dataclass(frozen=True)
class BatchView:
    """What a policy sees of one step: the batch size, its sequences, their output positions,
    their cached tokens and ``acc_len`` there (only the oracle may read it)."""

    batch_size: int
    ids: IntArray
    positions: IntArray
    computed: IntArray
    acc_len: IntArray


class SpeculationPolicy(ABC):
    """Chooses k per sequence for the next verify step."""

    name: str = "abstract"
    #: Whether the batch size enters the choice (then a stretch stops where it changes).
    batch_dependent: bool = False
    #: Whether the choice may read where the target will reject (only the oracle).
    clairvoyant: bool = False
    #: Whether the choice depends on the steps observed so far.
    learns: bool = False
    #: Whether the batch (size, rows) enters the choice only when the policy decides (at the
    #: steps :meth:`holds_for` names); played forward, it sees the rows still running then.
    reads_batch: bool = False

    def __init__(self, k_max: int) -> None:
        self.k_max = int(k_max)

    @abstractmethod
    def choose(self, view: BatchView) -> IntArray:
        """Drafts each sequence proposes (0 .. k_max)."""

    def holds_for(self) -> int:
        """Steps from now over which :meth:`choose` depends on nothing but the batch size and
        the positions (the stretch planner plans no further)."""
        return HOLDS_FOREVER

    def fork(self) -> SpeculationPolicy | None:
        """A copy whose learning does not touch this policy, for the stretch planner to play the
        policy forward over a planned stretch; None if the policy cannot be played forward
        cheaply (the planner then stops where :meth:`holds_for` says)."""
        return None

    def observe(self, ids: IntArray, proposed: IntArray, accepted: IntArray) -> None:
        """Learn from applied steps: (row × step) drafts proposed and accepted for ``ids``
        (a policy that learns nothing ignores them)."""
        del ids, proposed, accepted

    def snapshot(self) -> Any:
        """A record of this (forked) policy's state right after a decision, for :meth:`adopt`
        (default: a fork)."""
        return self.fork()

    def adopt(
        self, snapshot: Any, start: int, ids: IntArray, proposed: IntArray, accepted: IntArray
    ) -> SpeculationPolicy:
        """The policy after the engine applied ``proposed``/``accepted`` (row × step), the last
        decision having been taken at step ``start`` with state ``snapshot``: what stepping one
        step at a time would have left (default: the snapshot, observing the steps after it)."""
        snapshot.observe(ids, proposed[:, start:], accepted[:, start:])
        return snapshot

    def candidates(self) -> tuple[int, ...]:
        """Every k the policy can choose (the lossless check covers these)."""
        return tuple(range(self.k_max + 1))

    def describe(self) -> dict[str, Any]:
        """Name and parameters, for the resolved scenario and reports."""
        return {"name": self.name, "k_max": self.k_max}


class FixedPolicy(SpeculationPolicy):
    """Today's behaviour: k drafts at every step."""

    name = "fixed"

    def __init__(self, k_max: int, k: int | None = None) -> None:
        super().__init__(k_max)
        self.k = k_max if k is None else int(k)
        _check_range("k", self.k, 1, k_max)

    def choose(self, view: BatchView) -> IntArray:
        return np.full(len(view.ids), self.k, dtype=np.int64)

    def candidates(self) -> tuple[int, ...]:
        return (self.k,)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "k": self.k}


class DisableAboveBatchPolicy(SpeculationPolicy):
    """k drafts while the batch holds at most ``max_batch_size`` sequences, none above (vLLM's
    ``speculative_disable_by_batch_size``)."""

    name = "disable-above-batch"
    batch_dependent = True

    def __init__(self, k_max: int, max_batch_size: int, k: int | None = None) -> None:
        super().__init__(k_max)
        self.k = k_max if k is None else int(k)
        _check_range("k", self.k, 1, k_max)
        self.max_batch_size = int(max_batch_size)
        _check_range("max_batch_size", self.max_batch_size, 1, 1 << 20)

    def choose(self, view: BatchView) -> IntArray:
        k = self.k if view.batch_size <= self.max_batch_size else 0
        return np.full(len(view.ids), k, dtype=np.int64)

    def candidates(self) -> tuple[int, ...]:
        return (0, self.k)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "k": self.k, "max_batch_size": self.max_batch_size}


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

    def holds_for(self) -> int:
        c = self.slots[self._active].batch_count
        w, u = self.warmup_batches, self.update_interval
        # The next count after which the choice is recomputed: > w and (count - w) % u == 0.
        following = w + u * ((max(c, w) - w) // u + 1)
        return following - c

    def fork(self) -> SglangEmaPolicy:
        twin = copy.copy(self)
        twin.slots = [copy.copy(slot) for slot in self.slots]
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


#: Step times of a verify step for a batch of b sequences each verifying k = 0..k_max drafts,
#: with the batch's context tokens (one entry per k, or two rows: no sequence and every sequence
#: accepting all its drafts): the cost model's own physics.
StepTime = Callable[[int, int, int], FloatArray]


class GoodputPolicy(SpeculationPolicy):
    """SmartSpec-style: every ``update_interval`` steps, the k in 0..k_max maximising the batch's
    expected tokens per second, ``Σ_i E[min(L_i, k+1)] / T(b, k)``, with each sequence's
    acceptance ``α_i`` = EMA of accepted drafts / EMA of tried drafts (chain: ``E = (1 - α^{k+1}) /
    (1 - α)``, Leviathan et al. 2023 eq. 1) and ``T`` the cost model's step time."""

    name = "goodput"
    learns = True
    reads_batch = True

    def __init__(
        self,
        k_max: int,
        num_requests: int,
        step_time: StepTime,
        prior_alpha: float = 0.7,
        ema_alpha: float = 0.2,
        update_interval: int = 5,
    ) -> None:
        super().__init__(k_max)
        if not 0.0 < prior_alpha < 1.0:
            raise ScenarioError("speculation.policy.params.prior_alpha: must be in (0, 1)")
        if not 0.0 < ema_alpha <= 1.0:
            raise ScenarioError("speculation.policy.params.ema_alpha: must be in (0, 1]")
        _check_range("update_interval", update_interval, 1, 1 << 20)
        # Geometric acceptance: α̂ = accepted / tried drafts (the MLE), each an EMA per request.
        self.accepted_ema = np.full(num_requests, float(prior_alpha))
        self.tried_ema = np.ones(num_requests)
        self.prior_alpha = float(prior_alpha)
        self.ema_alpha = float(ema_alpha)
        self.update_interval = int(update_interval)
        self.step_time = step_time
        self.since_update = update_interval  # decide at the first step
        self.current = k_max
        self._depths = np.arange(k_max + 1, dtype=np.float64)

    def choose(self, view: BatchView) -> IntArray:
        if self.since_update >= self.update_interval:
            self.current = self._best_k(view)
            self.since_update = 0
        return np.full(len(view.ids), self.current, dtype=np.int64)

    def _best_k(self, view: BatchView) -> int:
        alpha = np.clip(self.accepted_ema[view.ids] / self.tried_ema[view.ids], 0.0, 0.999)
        context = int(view.computed.sum())
        # Σ_i (1 - α_i^{k+1}) / (1 - α_i) = Σ_{d<=k} Σ_i α_i^d: a running sum of power sums.
        power_sums = np.power.outer(alpha, self._depths).sum(axis=0)
        tokens = np.cumsum(power_sums)
        seconds = self.step_time(view.batch_size, self.k_max, context)
        if seconds.ndim == 2:
            # Rows: no sequence / every sequence accepting all k drafts; a sequence does with
            # probability α_i^k, so the expected step time lies between, in that share.
            share = power_sums / max(len(view.ids), 1)
            seconds = seconds[0] + share * (seconds[1] - seconds[0])
        rate = tokens / seconds
        return int(np.argmax(rate))  # the smallest k among equals

    def holds_for(self) -> int:
        return max(1, self.update_interval - self.since_update)

    def snapshot(self) -> Any:
        return (self.current, self.since_update)

    def adopt(
        self, snapshot: Any, start: int, ids: IntArray, proposed: IntArray, accepted: IntArray
    ) -> SpeculationPolicy:
        # The EMAs learn the same from every applied step whoever observes them; the decision
        # and its age come from the fork's record at ``start``.
        self.observe(ids, proposed, accepted)
        self.current, since = snapshot
        self.since_update = min(since + proposed.shape[1] - start, self.update_interval)
        return self

    def fork(self) -> GoodputPolicy:
        twin = copy.copy(self)
        twin.accepted_ema = self.accepted_ema.copy()
        twin.tried_ema = self.tried_ema.copy()
        return twin

    def observe(self, ids: IntArray, proposed: IntArray, accepted: IntArray) -> None:
        # The rows' EMAs gathered once, updated column by column (the same arithmetic as one
        # step at a time, so fast-forwarded and stepped runs agree to the bit), scattered back.
        acc, tried_ema = self.accepted_ema[ids], self.tried_ema[ids]
        # Rows that drafted nothing learn nothing (their step adds an exact zero). A chain step
        # tried a + 1 drafts (the last rejected) unless all p were accepted.
        weights = (self.ema_alpha * (proposed > 0)).T
        tried = np.minimum(accepted + 1, proposed).T
        for went, a, t in zip(weights, accepted.T, tried, strict=True):
            acc += went * (a - acc)
            tried_ema += went * (t - tried_ema)
        self.accepted_ema[ids] = acc
        self.tried_ema[ids] = tried_ema
        self.since_update = min(self.since_update + proposed.shape[1], self.update_interval)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "prior_alpha": self.prior_alpha,
            "ema_alpha": self.ema_alpha,
            "update_interval": self.update_interval,
            "source": "SmartSpec (arXiv:2406.14066) goodput rule, cost model step times",
        }


class OraclePolicy(SpeculationPolicy):
    """Each sequence proposes exactly the drafts the target will accept (capped at k_max): no
    draft is wasted. An upper bound, not an engine's policy."""

    name = "oracle"
    clairvoyant = True

    def choose(self, view: BatchView) -> IntArray:
        return np.minimum(view.acc_len - 1, self.k_max)


def _check_range(key: str, value: int, low: int, high: int) -> None:
    if not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise ScenarioError(
            f"speculation.policy.params.{key}: must be an integer in [{low}, {high}], got {value!r}"
        )


#: Policy names a scenario can give (``speculation.policy.name``).
POLICY_NAMES = ("fixed", "disable-above-batch", "sglang-ema", "goodput", "oracle")

#: Methods whose drafts form a chain whose length can change per step.
ADAPTIVE_METHODS = ("eagle", "eagle3", "draft_model", "mtp")


class AdaptivePlan(StepPlan):
    """The engine's plan when a policy chooses k per step: it answers the engine's plan queries
    (:meth:`lookup`, :meth:`window`) from the requests' positions and the policy, so the engine
    needs no other change than the seam hooks (:meth:`holds_for`, :meth:`observe`)."""

    adaptive = True
    acceptance: PositionAcceptance
    policy: SpeculationPolicy
    k_max: int
    _requests: Any
    _batch_size: Callable[[], int] | None
    #: The window last played forward on a fork: rows, planned steps, the fork's state at each
    #: decision (step index, state after deciding there).
    _played: tuple[IntArray, IntArray, IntArray, list[tuple[int, Any]]] | None

    def __init__(
        self,
        acceptance: PositionAcceptance,
        policy: SpeculationPolicy,
        k_max: int,
    ) -> None:
        n = acceptance.offsets.size - 1
        super().__init__(
            offsets=np.zeros(n + 1, dtype=np.int64),
            # The most any step carries (the scheduler's bound and KV look-ahead read it).
            proposed=np.array([k_max], dtype=np.int16),
            accepted=np.zeros(1, dtype=np.int16),
        )
        object.__setattr__(self, "acceptance", acceptance)
        object.__setattr__(self, "policy", policy)
        object.__setattr__(self, "k_max", int(k_max))
        object.__setattr__(self, "batch_dependent", policy.batch_dependent)
        # A stretch's admitted rows are planned apart from the others: a policy that reads the
        # batch or learns from it sees admissions one step at a time.
        object.__setattr__(
            self, "stretch_admissions", not (policy.batch_dependent or policy.learns)
        )
        object.__setattr__(self, "_requests", None)
        object.__setattr__(self, "_batch_size", None)
        object.__setattr__(self, "_played", None)

    def bind(self, requests: Any, batch_size: Callable[[], int]) -> None:
        """Read positions and cached tokens from the engine's request table and the batch
        size from its scheduler."""
        object.__setattr__(self, "_requests", requests)
        object.__setattr__(self, "_batch_size", batch_size)

    def _positions(self, requests: IntArray) -> IntArray:
        assert self._requests is not None, "AdaptivePlan.bind was not called"
        # The prefill emits the first token; verify steps start at decode position 0.
        return np.maximum(self._requests.num_emitted[requests] - 1, 0)

    def _view(
        self,
        requests: IntArray,
        positions: IntArray,
        moved: IntArray | int = 0,
        gone: int = 0,
        reads_ahead: bool = True,
    ) -> BatchView:
        """The batch at ``positions``; ``moved``: tokens each row emitted since the engine's
        state was read (a decoding row's cached tokens grow by what it emits); ``gone``: rows
        finished since (the batch is that much smaller)."""
        # acc_len: what the target will accept (lookup reads it; of the policies, the oracle).
        acc = self.acceptance.at(requests, positions) if reads_ahead else positions
        assert self._batch_size is not None and self._requests is not None
        computed = self._requests.num_computed_tokens[requests] + moved
        return BatchView(self._batch_size() - gone, requests, positions, computed, acc)

    def lookup(self, requests: IntArray, step_index: IntArray) -> tuple[IntArray, IntArray]:
        object.__setattr__(self, "_played", None)  # a general step follows, not the window
        positions = self._positions(requests)
        view = self._view(requests, positions)
        k = self.policy.choose(view)
        accepted = np.minimum(view.acc_len - 1, k)
        assert self._requests is not None
        ahead = step_index > self._requests.num_decode_steps[requests]
        if not ahead.any():
            return k, accepted
        # Rows asked one step ahead (the drafting after their verify step): their positions
        # move on by this step's emission, and a learning policy has seen this step.
        forked = self.policy.fork()
        policy = self.policy if forked is None else forked
        if forked is not None:
            forked.observe(requests, (k * ahead)[:, None], (accepted * ahead)[:, None])
        moved = (accepted + 1) * ahead
        after = self._view(requests, positions + moved, moved)
        if policy.reads_batch:
            # The batch of the next step: without the rows this step finishes.
            remaining = (
                self._requests.output_tokens[requests] - self._requests.num_emitted[requests]
            )
            live = ~ahead | (moved < remaining)
            k_next = np.zeros(len(requests), dtype=np.int64)
            k_next[live] = policy.choose(
                self._view(
                    requests[live], (positions + moved)[live], moved[live], int((~live).sum())
                )
            )
        else:
            k_next = policy.choose(after)
        return (
            np.where(ahead, k_next, k),
            np.where(ahead, np.minimum(after.acc_len - 1, k_next), accepted),
        )

    def window(
        self, requests: IntArray, step_index: IntArray, num_steps: int
    ) -> tuple[IntArray, IntArray]:
        """The next ``num_steps`` verify steps of each row, playing the policy forward on a
        fork (it observes each planned step as the engine will when it applies it)."""
        assert self._requests is not None
        positions = self._positions(requests)
        remaining = self._requests.output_tokens[requests] - self._requests.num_emitted[requests]
        forked = self.policy.fork()
        policy = self.policy if forked is None else forked
        values = self.acceptance.values
        start = self.acceptance.offsets[requests]
        length = self.acceptance.offsets[requests + 1] - start
        before = np.zeros(len(requests), dtype=np.int64)
        proposed = np.zeros((len(requests), num_steps), dtype=np.int64)
        accepted = np.zeros((len(requests), num_steps), dtype=np.int64)
        start_positions = positions
        # What the fork observed (steps past a row's end masked, as the engine applies them).
        seen_proposed = np.zeros_like(proposed)
        seen_accepted = np.zeros_like(accepted)
        snapshots: list[tuple[int, Any]] = []
        j = 0
        while j < num_steps:
            if policy.reads_batch:
                # The batch at this decision: the rows not finished yet (a stretch runs on past
                # finishes only when no one waits to take their place).
                live = before < remaining
                k = np.zeros(len(requests), dtype=np.int64)
                k[live] = policy.choose(
                    self._view(
                        requests[live],
                        positions[live],
                        (positions - start_positions)[live],
                        int((~live).sum()),
                        policy.clairvoyant,
                    )
                )
            else:
                moved = positions - start_positions
                k = policy.choose(self._view(requests, positions, moved, 0, policy.clairvoyant))
            if forked is not None:
                snapshots.append((j, forked.snapshot()))
            # Steps over which the choice holds: the planner kept the window within
            # holds_for() of a policy it cannot play forward; a fork says its own.
            if policy.clairvoyant:
                hold = 1
            elif forked is not None:
                hold = min(forked.holds_for(), num_steps - j)
            else:
                hold = num_steps - j
            for i in range(j, j + hold):
                a = np.minimum(values[start + positions % length].astype(np.int64) - 1, k)
                accepted[:, i] = a
                positions = positions + a + 1
            proposed[:, j : j + hold] = k[:, None]
            if forked is not None:
                chunk = accepted[:, j : j + hold]
                emitted = np.cumsum(chunk + 1, axis=1)
                active = (before[:, None] + emitted - chunk - 1) < remaining[:, None]
                seen_proposed[:, j : j + hold] = proposed[:, j : j + hold] * active
                seen_accepted[:, j : j + hold] = chunk * active
                forked.observe(
                    requests, seen_proposed[:, j : j + hold], seen_accepted[:, j : j + hold]
                )
                before += emitted[:, -1]
            j += hold
        object.__setattr__(
            self,
            "_played",
            None if forked is None else (requests, seen_proposed, seen_accepted, snapshots),
        )
        return proposed, accepted

    def holds_for(self) -> int:
        if self.policy.fork() is not None:
            return HOLDS_FOREVER  # played forward in :meth:`window`
        return self.policy.holds_for()

    def observe(self, ids: IntArray, proposed: IntArray, accepted: IntArray) -> None:
        """The engine applied these steps. When they are the first steps of the window last
        played forward, the policy takes the fork's state at its last decision before the cut
        and observes the rest: it then decided where and as stepping one step at a time would
        have (a policy that decides in :meth:`SpeculationPolicy.choose` needs the batch at the
        decision, which only the window saw)."""
        played = self._played
        object.__setattr__(self, "_played", None)
        length = proposed.shape[1]
        if played is not None:
            rows, planned_proposed, planned_accepted, snapshots = played
            if (
                0 < length <= planned_proposed.shape[1]
                and np.array_equal(rows, ids)
                and np.array_equal(planned_proposed[:, :length], proposed)
                and np.array_equal(planned_accepted[:, :length], accepted)
            ):
                start, state = max((s for s in snapshots if s[0] < length), key=lambda s: s[0])
                adopted = self.policy.adopt(state, start, ids, proposed, accepted)
                object.__setattr__(self, "policy", adopted)
                return
        self.policy.observe(ids, proposed, accepted)


#: Policies each engine's support table offers (the key of ``drafting.SUPPORT`` a preset
#: follows). vLLM: ``speculative_disable_by_batch_size`` (SpeculativeConfig,
#: ``disable_by_batch_size``); SGLang: ``--speculative-adaptive`` (PR #21599, EMA + hysteresis,
#: EAGLE with topk 1). The throughput-aware policy (SGLang PR #28045) is not merged, and no
#: engine can run the oracle: both are what-if studies (``speculation.allow_unsupported``).
POLICY_SUPPORT: dict[str, tuple[str, ...]] = {
    "vllm-v0": ("fixed", "disable-above-batch"),
    "vllm-v1": ("fixed", "disable-above-batch"),
    "sglang": ("fixed", "sglang-ema"),
}


def check_policy_support(name: str, support_table: str, display_name: str) -> None:
    """Raise ScenarioError naming ``speculation.policy.name`` if the engine does not offer it."""
    from sim.drafting import where_offered

    offered = POLICY_SUPPORT.get(support_table, ("fixed",))
    if name not in offered:
        where = where_offered(name, POLICY_SUPPORT)
        raise ScenarioError(
            f"speculation.policy.name: {display_name} does not offer {name!r} ({where}); "
            f"{display_name} offers: {', '.join(offered)} (set speculation.allow_unsupported "
            "for a what-if study)"
        )


def build_policy(
    name: str,
    params: dict[str, Any],
    k_max: int,
    num_requests: int,
    step_time: StepTime,
) -> SpeculationPolicy:
    """The policy ``name`` with ``params`` for chains of at most ``k_max`` drafts.

    Raise ScenarioError naming the key if a parameter is unknown or out of range.
    """
    allowed: dict[str, tuple[str, ...]] = {
        "fixed": ("k",),
        "disable-above-batch": ("k", "max_batch_size"),
        "sglang-ema": (
            "candidate_steps",
            "ema_alpha",
            "update_interval",
            "warmup_batches",
            "down_hysteresis",
            "up_hysteresis",
            "batch_slots",
        ),
        "goodput": ("prior_alpha", "ema_alpha", "update_interval"),
        "oracle": (),
    }
    if name not in allowed:
        raise ScenarioError(
            f"speculation.policy.name: unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}"
        )
    for key in params:
        if key not in allowed[name]:
            known = ", ".join(allowed[name]) or "none"
            raise ScenarioError(
                f"speculation.policy.params.{key}: not a parameter of {name!r} (known: {known})"
            )
    if name == "disable-above-batch" and "max_batch_size" not in params:
        raise ScenarioError("speculation.policy.params.max_batch_size: required by "
                            "'disable-above-batch'")  # fmt: skip
    try:
        if name == "fixed":
            return FixedPolicy(k_max, **params)
        if name == "disable-above-batch":
            return DisableAboveBatchPolicy(k_max, **params)
        if name == "sglang-ema":
            return SglangEmaPolicy(k_max, **params)
        if name == "goodput":
            return GoodputPolicy(k_max, num_requests, step_time, **params)
    except (TypeError, ValueError) as error:  # a list or a word where a number belongs
        raise ScenarioError(f"speculation.policy.params: {error}") from error
    return OraclePolicy(k_max)


#: The tabulated step time's context bins: the batch's mean cached tokens per sequence, rounded
#: to this many tokens (a bin moves the attention term of a step by well under a percent at the
#: contexts served, and the goodput argmax over k by less).
CONTEXT_BIN_TOKENS = 128


class TabulatedStepTime:
    """:data:`StepTime` computed once per (batch size, mean-context bin) and looked up after:
    the goodput policy asks at every decision, and a run meets a few hundred distinct keys.
    The context is taken at the bin's centre, so two asks in one bin get the same answer."""

    def __init__(self, step_time: StepTime) -> None:
        self.step_time = step_time
        self.table: dict[tuple[int, int, int], FloatArray] = {}

    def __call__(self, b: int, k_max: int, context: int) -> FloatArray:
        per_seq = round(float(context) / max(b, 1) / CONTEXT_BIN_TOKENS)
        key = (int(b), int(k_max), per_seq)
        found = self.table.get(key)
        if found is None:
            centre = per_seq * CONTEXT_BIN_TOKENS * max(b, 1)
            found = self.table[key] = self.step_time(b, k_max, centre)
        return found


def cost_model_step_time(cost_model: Any, drafter: Any, extra_tokens_per_decode: int) -> StepTime:
    """:data:`StepTime` from the run's own cost model and drafter: a verify step of ``b``
    sequences, each computing ``1 + extra + k`` tokens over ``context`` cached tokens in all,
    plus the drafting of the next step's k drafts (tabulated: :class:`TabulatedStepTime`)."""
    return TabulatedStepTime(_cost_model_step_time(cost_model, drafter, extra_tokens_per_decode))


def _cost_model_step_time(cost_model: Any, drafter: Any, extra_tokens_per_decode: int) -> StepTime:
    from sim.cost_model import StepShape

    def step_time(b: int, k_max: int, context: int) -> FloatArray:
        k = np.arange(k_max + 1)
        t = 1 + extra_tokens_per_decode + k
        shape = StepShape(
            num_seqs=np.full(k.size, b),
            num_tokens=b * t,
            num_logit_tokens=b * t,
            kv_read_tokens=context + b * t,
            attention_pairs=t * context + b * t * (t + 1) / 2.0,
        )
        parts = cost_model.breakdown(shape)
        total = sum(np.asarray(parts[key], dtype=np.float64) for key in parts if key != "draft_s")
        # Drafting with no sequence and with every sequence fully accepted (a draft model then
        # runs one more forward to keep its KV in step): the policy weighs the two rows.
        seqs, context_tokens = np.full(2 * k.size, b), np.full(2 * k.size, context)
        full = np.concatenate((0 * k, np.full(k.size, b)))
        ks = np.concatenate((k, k))
        work = DraftWork(seqs, b * (ks + 1), context_tokens, full, b * ks)
        draft = np.asarray(drafter.draft_time_s(work), dtype=np.float64).reshape(2, k.size)
        return np.asarray(total + np.where(k > 0, draft, 0.0), dtype=np.float64)

    return step_time


class AdaptiveDrafter:
    """The drafting cost when k changes per step: each step is costed by the strategy built for
    the k it drafts (``num_proposed / num_seqs``, rounded up: with k differing between the
    sequences of a step, as under the oracle, the batched drafter runs about as many forwards
    as its longest chain, which the mean rounded up approaches from below).

    ``by_k`` holds a strategy per k the policy can choose (k >= 1); steps that draft nothing
    cost nothing, as with the fixed strategy.
    """

    def __init__(self, strategy: Any, by_k: dict[int, Any]) -> None:
        self.strategy = strategy
        self.by_k = by_k
        self.name = strategy.name

    def draft_time_s(self, work: DraftWork) -> FloatArray:
        seqs = np.asarray(work.num_seqs, dtype=np.int64)
        proposed = np.asarray(work.num_proposed, dtype=np.int64)
        k = -(-proposed // np.maximum(seqs, 1))  # ceil
        ks = np.unique(k[k > 0])
        if ks.size <= 1:
            only = int(ks[0]) if ks.size else max(self.by_k)
            return np.asarray(self.by_k[only].draft_time_s(work), dtype=np.float64)
        seconds = np.zeros(len(seqs), dtype=np.float64)
        fields = (
            "num_seqs",
            "num_new_tokens",
            "context_tokens",
            "num_full_accept",
            "num_proposed",
        )
        for value in ks.tolist():
            rows = k == value
            part = DraftWork(*(np.asarray(getattr(work, name))[rows] for name in fields))
            seconds[rows] = self.by_k[value].draft_time_s(part)
        return seconds

    def extra_kv_bytes_per_token(self) -> float:
        return float(self.strategy.extra_kv_bytes_per_token())
