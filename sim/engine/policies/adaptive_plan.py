"""The engine's side of a per-step policy: :class:`AdaptivePlan` answers the engine's plan queries
from the requests' positions and the policy; :class:`AdaptiveDrafter` costs each step's drafting
at the k it drafts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from sim.engine.drafter import DraftWork, StepPlan
from sim.engine.policies.base import (
    HOLDS_FOREVER,
    BatchView,
    FloatArray,
    IntArray,
    PositionAcceptance,
    SpeculationPolicy,
)


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
    _forks: bool

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
        # A stretch's admitted rows are planned apart from the others: a policy that reads the
        # batch or learns from it sees admissions one step at a time.
        object.__setattr__(
            self, "stretch_admissions", not (policy.batch_dependent or policy.learns)
        )
        object.__setattr__(self, "_requests", None)
        object.__setattr__(self, "_batch_size", None)
        object.__setattr__(self, "_played", None)
        # Whether the policy can be played forward (a property of its kind, asked once: a fork
        # of a learning policy copies its state).
        object.__setattr__(self, "_forks", policy.fork() is not None)

    @property
    def batch_dependent(self) -> bool:  # type: ignore[override]
        """Whether a finish may change the policy's choice, so that a stretch must stop there: a
        stretch admits nobody after its first step, so the batch only shrinks along it, and a
        policy may say its choice at the current batch holds at every smaller one
        (:meth:`SpeculationPolicy.holds_as_batch_shrinks`)."""
        policy = self.policy
        if not policy.batch_dependent:
            return False
        assert self._batch_size is not None, "AdaptivePlan.bind was not called"
        return not policy.holds_as_batch_shrinks(self._batch_size())

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
        acc_len: IntArray | None = None,
    ) -> BatchView:
        """The batch at ``positions``; ``moved``: tokens each row emitted since the engine's
        state was read (a decoding row's cached tokens grow by what it emits); ``gone``: rows
        finished since (the batch is that much smaller); ``acc_len``: the rows' acc_len there
        when the caller read it (or, for a policy that may not read it, a stand-in)."""
        # acc_len: what the target will accept (lookup reads it; of the policies, the oracle).
        acc = self.acceptance.at(requests, positions) if acc_len is None else acc_len
        assert self._batch_size is not None and self._requests is not None
        computed = self._requests.num_computed_tokens[requests]
        if not isinstance(moved, int) or moved:
            computed = computed + moved
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
        # move on by this step's emission, and a learning policy has seen this step. When its
        # choice holds past this step (holds_for: it depends on nothing but the batch and the
        # positions until then), what it learns here cannot change it: no copy to teach.
        forked = self.policy.fork() if self.policy.holds_for() < 2 else None
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
        # Tokens each planned step emits: min(acc_len, k + 1), the accepted drafts and the bonus.
        emitted = np.zeros((len(requests), num_steps), dtype=np.int64)
        start_positions = positions
        # Where each row reads acc_len: its flat index in ``values``. A step moves at most
        # k_max + 1 positions, so when no row can pass its trace's end within the window the
        # index just moves on; otherwise it wraps (positions modulo the trace's length).
        wraps = bool((positions + num_steps * (self.k_max + 1) >= length).any())
        index = start + (positions % length if wraps else positions)
        # What the fork observed (steps past a row's end masked, as the engine applies them).
        seen_proposed = np.zeros_like(proposed)
        seen_accepted = np.zeros_like(proposed)
        snapshots: list[tuple[int, Any]] = []
        j = 0
        while j < num_steps:
            acc_len = positions
            if policy.clairvoyant:
                acc_len = values[index].astype(np.int64)
            # A policy that reads the batch sees the rows not finished yet at this decision (a
            # stretch runs on past finishes only when no one waits to take their place).
            live = before < remaining if policy.reads_batch else None
            if live is not None and not live.all():
                k = np.zeros(len(requests), dtype=np.int64)
                k[live] = policy.choose(
                    self._view(
                        requests[live],
                        positions[live],
                        (positions - start_positions)[live],
                        int((~live).sum()),
                        acc_len[live],
                    )
                )
            else:
                moved = positions - start_positions
                k = policy.choose(self._view(requests, positions, moved, 0, acc_len))
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
            # acc_len - 1 >= 0 drafts accepted, at most k: min(acc_len, k + 1) tokens emitted.
            reach = k + 1
            for i in range(j, j + hold):
                step = np.minimum(values[index], reach)
                emitted[:, i] = step
                positions = positions + step
                index = start + positions % length if wraps else index + step
            proposed[:, j : j + hold] = k[:, None]
            if forked is not None:
                chunk = emitted[:, j : j + hold]
                total = np.cumsum(chunk, axis=1)
                active = (before[:, None] + total - chunk) < remaining[:, None]
                seen_proposed[:, j : j + hold] = proposed[:, j : j + hold] * active
                seen_accepted[:, j : j + hold] = (chunk - 1) * active
                if j + hold < num_steps:  # the last chunk informs no decision of the window
                    forked.observe(
                        requests, seen_proposed[:, j : j + hold], seen_accepted[:, j : j + hold]
                    )
                before += total[:, -1]
            j += hold
        accepted = emitted - 1
        object.__setattr__(
            self,
            "_played",
            None if forked is None else (requests, seen_proposed, seen_accepted, snapshots),
        )
        return proposed, accepted

    def holds_for(self) -> int:
        if self._forks:
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
        drafting = k[k > 0]
        if not drafting.size or (drafting == drafting[0]).all():
            only = int(drafting[0]) if drafting.size else max(self.by_k)
            return np.asarray(self.by_k[only].draft_time_s(work), dtype=np.float64)
        ks = np.unique(drafting)
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
