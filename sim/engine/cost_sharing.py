"""The compiled cost evaluators a process has built, shared by its runs that price steps alike
(:func:`sim.engine.cost_kernel.lower`): a sweep's points or a plan's probes then price the
evaluator's grids and table once per worker, not once per run.
"""

from __future__ import annotations

import pickle
from collections import OrderedDict
from typing import TYPE_CHECKING

from sim.cost_model import StepCostModel
from sim.engine.cost_eval import DRAFT_GIVEN, DRAFT_NONE
from sim.engine.cost_terms import _branch_prefix_reads, _chain_by_k, _draft_terms
from sim.engine.drafter import Drafter

if TYPE_CHECKING:
    from sim.engine.cost_kernel import LoweredCost

#: Evaluators built in this process, by thread and everything they read (:func:`reuse_key`),
#: the most recently used last: the runs of a sweep or a plan that price steps alike share one,
#: whose grids and table are then priced once per worker, not once per run. Each holds the
#: blocks of its grids priced so far, so only the last few are kept.
BUILT: OrderedDict[tuple[int, bytes], LoweredCost] = OrderedDict()
#: Evaluators kept in :data:`BUILT` (a plan's three methods and one more).
KEEP_BUILT = 4


def reuse_key(
    cost_model: StepCostModel, drafter: Drafter, speculative: bool, bounds: tuple[int, int, int]
) -> bytes | None:
    """The state an evaluator's prices depend on, as bytes: the cost model pickled whole (its
    coefficients, host terms and measured tables), the grids' bounds and what the evaluator
    reads from the drafter (its drafting terms, draft networks pickled whole, tree levels, a
    policy's chains). Two evaluators of equal keys price every step alike: each value is the
    Python model's for the same state. None for a drafter that prices its own time (read per
    call) or a model that cannot be pickled: such an evaluator is not shared."""
    chain = _chain_by_k(drafter) if speculative else None
    source = drafter if chain is None else chain[0]
    form, draft, networks = _draft_terms(source) if speculative else (DRAFT_NONE, (), [])
    if form == DRAFT_GIVEN:
        return None
    levels = list(source.level_nodes) if networks else []  # type: ignore[union-attr]
    branch = _branch_prefix_reads(source)
    state = (
        cost_model,
        speculative,
        bounds,
        form,
        draft,
        networks,
        levels,
        branch,
        chain and chain[1:],
    )
    try:
        return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        return None
