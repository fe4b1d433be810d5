"""The policy interface: what a policy sees of a step (:class:`BatchView`), the acceptance
drawn per output position (:class:`PositionAcceptance`) and :class:`SpeculationPolicy`, which
every policy family implements.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sim.acceptance.plan import AcceptanceModel, Proposal
from sim.engine.drafter import StepPlan
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

    def fixed_plan(self, k: int, num_decode_tokens: IntArray) -> StepPlan:
        """The plan of a chain of ``k`` drafts at every step read from these positions: each
        request's verify steps from position 0, each emitting ``min(acc_len, k + 1)`` tokens
        and moving that far, until its ``num_decode_tokens`` are out (the walk
        :class:`TraceReplayModel` makes for a fixed-k plan). The ``fixed`` policy's run is this
        plan's run: :meth:`AdaptivePlan.lookup` answers each step the same, read from the
        position the request reached."""
        needed = np.asarray(num_decode_tokens, dtype=np.int64)
        rows = np.flatnonzero(needed > 0)
        # The walking rows' first flat index, trace length, tokens needed and position.
        first = self.offsets[rows]
        length = self.offsets[rows + 1] - first
        left = needed[rows]
        position = np.zeros(rows.size, dtype=np.int64)
        owners: list[IntArray] = []
        steps: list[NDArray[np.uint8]] = []
        while rows.size:
            emitted = np.minimum(self.values[first + position % length], k + 1)
            owners.append(rows)
            steps.append(emitted)
            position += emitted
            going = position < left
            if not going.all():
                rows, first, length = rows[going], first[going], length[going]
                left, position = left[going], position[going]
        dtype = np.int8 if k <= np.iinfo(np.int8).max else np.int16
        offsets = np.zeros(needed.size + 1, dtype=np.int64)
        if not owners:
            empty = np.zeros(0, dtype=dtype)
            return StepPlan(offsets=offsets, proposed=empty, accepted=empty.copy())
        owner = np.concatenate(owners)
        np.cumsum(np.bincount(owner, minlength=needed.size), out=offsets[1:])
        step_index = np.repeat(np.arange(len(owners)), [len(o) for o in owners])
        accepted = np.zeros(owner.size, dtype=dtype)
        accepted[offsets[owner] + step_index] = np.concatenate(steps) - 1
        return StepPlan(
            offsets=offsets, proposed=np.full(owner.size, k, dtype=dtype), accepted=accepted
        )

    @staticmethod
    def check_model(model: AcceptanceModel) -> None:
        """Raise ScenarioError unless ``model``'s per-step draws are a function of position (a
        chain trace without n-gram misses, or a chain model with one ``alpha`` per depth):
        the models :meth:`from_model` reads."""
        from sim.acceptance.models import PositionalAcceptanceModel, TargetTauModel
        from sim.acceptance.traces import TraceReplayModel

        if isinstance(model, TraceReplayModel):
            if model.miss_probability > 0.0:
                raise ScenarioError(
                    "speculation.policy: adaptive policies replay chain traces; n-gram traces "
                    "(misses at acc_len 1) are not supported"
                )
            return
        if isinstance(model, TargetTauModel):
            return
        if not isinstance(model, PositionalAcceptanceModel) or model.match_rate < 1.0:
            raise ScenarioError(
                "speculation.policy: adaptive policies need a chain acceptance model (alpha, "
                "per_position, mean_acceptance_length or a trace) without n-gram misses"
            )

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

        cls.check_model(model)
        needed = np.maximum(np.asarray(num_decode_tokens, dtype=np.int64), 1)
        if isinstance(model, TraceReplayModel):
            keys = model._keys(needed.size, None, rng)
            traces = model.traces
            # A request reads positions below needed + k_max + 1 (a step starts below needed and
            # looks one step ahead): a trace longer than that is kept to it, where no read
            # wraps either way (a shorter one is kept whole, to wrap as it does). Whole traces
            # of 30,000 requests took some 60 million int64 indices to gather; the kept ones
            # are copied a slice a request (an index array of the 6.7 million kept positions
            # took twice as long to build and gather).
            lengths = np.minimum(traces.lengths[keys], needed + k_max + 1)
            offsets = np.zeros(needed.size + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            if needed.size == 0:
                return cls(traces.acc_len[:0].copy(), offsets)
            starts = traces.offsets[keys]
            acc_len = traces.acc_len
            return cls(
                np.concatenate(
                    [
                        acc_len[start:end]
                        for start, end in zip(
                            starts.tolist(), (starts + lengths).tolist(), strict=True
                        )
                    ]
                ),
                offsets,
            )
        chain = Proposal.chain(k_max)
        if isinstance(model, TargetTauModel):
            model = PositionalAcceptanceModel([model.alpha_for(chain)])
        assert isinstance(model, PositionalAcceptanceModel)
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

    def holds_as_batch_shrinks(self, batch_size: int) -> bool:
        """Whether, for a policy whose choice reads the batch size, the choice it makes at a
        batch of ``batch_size`` sequences is the one it makes at every smaller batch (then a
        stretch may run on past finishes, which only shrink the batch; otherwise it stops at
        each). Default: only when the batch size does not enter the choice."""
        del batch_size
        return not self.batch_dependent

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


#: Step times of a verify step for a batch of b sequences each verifying k = 0..k_max drafts,
#: with the batch's context tokens (one entry per k, or two rows: no sequence and every sequence
#: accepting all its drafts): the cost model's own physics.
StepTime = Callable[[int, int, int], FloatArray]


def _check_range(key: str, value: int, low: int, high: int) -> None:
    if not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise ScenarioError(
            f"speculation.policy.params.{key}: must be an integer in [{low}, {high}], got {value!r}"
        )
