"""How long a block's steps take: the Python cost model, or the compiled evaluator
(:mod:`sim.engine.cost_kernel`) once enough blocks were costed; the durations are the same either
way, bit for bit.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from sim.cost_model import StepCostModel
from sim.engine import cost_kernel, cost_terms
from sim.engine.block import StepTotals
from sim.engine.drafter import Drafter, DraftWork, StepPlan
from sim.engine.scheduler import Scheduler

FloatArray = NDArray[np.float64]

#: Blocks costed by the Python cost model before the compiled evaluator is loaded (see
#: StepCosting._lowered_cost): loading numba and the cached machine code costs about 0.6 s of
#: CPU and 130 MB, which the evaluator repays after some 10,000 to 20,000 more blocks.
LOWER_COST_AFTER_BLOCKS = 20_000


class StepCosting:
    """The costing of a block's steps, for :class:`~sim.engine.core.EngineCore`: the Python cost
    model, or the compiled evaluator once the run has shown it long enough to repay loading it."""

    scheduler: Scheduler
    cost_model: StepCostModel
    drafter: Drafter
    plan: StepPlan
    speculative: bool
    compiled_cost: bool
    lower_cost_after: int
    _num_costed: int
    _lowered: cost_kernel.LoweredCost | None
    clock_s: float

    # --- costing --------------------------------------------------------------------------------
    def _durations(
        self, totals: StepTotals, work: DraftWork
    ) -> tuple[FloatArray, dict[str, FloatArray]]:
        lowered = self._lowered_cost()
        if lowered is not None:
            return lowered.durations(
                totals.num_seqs,
                totals.num_tokens,
                totals.num_logit_tokens,
                totals.kv_read_tokens,
                totals.attention_pairs_x2,
                work,
            )
        # The order of the sum is fixed (BREAKDOWN_KEYS) so both paths round identically.
        return cost_terms.python_durations(
            self.cost_model, self.drafter, self.speculative, totals.shape(), work
        )

    def _lowered_cost(self) -> cost_kernel.LoweredCost | None:
        """The compiled evaluator, built once ``lower_cost_after`` blocks were costed (None
        before, when off, without numba, or for a scenario that is not lowered)."""
        if self._lowered is not None or not self.compiled_cost:
            return self._lowered
        self._num_costed += 1
        if self._num_costed <= self.lower_cost_after:
            return None
        config = self.scheduler.config
        sizes = self.cost_model.host._sizes
        max_tokens = max(config.max_num_batched_tokens, int(sizes[-1]) if len(sizes) else 0)
        max_drafts = int(self.plan.proposed.max()) if len(self.plan.proposed) else 0
        per_seq = 1 + config.extra_tokens_per_decode + max_drafts
        # Logit rows of any step (decodes and verifications, a completing prefill each), the
        # grid kept to 2^25 entries (256 MB, taken only where priced: cost_grids.zero_grid);
        # larger steps are priced on first use. At 2^22 (a grid filled in advance) the default
        # scenario's EAGLE-3 steps of over 511 logit rows each went through the key table, one
        # hand-back of the compiled loop per new key (2,400 in a 3,000-request probe); at 2^24
        # those of 2,048 to 2,669 rows did in a probe above capacity (2,621 hand-backs, two
        # thirds of its CPU, at 20,000 requests).
        max_logits = min(config.max_num_seqs * per_seq, (1 << 25) // (max_tokens + 1))
        self._lowered = cost_kernel.lower(
            self.cost_model,
            self.drafter,
            self.speculative,
            max_tokens,
            max_logits,
            config.max_num_seqs,
        )
        if self._lowered is None:
            self.compiled_cost = False  # the Python path for the rest of the run
        return self._lowered

    def _starts(self, durations: FloatArray) -> FloatArray:
        """Start of each step and the end of the last: a sequential sum from the clock."""
        starts = np.empty(len(durations) + 1, dtype=np.float64)
        starts[0] = self.clock_s
        starts[1:] = durations
        return np.add.accumulate(starts, out=starts)
