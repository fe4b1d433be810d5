"""``goodput``: the k that maximises the batch's expected tokens per second (SmartSpec, Liu et al.
2024, arXiv:2406.14066), and the step-time table it reads from the run's own cost model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from sim.engine.drafter import DraftWork
from sim.engine.policies.base import (
    BatchView,
    FloatArray,
    IntArray,
    SpeculationPolicy,
    StepTime,
    _check_range,
)
from sim.errors import ScenarioError


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
        # Geometric acceptance: α̂ = accepted / tried drafts (the MLE), each an EMA per request:
        # row 0 and row 1 of one array, so a step updates both in one pass.
        self._ema = np.ones((2, num_requests))
        self._ema[0] = float(prior_alpha)
        #: The observed rows' EMAs (2 × rows) after the last :meth:`observe` of a fork, for
        #: :meth:`snapshot` (None before any).
        self._rows: FloatArray | None = None
        self.prior_alpha = float(prior_alpha)
        self.ema_alpha = float(ema_alpha)
        self.update_interval = int(update_interval)
        self.step_time = step_time
        self.since_update = update_interval  # decide at the first step
        self.current = k_max

    @property
    def accepted_ema(self) -> FloatArray:
        """EMA of accepted drafts per request."""
        return self._ema[0]

    @property
    def tried_ema(self) -> FloatArray:
        """EMA of tried drafts per request (accepted, and the rejected one)."""
        return self._ema[1]

    def choose(self, view: BatchView) -> IntArray:
        if self.since_update >= self.update_interval:
            self.current = self._best_k(view)
            self.since_update = 0
        return np.full(len(view.ids), self.current, dtype=np.int64)

    def _best_k(self, view: BatchView) -> int:
        ema = self._ema[:, view.ids]
        # np.clip(x, 0, 0.999), without its dispatch.
        alpha = np.minimum(np.maximum(ema[0] / ema[1], 0.0), 0.999)
        context = int(view.computed.sum())
        # Σ_i (1 - α_i^{k+1}) / (1 - α_i) = Σ_{d<=k} Σ_i α_i^d: a running sum of power sums.
        # The powers by repeated multiplication (α^d = α^{d-1} α), which the compiled loop
        # (sim/engine/policy_kernel.py) reproduces to the bit; np.power rounds differently.
        powers = np.empty((len(alpha), self.k_max + 1))
        powers[:, 0] = 1.0
        powers[:, 1:] = alpha[:, None]
        power_sums = np.cumprod(powers, axis=1).sum(axis=0)
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
        """The decision, its age and the observed rows' EMAs (None: not moved since the
        fork)."""
        return (self.current, self.since_update, self._rows)

    def adopt(
        self, snapshot: Any, start: int, ids: IntArray, proposed: IntArray, accepted: IntArray
    ) -> SpeculationPolicy:
        # The fork's rows learnt the steps before ``start`` as this policy would (the same
        # arithmetic from the same state): take their EMAs, then learn the steps after.
        current, since, rows = snapshot
        if rows is not None:
            self._ema[:, ids] = rows
        self.observe(ids, proposed[:, start:], accepted[:, start:])
        self.current = current
        self.since_update = min(since + proposed.shape[1] - start, self.update_interval)
        self._rows = None
        return self

    def fork(self) -> GoodputPolicy:
        twin = object.__new__(GoodputPolicy)
        twin.__dict__.update(self.__dict__)  # copy.copy without its __reduce_ex__ round trip
        twin._ema = self._ema.copy()
        twin._rows = None
        return twin

    def observe(self, ids: IntArray, proposed: IntArray, accepted: IntArray) -> None:
        # The rows' EMAs gathered once, updated column by column (the same arithmetic as one
        # step at a time, so fast-forwarded and stepped runs agree to the bit), scattered back.
        ema = self._ema[:, ids]
        # Rows that drafted nothing learn nothing (their step adds an exact zero). A chain step
        # tried a + 1 drafts (the last rejected) unless all p were accepted.
        weights = (self.ema_alpha * (proposed > 0)).T
        targets = np.empty((proposed.shape[1], 2, len(ids)))
        targets[:, 0] = accepted.T
        targets[:, 1] = np.minimum(accepted + 1, proposed).T
        for went, target in zip(weights, targets, strict=True):
            # Both EMAs of every row: ema += went · (target - ema).
            change = target - ema
            change *= went
            ema += change
        self._ema[:, ids] = ema
        self._rows = ema
        self.since_update = min(self.since_update + proposed.shape[1], self.update_interval)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "prior_alpha": self.prior_alpha,
            "ema_alpha": self.ema_alpha,
            "update_interval": self.update_interval,
            "source": "SmartSpec (arXiv:2406.14066) goodput rule, cost model step times",
        }


#: The tabulated step time's context bins: the batch's mean cached tokens per sequence, rounded
#: to this many tokens (a bin moves the attention term of a step by well under a percent at the
#: contexts served, and the goodput argmax over k by less).
CONTEXT_BIN_TOKENS = 128


#: Batch sizes a bin's first tabulation covers at least (:meth:`TabulatedStepTime.row`).
ROW_CHUNK = 64


class TabulatedStepTime:
    """:data:`StepTime` computed once per (batch size, mean-context bin) and looked up after:
    the goodput policy asks at every decision, and a run meets a few hundred distinct keys.
    The context is taken at the bin's centre, so two asks in one bin get the same answer.

    With ``rows`` (the step time of many batch sizes at once, each at its own context: the same
    numbers as one at a time, element by element), a miss tabulates its bin for many batch
    sizes in one call: from the sizes it holds up to at least twice the one asked (at least
    :data:`ROW_CHUNK`; at most ``max_batch``). A 1,024-row bin costs about what five single
    keys cost, and a run meets a few bins at batch sizes far below ``max_batch``."""

    def __init__(
        self, step_time: StepTime, rows: StepTimes | None = None, max_batch: int = 0
    ) -> None:
        self.step_time = step_time
        self.table: dict[tuple[int, int, int], FloatArray] = {}
        self.rows_of = rows
        self.max_batch = int(max_batch)
        #: Whole bins: (k_max, bin) -> (max_batch + 1) x entry, batch size b at row b.
        self.rows: dict[tuple[int, int], FloatArray] = {}

    def __call__(self, b: int, k_max: int, context: int) -> FloatArray:
        per_seq = round(float(context) / max(b, 1) / CONTEXT_BIN_TOKENS)
        if self.rows_of is not None and 0 <= b <= self.max_batch:
            return self.row(int(k_max), per_seq, b)[b]
        key = (int(b), int(k_max), per_seq)
        found = self.table.get(key)
        if found is None:
            centre = per_seq * CONTEXT_BIN_TOKENS * max(b, 1)
            found = self.table[key] = self.step_time(b, k_max, centre)
        return found

    def row(self, k_max: int, per_seq: int, batch_size: int | None = None) -> FloatArray:
        """The entries of one context bin for batch sizes 0 up to at least ``batch_size`` (every
        one to ``max_batch`` when None), batch size b at row b (needs ``rows``)."""
        found = self.rows.get((k_max, per_seq))
        want = self.max_batch if batch_size is None else min(int(batch_size), self.max_batch)
        have = 0 if found is None else len(found)
        if have <= want:
            assert self.rows_of is not None
            upto = min(max(2 * (want + 1), ROW_CHUNK), self.max_batch + 1)
            sizes = np.arange(have, upto, dtype=np.int64)
            centres = per_seq * CONTEXT_BIN_TOKENS * np.maximum(sizes, 1)
            more = self.rows_of(sizes, k_max, centres)
            found = more if found is None else np.concatenate((found, more))
            self.rows[(k_max, per_seq)] = found
        assert found is not None
        return found


def cost_model_step_time(
    cost_model: Any, drafter: Any, extra_tokens_per_decode: int, max_batch: int = 0
) -> StepTime:
    """:data:`StepTime` from the run's own cost model and drafter: a verify step of ``b``
    sequences, each computing ``1 + extra + k`` tokens over ``context`` cached tokens in all,
    plus the drafting of the next step's k drafts (tabulated: :class:`TabulatedStepTime`, a bin
    at a time for batches up to ``max_batch``)."""
    rows = _cost_model_step_times(cost_model, drafter, extra_tokens_per_decode)

    def step_time(b: int, k_max: int, context: int) -> FloatArray:
        return rows(np.array([b], dtype=np.int64), k_max, np.array([context], dtype=np.int64))[0]

    return TabulatedStepTime(step_time, rows if max_batch > 0 else None, max_batch)


#: Step times of many verify steps at once: batch sizes and their contexts -> batch x 2 x (k_max
#: + 1), each row :data:`StepTime`'s two rows.
StepTimes = Callable[[IntArray, int, IntArray], FloatArray]


def _cost_model_step_times(
    cost_model: Any, drafter: Any, extra_tokens_per_decode: int
) -> StepTimes:
    from sim.cost_model import StepShape

    def step_times(sizes: IntArray, k_max: int, contexts: IntArray) -> FloatArray:
        k = np.arange(k_max + 1)
        num, width = len(sizes), k.size
        b = np.repeat(sizes, width)
        context = np.repeat(contexts, width)
        t = 1 + extra_tokens_per_decode + np.tile(k, num)
        shape = StepShape(
            num_seqs=b,
            num_tokens=b * t,
            num_logit_tokens=b * t,
            kv_read_tokens=context + b * t,
            attention_pairs=t * context + b * t * (t + 1) / 2.0,
        )
        parts = cost_model.breakdown(shape)
        total = sum(np.asarray(parts[key], dtype=np.float64) for key in parts if key != "draft_s")
        # Drafting with no sequence and with every sequence fully accepted (a draft model then
        # runs one more forward to keep its KV in step): the policy weighs the two rows.
        seqs = np.repeat(sizes, 2 * width)
        context_tokens = np.repeat(contexts, 2 * width)
        ks = np.tile(np.concatenate((k, k)), num)
        full = np.tile(np.concatenate((0 * k, np.ones(width, dtype=np.int64))), num) * seqs
        work = DraftWork(seqs, seqs * (ks + 1), context_tokens, full, seqs * ks)
        draft = np.asarray(drafter.draft_time_s(work), dtype=np.float64).reshape(num, 2, width)
        steps = np.asarray(total, dtype=np.float64).reshape(num, 1, width)
        return np.asarray(steps + np.where(k > 0, draft, 0.0), dtype=np.float64)

    return step_times
