"""Policies that learn nothing: ``fixed`` (k at every step), ``disable-above-batch`` (k up to a
batch size, none above, as vLLM's ``speculative_disable_by_batch_size``) and ``oracle`` (each
sequence proposes exactly what the target will accept).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.engine.policies.base import BatchView, IntArray, SpeculationPolicy, _check_range


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

    def holds_as_batch_shrinks(self, batch_size: int) -> bool:
        # At most max_batch_size: so is every smaller batch (k throughout). Above, a finish may
        # bring the batch down to it and switch speculation on.
        return batch_size <= self.max_batch_size

    def candidates(self) -> tuple[int, ...]:
        return (0, self.k)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "k": self.k, "max_batch_size": self.max_batch_size}


class OraclePolicy(SpeculationPolicy):
    """Each sequence proposes exactly the drafts the target will accept (capped at k_max): no
    draft is wasted. An upper bound, not an engine's policy."""

    name = "oracle"
    clairvoyant = True

    def choose(self, view: BatchView) -> IntArray:
        return np.minimum(view.acc_len - 1, self.k_max)
