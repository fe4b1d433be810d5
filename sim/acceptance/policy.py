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
enters it, so the stretch planner keeps fast-forwarding where the choice is stable.

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


class SglangEmaPolicy(SpeculationPolicy):
    """SGLang's adaptive ``speculative_num_steps``: EMA of accepted drafts with hysteresis (rule
    and defaults in the module docstring). One choice for the whole batch."""

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
    ) -> None:
        super().__init__(k_max)
        if candidate_steps is None:
            # SGLang adds the configured steps to its candidates; ours stop at k_max.
            steps = {s for s in SGLANG_CANDIDATE_STEPS if s <= k_max} | {k_max}
        else:
            steps = {int(s) for s in candidate_steps}
            for s in steps:
                _check_range("candidate_steps", s, 1, k_max)
            steps.add(k_max)
        self.steps = tuple(sorted(steps))
        if len(self.steps) < 2:
            raise ScenarioError(
                f"speculation.policy.params.candidate_steps: need two steps at least, got "
                f"{list(self.steps)} (k_max {k_max})"
            )
        if not 0.0 < ema_alpha <= 1.0:
            raise ScenarioError(
                f"speculation.policy.params.ema_alpha: must be in (0, 1], got {ema_alpha}"
            )
        _check_range("update_interval", update_interval, 1, 1 << 20)
        _check_range("warmup_batches", warmup_batches, 0, 1 << 20)
        for key, value in (("down_hysteresis", down_hysteresis), ("up_hysteresis", up_hysteresis)):
            if not -1.0 <= value <= 1.0:
                raise ScenarioError(f"speculation.policy.params.{key}: must be in [-1, 1]")
        self.ema_alpha = float(ema_alpha)
        self.update_interval = int(update_interval)
        self.warmup_batches = int(warmup_batches)
        self.down_hysteresis = float(down_hysteresis)
        self.up_hysteresis = float(up_hysteresis)
        self.current = k_max
        self.ema = float(k_max - 1)
        self.batch_count = 0

    def choose(self, view: BatchView) -> IntArray:
        return np.full(len(view.ids), self.current, dtype=np.int64)

    def holds_for(self) -> int:
        c, w, u = self.batch_count, self.warmup_batches, self.update_interval
        # The next count after which the choice is recomputed: > w and (count - w) % u == 0.
        following = w + u * ((max(c, w) - w) // u + 1)
        return following - c

    def fork(self) -> SglangEmaPolicy:
        return copy.copy(self)  # scalars and a tuple: a shallow copy is independent

    def observe(self, ids: IntArray, proposed: IntArray, accepted: IntArray) -> None:
        verifying = proposed > 0
        counts = verifying.sum(axis=0)
        sums = (accepted * verifying).sum(axis=0)
        for count, total in zip(counts.tolist(), sums.tolist(), strict=True):
            if count == 0:
                continue  # SGLang skips an empty verify batch without counting it
            self.ema = (1.0 - self.ema_alpha) * self.ema + self.ema_alpha * (total / count)
            self.batch_count += 1
            c, w = self.batch_count, self.warmup_batches
            if c > w and (c - w) % self.update_interval == 0:
                self._recompute()

    def _recompute(self) -> None:
        index = self.steps.index(self.current)
        while index > 0 and self.ema <= self.steps[index - 1] - 0.5 + self.down_hysteresis:
            index -= 1
        while (
            index < len(self.steps) - 1 and self.ema > self.steps[index] - 0.5 + self.up_hysteresis
        ):
            index += 1
        self.current = self.steps[index]

    def candidates(self) -> tuple[int, ...]:
        return self.steps

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "candidate_steps": list(self.steps),
            "ema_alpha": self.ema_alpha,
            "update_interval": self.update_interval,
            "warmup_batches": self.warmup_batches,
            "down_hysteresis": self.down_hysteresis,
            "up_hysteresis": self.up_hysteresis,
            "source": "sgl-project/sglang PR #21599 adaptive_spec_params.py",
        }


#: Step times of a verify step for a batch of b sequences each verifying k = 0..k_max drafts,
#: with the batch's context tokens (one entry per k): the cost model's own physics.
StepTime = Callable[[int, int, int], FloatArray]


class GoodputPolicy(SpeculationPolicy):
    """SmartSpec-style: every ``update_interval`` steps, the k in 0..k_max maximising the batch's
    expected tokens per second, ``Σ_i E[min(L_i, k+1)] / T(b, k)``, with each sequence's
    acceptance ``α_i`` = EMA of accepted drafts / EMA of tried drafts (chain: ``E = (1 - α^{k+1}) /
    (1 - α)``, Leviathan et al. 2023 eq. 1) and ``T`` the cost model's step time."""

    name = "goodput"
    batch_dependent = True
    learns = True

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

    def choose(self, view: BatchView) -> IntArray:
        if self.since_update >= self.update_interval:
            self.current = self._best_k(view)
            self.since_update = 0
        return np.full(len(view.ids), self.current, dtype=np.int64)

    def _best_k(self, view: BatchView) -> int:
        alpha = np.clip(self.accepted_ema[view.ids] / self.tried_ema[view.ids], 0.0, 0.999)
        context = int(view.computed.sum())
        ks = np.arange(self.k_max + 1)
        tokens = ((1.0 - alpha[None, :] ** (ks[:, None] + 1)) / (1.0 - alpha[None, :])).sum(axis=1)
        rate = tokens / self.step_time(view.batch_size, self.k_max, context)
        return int(np.argmax(rate))  # the smallest k among equals

    def holds_for(self) -> int:
        return max(1, self.update_interval - self.since_update)

    def observe(self, ids: IntArray, proposed: IntArray, accepted: IntArray) -> None:
        for j in range(proposed.shape[1]):
            p, a = proposed[:, j], accepted[:, j]
            went = p > 0
            # A chain step tried a + 1 drafts (the last rejected) unless all p were accepted.
            tried = np.minimum(a + 1, p)
            rows = ids[went]
            self.accepted_ema[rows] += self.ema_alpha * (a[went] - self.accepted_ema[rows])
            self.tried_ema[rows] += self.ema_alpha * (tried[went] - self.tried_ema[rows])
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

    def bind(self, requests: Any, batch_size: Callable[[], int]) -> None:
        """Read positions and cached tokens from the engine's request table and the batch
        size from its scheduler."""
        object.__setattr__(self, "_requests", requests)
        object.__setattr__(self, "_batch_size", batch_size)

    def _positions(self, requests: IntArray) -> IntArray:
        assert self._requests is not None, "AdaptivePlan.bind was not called"
        # The prefill emits the first token; verify steps start at decode position 0.
        return np.maximum(self._requests.num_emitted[requests] - 1, 0)

    def _view(self, requests: IntArray, positions: IntArray) -> BatchView:
        acc = self.acceptance.at(requests, positions)
        assert self._batch_size is not None and self._requests is not None
        computed = self._requests.num_computed_tokens[requests]
        return BatchView(self._batch_size(), requests, positions, computed, acc)

    def lookup(self, requests: IntArray, step_index: IntArray) -> tuple[IntArray, IntArray]:
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
        after = self._view(requests, positions + (accepted + 1) * ahead)
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
        j = 0
        while j < num_steps:
            k = policy.choose(self._view(requests, positions))
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
                forked.observe(requests, proposed[:, j : j + hold] * active, chunk * active)
                before += emitted[:, -1]
            j += hold
        return proposed, accepted

    def holds_for(self) -> int:
        if self.policy.fork() is not None:
            return HOLDS_FOREVER  # played forward in :meth:`window`
        return self.policy.holds_for()

    def observe(self, ids: IntArray, proposed: IntArray, accepted: IntArray) -> None:
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


def cost_model_step_time(cost_model: Any, drafter: Any, extra_tokens_per_decode: int) -> StepTime:
    """:data:`StepTime` from the run's own cost model and drafter: a verify step of ``b``
    sequences, each computing ``1 + extra + k`` tokens over ``context`` cached tokens in all,
    plus the drafting of the next step's k drafts."""
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
        work = DraftWork(np.full(k.size, b), b * (k + 1), np.full(k.size, context), 0 * k, b * k)
        draft = np.asarray(drafter.draft_time_s(work), dtype=np.float64)
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
