"""One scenario's step-cost model lowered to a compiled evaluator.

:meth:`StepCostModel.breakdown <sim.cost_model.StepCostModel.breakdown>` prices a block of steps
with some forty numpy operations on short arrays; per engine event that is tens of microseconds
of call overhead for a few dozen numbers. :class:`LoweredCost` reads the cost model's parameters
once (coefficients, CUDA-graph capture sizes, host-cost terms, the measured attention fits) and
evaluates every step in one compiled loop (numba; :mod:`sim.engine.cost_eval`), in the Python
model's order of operations: ``graphed`` and the padded size, attention, the forward, the launch
stall, the CPU time, and the total in the order of :data:`sim.cost_model.BREAKDOWN_KEYS` with
the drafting time last.

Exactness. Sums, products, quotients, minima and maxima round the same in compiled code as in
numpy. Transcendental functions do not: numpy's float64 ``exp``, ``log`` and ``**`` use SIMD
implementations (AVX-512 here) that differ from the C library's in the last bit for a few
percent of arguments (measured: 46,023 of 10^6 ``exp`` values). Every transcendental term of the
cost model sits in the linear layers (GEMM-grid interpolation in log-log, the roofline's p-norm,
the experts a step touches, the fused-MoE fit) and the measured all-reduce (log-log
interpolation), and those depend on the step's padded token count, its logit rows and whether it
replays a CUDA graph alone (a draft network's, on its tokens and logit rows). So the evaluator
reads them from tables priced by the Python cost model itself: a grid of every whole token count
up to the token budget by every logit-row count up to the batch's (priced in blocks of 256 rows
by 64 columns when a step first needs one of them, all the blocks a block of steps needs in one
call; the grid starts as zero pages and takes memory only where it is priced, since a run
touches a few thousand distinct shapes), and for any other key a hash table filled on first
use. Each value is priced in a contiguous numpy call as
the Python model prices a block, so it is the value that model gives. The records are then
those of the Python path, bit for bit; ``tests/engine/test_cost_kernel.py`` checks it over random
step shapes for every kind of node the catalogue ships, and over whole runs.

Drafting time is lowered for the lookup strategies (n-gram, suffix, lookahead: arithmetic) and
for the EAGLE family (EAGLE, EAGLE-2, EAGLE-3, MTP: a catch-up forward of one network and one
forward of another per tree level, each a draft network's forward with its linear term from the
tables), also when a policy chooses the chain's length per step (each step's forwards and fixed
time are those of its k's chain, whose levels are the first of the longest's); for Medusa,
P-EAGLE or a draft model the drafter's own numpy method prices it and the evaluator adds it.
The drafter's overheads are read when the evaluator is built (a fit that swaps them does so
before the run). A deployment of several attention groups or with expert parallelism
(:mod:`sim.parallel_cost`) is not lowered: :func:`lower` returns None and the engine keeps the
Python path. Without numba likewise.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sim.cost_model import StepCostModel, StepShape
from sim.engine import cost_eval, cost_sharing
from sim.engine.cost_eval import (
    DRAFT_GIVEN,
    DRAFT_NONE,
    FIRST_NET,
    LATER_NET,
    NET_TERMS,
    ROWS,
)
from sim.engine.cost_grids import fill_blocks, no_grid, within, zero_grid
from sim.engine.cost_params import step_terms
from sim.engine.cost_terms import (
    _branch_prefix_reads,
    _chain_by_k,
    _draft_terms,
    _network_linear,
    _network_terms,
    python_durations,
)
from sim.engine.drafter import Drafter, DraftWork

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


class LoweredCost:
    """The cost model ``cost_model`` (with ``drafter``'s drafting time) as a compiled evaluator.

    Build it with :func:`lower`, which returns None where the scenario cannot be lowered.
    """

    def __init__(
        self,
        cost_model: StepCostModel,
        drafter: Drafter,
        speculative: bool,
        max_tokens: int = 0,
        max_logits: int = 0,
        max_seqs: int = 0,
    ) -> None:
        compiled = cost_eval.compiled()
        assert compiled is not None and cost_model._parallel is None  # checked by lower()
        self._evaluate, self._store = compiled
        self.cost_model = cost_model
        self.drafter = drafter
        self.speculative = speculative
        self._num_stored = 0
        self._new_table(1 << 10)
        self._linear_grid, self._allreduce_grid = self._grids(max_tokens, max_logits)
        networks: list[Any] = []
        draft_form, draft = DRAFT_NONE, (0.0, 0.0, 0.0)
        # A policy's chains: priced as the longest chain's strategy, its levels cut per step.
        chain = _chain_by_k(drafter) if speculative else None
        source = drafter if chain is None else chain[0]
        if speculative:
            draft_form, draft, networks = _draft_terms(source)
        self._networks = networks
        self._levels = np.zeros(0, dtype=np.float64)
        self._levels_by_k = np.zeros(0, dtype=np.int64)
        self._fixed_by_k = np.zeros(0, dtype=np.float64)
        if chain is not None:
            self._levels_by_k = np.asarray(chain[1], dtype=np.int64)
            self._fixed_by_k = np.asarray(chain[2], dtype=np.float64)
        self._nets = np.zeros(2 * NET_TERMS, dtype=np.float64)
        if networks:
            self._levels = np.asarray(source.level_nodes, dtype=np.float64)  # type: ignore[union-attr]
            self._nets = np.array([*_network_terms(networks[0]), *_network_terms(networks[1])])
            # The later network's spare term: each node reads its prefix KV itself.
            self._nets[NET_TERMS + 5] = 1.0 if _branch_prefix_reads(source) else 0.0
        self._first_grid, self._later_grid = self._network_grids(max_tokens, max_seqs)
        self._c, self._sizes, self._flags = step_terms(cost_model, draft_form, draft)
        self.draft_form = draft_form

    def durations(
        self,
        num_seqs: IntArray,
        num_tokens: IntArray,
        num_logit_tokens: IntArray,
        kv_read_tokens: IntArray,
        attention_pairs_x2: IntArray,
        work: DraftWork,
    ) -> tuple[FloatArray, dict[str, FloatArray]]:
        """Each step's duration and breakdown (as ``EngineCore`` sums them: the cost model's
        parts, then the drafting time), for steps of the given integer aggregates."""
        m = len(num_seqs)
        given = _EMPTY
        if self.draft_form == DRAFT_GIVEN:
            given = np.asarray(self.drafter.draft_time_s(work), dtype=np.float64)
        out = np.empty((len(ROWS), m), dtype=np.float64)
        missing = np.empty((3, m * (2 + len(self._levels))), dtype=np.float64)
        inputs = (
            _int64(num_seqs),
            _int64(num_tokens),
            _int64(num_logit_tokens),
            _int64(kv_read_tokens),
            _int64(attention_pairs_x2),
            _int64(work.num_seqs),
            _int64(work.num_new_tokens),
            _int64(work.context_tokens),
            _int64(work.num_proposed),
            given,
        )
        num_missing = self._evaluate(*inputs, *self.arrays(), out, missing)
        if num_missing:
            self._price(missing[:, :num_missing])
            # Read the arrays again: pricing may have moved the table to a larger one.
            num_missing = self._evaluate(*inputs, *self.arrays(), out, missing)
            assert num_missing == 0
        parts = {key: out[i] for i, key in enumerate(ROWS[:-1])}
        return out[-1], parts

    def arrays(self) -> tuple[NDArray[Any], ...]:
        """What the evaluator takes after a step's shape, in its order: the model's parameters,
        then the table and the grids (:meth:`_stores`, read at each call: the table's arrays are
        replaced when it grows). The compiled loop passes the same tuple."""
        return (
            self._levels,
            self._levels_by_k,
            self._fixed_by_k,
            self._nets,
            self._sizes,
            self._flags,
            self._c,
            *self._stores(),
        )

    def _stores(self) -> tuple[NDArray[Any], ...]:
        """The table and the grids, as the evaluator reads them (the table's arrays are
        replaced when it grows)."""
        return (
            self._table_keys,
            self._table_values,
            self._table_used,
            self._linear_grid,
            self._allreduce_grid,
            self._first_grid,
            self._later_grid,
        )

    def _price(self, keys: FloatArray) -> None:
        """Price new keys (padded tokens, logit rows, graphed; or a draft forward's tokens,
        logit rows and network) with the Python cost model's own terms: those within a grid
        fill their chunk of its rows, the others are stored in the table."""
        keys = np.unique(keys, axis=1)
        whole = keys[0] == np.floor(keys[0])
        step = keys[2] < FIRST_NET
        grid = self._linear_grid
        inside = step & whole & within(grid, keys)
        zero = np.zeros(keys.shape[1], dtype=np.bool_)
        if inside.any():
            zero[inside] = fill_blocks(
                grid, keys[:2, inside], lambda n, c: self._leaves(n, c, np.zeros(len(n), bool))[0]
            )
        first_grid = self._first_grid
        first = (keys[2] == FIRST_NET) & whole & within(first_grid, keys)
        if first.any():
            zero[first] = fill_blocks(
                first_grid, keys[:2, first], lambda n, c: _network_linear(self._networks[0], n, c)
            )
        # A key whose grid entry priced to 0.0 (which reads as not priced) goes to the table.
        inside &= ~zero
        first &= ~zero
        rest = ~inside & ~first
        if not rest.any():
            return
        keys = np.ascontiguousarray(keys[:, rest])
        linear = np.zeros(keys.shape[1], dtype=np.float64)
        allreduce = np.zeros(keys.shape[1], dtype=np.float64)
        step = keys[2] < FIRST_NET
        linear[step], allreduce[step] = self._leaves(
            keys[0, step], keys[1, step], keys[2, step] > 0
        )
        for which, network in zip((FIRST_NET, LATER_NET), self._networks, strict=False):
            rows = keys[2] == which
            if rows.any():
                linear[rows] = _network_linear(network, keys[0, rows], keys[1, rows])
        num_stored = self._num_stored + keys.shape[1]
        if 2 * num_stored > len(self._table_used):
            # Keep the table at most half full: a larger one, the old entries moved over.
            old = self._table_keys[self._table_used].T.copy(), self._table_values[self._table_used]
            size = 4 * len(self._table_used)
            while 2 * num_stored > size:  # a block may bring more keys than 4x the table holds
                size *= 4
            self._new_table(size)
            self._store(*self._table(), old[0], old[1][:, 0].copy(), old[1][:, 1].copy())
        self._store(*self._table(), keys, linear, allreduce)
        self._num_stored = num_stored

    def _new_table(self, size: int) -> None:
        """An empty table of ``size`` slots (a power of two)."""
        self._table_keys = np.zeros((size, 3), dtype=np.float64)
        self._table_values = np.zeros((size, 2), dtype=np.float64)
        self._table_used = np.zeros(size, dtype=np.bool_)
        self._num_stored = 0

    def _table(self) -> tuple[FloatArray, FloatArray, NDArray[np.bool_]]:
        return self._table_keys, self._table_values, self._table_used

    def _leaves(
        self, n: FloatArray, n_logits: FloatArray, graphed: NDArray[np.bool_]
    ) -> tuple[FloatArray, FloatArray]:
        """The linear layers' (the elementwise operators' share included) and the all-reduce's
        seconds (the cost model's transcendental terms) at padded tokens ``n`` with ``n_logits``
        logit rows, as ``breakdown`` prices them."""
        model = self.cost_model
        return model.step_linear_s(n, n_logits), model.step_allreduce_s(n, graphed)

    def _grids(self, max_tokens: int, max_logits: int) -> tuple[FloatArray, FloatArray]:
        """The linear term at every whole (tokens, logit rows) up to the bounds (0.0 until a
        step needs its block; stored block column by block column, see
        :data:`~sim.engine.cost_eval.COLUMNS_PER_FILL`), and the all-reduce at every whole
        token count out of and in a CUDA graph."""
        if max_tokens <= 0 or max_logits <= 0:
            return no_grid(), np.zeros((2, 0))
        linear = zero_grid(max_tokens + 1, max_logits + 1)
        tokens = np.arange(max_tokens + 1, dtype=np.float64)
        allreduce = np.empty((2, max_tokens + 1), dtype=np.float64)
        for graphed in (0, 1):
            flags = np.full(len(tokens), bool(graphed))
            allreduce[graphed] = self._leaves(tokens, np.ones_like(tokens), flags)[1]
        return linear, allreduce

    def _network_grids(self, max_new: int, max_seqs: int) -> tuple[FloatArray, FloatArray]:
        """The draft networks' linear terms at every whole (new tokens, sequences) of the
        first forward (0.0 until needed, as :meth:`_grids`) and every sequence count of each
        later forward."""
        if not self._networks or max_new <= 0 or max_seqs <= 0:
            return no_grid(), np.zeros((0, 0))
        later = self._networks[1]
        columns = max_seqs + 1
        later_grid = np.empty((len(self._levels), columns), dtype=np.float64)
        for level, nodes in enumerate(self._levels):
            tokens = nodes * np.arange(columns, dtype=np.float64)
            later_grid[level] = _network_linear(later, tokens, tokens)
        return zero_grid(max_new + 1, columns), later_grid

    def reference(
        self,
        num_seqs: IntArray,
        num_tokens: IntArray,
        num_logit_tokens: IntArray,
        kv_read_tokens: IntArray,
        attention_pairs_x2: IntArray,
        work: DraftWork,
    ) -> tuple[FloatArray, dict[str, FloatArray]]:
        """:meth:`durations` by the Python cost model and drafter (the reference path)."""
        shape = StepShape(
            num_seqs=num_seqs,
            num_tokens=num_tokens,
            num_logit_tokens=num_logit_tokens,
            kv_read_tokens=kv_read_tokens,
            attention_pairs=attention_pairs_x2 / 2.0,
        )
        return python_durations(self.cost_model, self.drafter, self.speculative, shape, work)


_EMPTY = np.zeros(1, dtype=np.float64)


def _int64(values: Any) -> IntArray:
    if isinstance(values, np.ndarray) and values.dtype == np.int64 and values.ndim == 1:
        return np.ascontiguousarray(values)
    return np.ascontiguousarray(np.atleast_1d(values), dtype=np.int64)


def lower(
    cost_model: StepCostModel,
    drafter: Drafter,
    speculative: bool,
    max_tokens: int = 0,
    max_logits: int = 0,
    max_seqs: int = 0,
) -> LoweredCost | None:
    """The compiled evaluator of ``cost_model`` and ``drafter``, or None where it cannot be
    built: without numba, for a deployment priced by :mod:`sim.parallel_cost` (several
    attention groups or expert parallelism), for a pipeline (:mod:`sim.pipeline` prices the
    step as its stages' round trip) or for linear-attention layers' per-sequence state
    (:mod:`sim.linear_attention`); those keep the Python path. Steps of up to
    ``max_tokens`` (padded) tokens and ``max_logits`` logit rows read their linear and
    all-reduce terms from a grid priced once, as do draft forwards of up to ``max_tokens`` new
    tokens and ``max_seqs`` sequences; others are priced on first use."""
    if (
        cost_eval.compiled() is None
        or cost_model._parallel is not None
        or type(cost_model) is not StepCostModel
        or cost_model._state_s_per_seq != 0.0
    ):
        return None
    state = cost_sharing.reuse_key(
        cost_model, drafter, speculative, (max_tokens, max_logits, max_seqs)
    )
    # Shared within a thread only: runs in threads of one process (a Dask worker's) would
    # price into one table at once.
    key = None if state is None else (threading.get_ident(), state)
    lowered = cost_sharing.BUILT.get(key) if key is not None else None
    if lowered is not None:
        cost_sharing.BUILT.move_to_end(key)  # type: ignore[arg-type]
        # Entries priced from now on come from this run's model (of the same state).
        lowered.cost_model, lowered.drafter = cost_model, drafter
        return lowered
    lowered = LoweredCost(cost_model, drafter, speculative, max_tokens, max_logits, max_seqs)
    if key is not None:
        cost_sharing.BUILT[key] = lowered
        while len(cost_sharing.BUILT) > cost_sharing.KEEP_BUILT:
            cost_sharing.BUILT.popitem(last=False)
    return lowered
