"""One scenario's step-cost model lowered to a compiled evaluator.

:meth:`StepCostModel.breakdown <sim.cost_model.StepCostModel.breakdown>` prices a block of steps
with some forty numpy operations on short arrays; per engine event that is tens of microseconds
of call overhead for a few dozen numbers. :class:`LoweredCost` reads the cost model's parameters
once (coefficients, CUDA-graph capture sizes, host-cost terms, the measured attention fits) and
evaluates every step in one compiled loop (numba), in the Python model's order of operations:
``graphed`` and the padded size, attention, the forward, the launch stall, the CPU time, and the
total in the order of :data:`sim.cost_model.BREAKDOWN_KEYS` with the drafting time last.

Exactness. Sums, products, quotients, minima and maxima round the same in compiled code as in
numpy. Transcendental functions do not: numpy's float64 ``exp``, ``log`` and ``**`` use SIMD
implementations (AVX-512 here) that differ from the C library's in the last bit for a few
percent of arguments (measured: 46,023 of 10^6 ``exp`` values). Every transcendental term of the
cost model sits in the linear layers (GEMM-grid interpolation in log-log, the roofline's p-norm,
the experts a step touches, the fused-MoE fit) and the measured all-reduce (log-log
interpolation), and those depend on the step's padded token count, its logit rows and whether it
replays a CUDA graph alone (a draft network's, on its tokens and logit rows). So the evaluator
reads them from tables priced by the Python cost model itself: a grid of every whole token count
up to the token budget by every logit-row count up to the batch's (filled 256 rows at a time,
when a step first needs one of them: a run touches a few thousand distinct shapes), and for any
other key a hash table filled on first use. Each value is priced in a contiguous numpy call as
the Python model prices a block, so it is the value that model gives. The records are then
those of the Python path, bit for bit; ``tests/engine/test_cost_kernel.py`` checks it over random
step shapes for every kind of node the catalogue ships, and over whole runs.

Drafting time is lowered for the lookup strategies (n-gram, suffix, lookahead: arithmetic) and
for the EAGLE family (EAGLE, EAGLE-2, EAGLE-3, MTP: a catch-up forward of one network and one
forward of another per tree level, each a draft network's forward with its linear term from the
tables); for Medusa, P-EAGLE, a draft model or an adaptive policy the drafter's own numpy method
prices it and the evaluator adds it. The drafter's overheads are read when the evaluator is
built (a fit that swaps them does so before the run). A deployment of
several attention groups or with expert parallelism (:mod:`sim.parallel_cost`) is not lowered:
:func:`lower` returns None and the engine keeps the Python path. Without numba likewise.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sim.cost_model import StepCostModel, StepShape, smooth_max
from sim.engine.drafter import Drafter, DraftWork

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

#: Rows of the evaluator's output, in this order (``total_s`` last).
ROWS = ("fixed_s", "linear_s", "attention_s", "allreduce_s", "sampling_s", "draft_s", "total_s")

#: How the drafting time is priced: in the evaluator (none; CPU lookup per sequence and context
#: token) or by the drafter in numpy and passed in.
DRAFT_NONE, DRAFT_CPU, DRAFT_GIVEN, DRAFT_NETWORKS = 0, 1, 2, 3

#: Table keys of the draft networks' linear terms: (tokens, logit rows, FIRST_NET or LATER_NET).
FIRST_NET, LATER_NET = 2.0, 3.0

#: Rows of a grid priced at once when a step first needs one of them.
ROWS_PER_FILL = 256

#: Terms of one draft network in ``nets`` (:func:`_network_terms`), per network.
NET_TERMS = 6

#: Attention forms: the cost model's roofline, or the measured decode and prefill kernels.
ATTENTION_ROOFLINE, ATTENTION_KERNELS = 0, 1


def _evaluate(
    num_seqs_i: IntArray,
    tokens_i: IntArray,
    logits_i: IntArray,
    kv_read_i: IntArray,
    pairs_x2_i: IntArray,
    draft_seqs_i: IntArray,
    draft_new_i: IntArray,
    draft_context_i: IntArray,
    draft_proposed_i: IntArray,
    draft_given: FloatArray,
    levels: FloatArray,
    nets: FloatArray,
    sizes: IntArray,
    flags: IntArray,
    c: FloatArray,
    table_keys: FloatArray,
    table_values: FloatArray,
    table_used: NDArray[np.bool_],
    linear_grid: FloatArray,
    allreduce_grid: FloatArray,
    first_grid: FloatArray,
    later_grid: FloatArray,
    out: FloatArray,
    missing: FloatArray,
) -> int:
    """Price every step into ``out`` (:data:`ROWS` × steps); return how many table entries are
    missing (their keys are written to ``missing``, 3 × up to (2 + levels) per step, and
    ``out`` is then incomplete). ``flags``, ``c``, ``levels`` (the later draft forwards' nodes
    per sequence) and ``nets`` (the draft networks' terms, :func:`_network_terms`) are
    :class:`LoweredCost`'s parameters."""
    counts_sequences, padding, mixed, max_tokens = flags[0], flags[1], flags[2], flags[3]
    expansion, attention_form, window_on, prefill_differs = flags[4], flags[5], flags[6], flags[7]
    overlap, draft_form, num_layers = flags[8], flags[9], flags[10]
    num_sizes = len(sizes)
    num_missing = 0
    for j in range(len(num_seqs_i)):
        b = float(num_seqs_i[j])
        n_real = float(tokens_i[j])
        n_logits = float(logits_i[j])
        decode_only = n_real <= n_logits
        # CUDA graph and padded size (HostCostModel.graphed, .padded_tokens).
        graphed = False
        n = n_real
        if num_sizes > 0:
            size = num_seqs_i[j] if counts_sequences else tokens_i[j]
            inside = size <= max_tokens and (decode_only or mixed)
            index = int(np.searchsorted(sizes, size))
            if index > num_sizes - 1:
                index = num_sizes - 1
            graphed = inside if padding else inside and sizes[index] == size
            if graphed:
                if counts_sequences:
                    index_b = int(np.searchsorted(sizes, b))
                    if index_b > num_sizes - 1:
                        index_b = num_sizes - 1
                    per_seq = n_real / b if b > 0 else 1.0
                    n = float(sizes[index_b]) * per_seq
                else:
                    index_n = int(np.searchsorted(sizes, n_real))
                    if index_n > num_sizes - 1:
                        index_n = num_sizes - 1
                    n = float(sizes[index_n])
        key = (n, n_logits, 1.0 if graphed else 0.0)
        # Whole token counts within the dense grid are read from it, others from the table.
        row = int(n)
        column = int(n_logits)
        dense = row == n and row < linear_grid.shape[0] and column < linear_grid.shape[1]
        linear = linear_grid[row, column] if dense else 0.0
        # A grid entry not priced yet is NaN (no cost is).
        slot = -1
        if dense:
            found = linear == linear
        else:
            slot = _probe(table_keys, table_used, n, n_logits, key[2])
            found = bool(table_used[slot])
        if not found:
            missing[0, num_missing] = n
            missing[1, num_missing] = n_logits
            missing[2, num_missing] = key[2]
            num_missing += 1
        draft = 0.0
        if draft_form == DRAFT_NETWORKS:
            # EagleStrategy.draft_time_s: a catch-up forward of the first network, then one
            # forward of the later network per tree level (NetworkCost.forward_s each).
            seqs = float(draft_seqs_i[j])
            new = float(draft_new_i[j])
            context = float(draft_context_i[j])
            mean = context / max(seqs, 1.0)
            seconds = 0.0
            later = 0.0
            num_step_missing = 0
            for f in range(len(levels) + 1):
                if f == 0:
                    which, base = FIRST_NET, 0
                    f_tokens, f_logits, f_kv, f_pairs = new, seqs, context, new * mean
                else:
                    which, base = LATER_NET, NET_TERMS
                    index_f = float(f)
                    f_tokens = levels[f - 1] * seqs
                    f_logits = f_tokens
                    f_kv = context + index_f * seqs
                    f_pairs = f_tokens * (mean + index_f)
                # The grids hold every whole (new tokens, sequences) of the first forward and
                # every sequence count of each later one; others are in the table.
                f_seqs = int(seqs)
                if f == 0:
                    f_row = int(new)
                    in_grid = f_row < first_grid.shape[0] and f_seqs < first_grid.shape[1]
                    f_linear = first_grid[f_row, f_seqs] if in_grid else 0.0
                else:
                    in_grid = f_seqs < later_grid.shape[1]
                    f_linear = later_grid[f - 1, f_seqs] if in_grid else 0.0
                if not in_grid or f_linear != f_linear:
                    f_slot = _probe(table_keys, table_used, f_tokens, f_logits, which)
                    if not in_grid and table_used[f_slot]:
                        f_linear = table_values[f_slot, 0]
                    else:
                        missing[0, num_missing] = f_tokens
                        missing[1, num_missing] = f_logits
                        missing[2, num_missing] = which
                        num_missing += 1
                        num_step_missing += 1
                        continue
                f_forward = (
                    f_linear + max(nets[base] * f_kv, nets[base + 1] * f_pairs) + nets[base + 2]
                )
                if nets[base + 3] != 0.0:
                    # Launched eagerly outside the captured sizes, as a decode-shaped step.
                    f_size = int(f_logits) if counts_sequences else int(f_tokens)
                    f_graphed = False
                    if num_sizes > 0:
                        f_graphed = f_size <= max_tokens
                        if not padding:
                            f_index = int(np.searchsorted(sizes, f_size))
                            if f_index > num_sizes - 1:
                                f_index = num_sizes - 1
                            f_graphed = f_graphed and sizes[f_index] == f_size
                    if not f_graphed:
                        f_forward = f_forward + max(nets[base + 4] - f_forward, 0.0)
                    else:
                        f_forward = f_forward + 0.0
                if f == 0:
                    seconds = f_forward
                elif f == 1:
                    later = f_forward
                else:
                    later = later + f_forward
            if num_step_missing:
                continue
            if len(levels):
                seconds = seconds + later
            drafting = seqs > 0 and draft_proposed_i[j] > 0
            draft = (c[22] + seconds) * (1.0 if drafting else 0.0)
        if not found:
            continue
        if dense:
            allreduce = allreduce_grid[1 if graphed else 0, row]
        else:
            linear, allreduce = table_values[slot, 0], table_values[slot, 1]
        kv_read = float(kv_read_i[j])
        pairs = pairs_x2_i[j] / 2.0
        if expansion and decode_only:
            kv_read = max(kv_read, pairs)
        if attention_form == ATTENTION_KERNELS:
            kv_bytes = kv_read * 2.0 * c[0] * c[1] * c[2]
            decode = c[3] + b * c[0] * c[4] + kv_bytes / c[5]
            prefill = c[6] + n_real * c[7] * c[8] + c[9] * pairs / c[10]
            attention = num_layers * max(decode, prefill)
        else:
            read = c[11] * kv_read
            if window_on:
                read = read + c[12] * min(kv_read, b * c[13])
            pair_s = c[14]
            if prefill_differs and not decode_only:
                pair_s = c[15]
            attention = max(read, pair_s * pairs)
        sampling = c[16] * n_logits
        forward = linear + attention + allreduce + sampling
        stall = 0.0 if graphed else max(c[17] - forward, 0.0)
        variable = c[18] * b + c[19] * n_real
        if overlap:
            variable = max(variable - (forward + stall), 0.0)
        cpu = c[20] + c[21] + variable
        if draft_form == DRAFT_CPU:
            seqs = float(draft_seqs_i[j])
            draft = 0.0
            if seqs > 0:
                draft = c[22] + c[23] * seqs + c[24] * float(draft_context_i[j])
        elif draft_form == DRAFT_GIVEN:
            draft = draft_given[j]
        fixed = cpu + stall
        out[0, j] = fixed
        out[1, j] = linear
        out[2, j] = attention
        out[3, j] = allreduce
        out[4, j] = sampling
        out[5, j] = draft
        out[6, j] = fixed + linear + attention + allreduce + sampling + draft
    return num_missing


def _probe(keys: FloatArray, used: NDArray[np.bool_], a: float, b: float, c: float) -> int:
    """The slot of key ``(a, b, c)`` in an open-addressing table (``keys``, ``used``; its
    size a power of two): where it is, or the empty slot where it goes."""
    mask = len(used) - 1
    slot = (int(a) * 31 + int(b) * 7 + int(c)) & mask
    while used[slot] and not (keys[slot, 0] == a and keys[slot, 1] == b and keys[slot, 2] == c):
        slot = (slot + 1) & mask
    return slot


def _store(
    table_keys: FloatArray,
    table_values: FloatArray,
    table_used: NDArray[np.bool_],
    keys: FloatArray,
    linear: FloatArray,
    allreduce: FloatArray,
) -> None:
    """Add the priced keys (3 × k) to the table."""
    for i in range(keys.shape[1]):
        slot = _probe(table_keys, table_used, keys[0, i], keys[1, i], keys[2, i])
        table_used[slot] = True
        table_keys[slot, 0], table_keys[slot, 1], table_keys[slot, 2] = keys[:, i]
        table_values[slot, 0], table_values[slot, 1] = linear[i], allreduce[i]


@cache
def _compiled() -> tuple[Callable[..., int], Callable[..., None]] | None:
    """The evaluator and the table's store, compiled (cached on disk), or None without
    numba."""
    try:
        import numba
    except ImportError:
        return None
    # The module's functions call the compiled probe: compiled ones in its namespace.
    globals()["_probe"] = numba.njit(cache=True, nogil=True)(_probe)
    evaluate: Any = numba.njit(cache=True, nogil=True)(_evaluate)
    store: Any = numba.njit(cache=True, nogil=True)(_store)
    return evaluate, store


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
        compiled = _compiled()
        assert compiled is not None and cost_model._parallel is None  # checked by lower()
        self._evaluate, self._store = compiled
        self.cost_model = cost_model
        self.drafter = drafter
        self.speculative = speculative
        self._num_stored = 0
        self._new_table(1 << 10)
        self._linear_grid, self._allreduce_grid = self._grids(max_tokens, max_logits)
        host = cost_model.host
        costs = cost_model.host_costs
        kernels = cost_model._kernels
        measured_attention = kernels is not None and kernels.prices_attention
        networks: list[Any] = []
        draft_form, draft = DRAFT_NONE, (0.0, 0.0, 0.0)
        if speculative:
            draft_form, draft, networks = _draft_terms(drafter)
        self._networks = networks
        self._levels = np.zeros(0, dtype=np.float64)
        self._nets = np.zeros(2 * NET_TERMS, dtype=np.float64)
        if networks:
            self._levels = np.asarray(drafter.level_nodes, dtype=np.float64)  # type: ignore[attr-defined]
            self._nets = np.array([*_network_terms(networks[0]), *_network_terms(networks[1])])
        self._first_grid, self._later_grid = self._network_grids(max_tokens, max_seqs)
        c = np.zeros(25, dtype=np.float64)
        if measured_attention:
            assert kernels is not None
            dec, pre = kernels._decode, kernels._prefill
            assert dec is not None and pre is not None
            c[0], c[1], c[2] = kernels._kv_heads, kernels._head_dim, dec.kv_bytes_per_element
            c[3], c[4] = dec.floor_s, dec.per_seq_kv_head_s
            c[5] = dec.bandwidth * dec.hbm_bandwidth_bytes_per_s
            c[6], c[7], c[8] = pre.floor_s, kernels._heads, pre.per_token_head_s
            c[9] = 4.0 * kernels._heads * kernels._head_dim
            c[10] = pre.flops * pre.bf16_dense_flops
        c[11], c[12], c[13] = (
            cost_model._kv_s_per_token,
            cost_model._window_kv_s_per_token,
            cost_model._window,
        )
        c[14], c[15] = cost_model._attention_s_per_pair, cost_model._prefill_s_per_pair
        c[16] = cost_model._sampling_s_per_logit
        c[17] = host._eager_launch_s
        c[18] = costs.per_sequence_overhead_s + (
            costs.spec_per_sequence_overhead_s if cost_model.speculative else 0
        )
        c[19] = costs.per_token_overhead_s
        c[20] = costs.step_overhead_s
        c[21] = host.num_layers * costs.per_layer_overhead_s
        c[22], c[23], c[24] = draft
        self._c = c
        self._sizes = np.asarray(host._sizes, dtype=np.int64)
        self._flags = np.array(
            [
                costs.cuda_graph_counts_sequences,
                costs.cuda_graph_padding,
                costs.cuda_graph_mixed_steps,
                costs.cuda_graph_max_tokens,
                costs.verify_batch_expansion,
                ATTENTION_KERNELS if measured_attention else ATTENTION_ROOFLINE,
                bool(cost_model._window),
                cost_model._prefill_s_per_pair != cost_model._attention_s_per_pair,
                cost_model.cpu_overlap,
                draft_form,
                kernels.num_layers if measured_attention and kernels is not None else 0,
            ],
            dtype=np.int64,
        )
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
        args = (
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
            self._levels,
            self._nets,
            self._sizes,
            self._flags,
            self._c,
            self._table_keys,
            self._table_values,
            self._table_used,
            self._linear_grid,
            self._allreduce_grid,
            self._first_grid,
            self._later_grid,
            out,
            missing,
        )
        num_missing = self._evaluate(*args)
        if num_missing:
            self._price(missing[:, :num_missing])
            num_missing = self._evaluate(*args)
            assert num_missing == 0
        parts = {key: out[i] for i, key in enumerate(ROWS[:-1])}
        return out[-1], parts

    def _price(self, keys: FloatArray) -> None:
        """Price new keys (padded tokens, logit rows, graphed; or a draft forward's tokens,
        logit rows and network) with the Python cost model's own terms: those within a grid
        fill their chunk of its rows, the others are stored in the table."""
        keys = np.unique(keys, axis=1)
        whole = keys[0] == np.floor(keys[0])
        step = keys[2] < FIRST_NET
        grid = self._linear_grid
        inside = step & whole & (keys[0] < grid.shape[0]) & (keys[1] < grid.shape[1])
        for chunk in np.unique(keys[0, inside].astype(np.int64) // ROWS_PER_FILL).tolist():
            self._fill(grid, chunk, lambda n, c: self._leaves(n, c, np.zeros(len(n), bool))[0])
        first_grid = self._first_grid
        first = (keys[2] == FIRST_NET) & whole
        first &= (keys[0] < first_grid.shape[0]) & (keys[1] < first_grid.shape[1])
        for chunk in np.unique(keys[0, first].astype(np.int64) // ROWS_PER_FILL).tolist():
            self._fill(first_grid, chunk, lambda n, c: _network_linear(self._networks[0], n, c))
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
            self._new_table(4 * len(self._table_used))
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

    @staticmethod
    def _fill(
        grid: FloatArray, chunk: int, price: Callable[[FloatArray, FloatArray], FloatArray]
    ) -> None:
        """Price rows ``[chunk·ROWS_PER_FILL, (chunk+1)·ROWS_PER_FILL)`` of ``grid`` (row: the
        first argument, column: the second), in one contiguous call as the Python model prices
        a block, so each value is the one it gives."""
        start = chunk * ROWS_PER_FILL
        stop = min(start + ROWS_PER_FILL, grid.shape[0])
        columns = grid.shape[1]
        rows = np.repeat(np.arange(start, stop, dtype=np.float64), columns)
        cols = np.tile(np.arange(columns, dtype=np.float64), stop - start)
        grid[start:stop] = price(rows, cols).reshape(stop - start, columns)

    def _leaves(
        self, n: FloatArray, n_logits: FloatArray, graphed: NDArray[np.bool_]
    ) -> tuple[FloatArray, FloatArray]:
        """The linear layers' and the all-reduce's seconds (the cost model's transcendental
        terms) at padded tokens ``n`` with ``n_logits`` logit rows, as ``breakdown`` prices
        them."""
        model = self.cost_model
        kernels = model._kernels
        if kernels is not None and kernels.prices_linear:
            linear = kernels.linear_s(n, n_logits)
        else:
            linear = model.linear_s(n, n_logits)
        if kernels is not None and kernels.prices_allreduce:
            allreduce = kernels.allreduce_s(n, graphed)
        else:
            allreduce = model.allreduce_s(n)
        return np.asarray(linear, dtype=np.float64), np.asarray(allreduce, dtype=np.float64)

    def _grids(self, max_tokens: int, max_logits: int) -> tuple[FloatArray, FloatArray]:
        """The linear term at every whole (tokens, logit rows) up to the bounds (NaN until a
        step needs its chunk of rows), and the all-reduce at every whole token count out of
        and in a CUDA graph."""
        if max_tokens <= 0 or max_logits <= 0:
            return np.zeros((0, 0)), np.zeros((2, 0))
        linear = np.full((max_tokens + 1, max_logits + 1), np.nan)
        tokens = np.arange(max_tokens + 1, dtype=np.float64)
        allreduce = np.empty((2, max_tokens + 1), dtype=np.float64)
        for graphed in (0, 1):
            flags = np.full(len(tokens), bool(graphed))
            allreduce[graphed] = self._leaves(tokens, np.ones_like(tokens), flags)[1]
        return linear, allreduce

    def _network_grids(self, max_new: int, max_seqs: int) -> tuple[FloatArray, FloatArray]:
        """The draft networks' linear terms at every whole (new tokens, sequences) of the
        first forward (NaN until needed, as :meth:`_grids`) and every sequence count of each
        later forward."""
        if not self._networks or max_new <= 0 or max_seqs <= 0:
            return np.zeros((0, 0)), np.zeros((0, 0))
        later = self._networks[1]
        columns = max_seqs + 1
        later_grid = np.empty((len(self._levels), columns), dtype=np.float64)
        for level, nodes in enumerate(self._levels):
            tokens = nodes * np.arange(columns, dtype=np.float64)
            later_grid[level] = _network_linear(later, tokens, tokens)
        return np.full((max_new + 1, columns), np.nan), later_grid

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


def python_durations(
    cost_model: StepCostModel,
    drafter: Drafter,
    speculative: bool,
    shape: StepShape,
    work: DraftWork,
) -> tuple[FloatArray, dict[str, FloatArray]]:
    """Each step's duration and breakdown by the Python cost model: its parts, then the
    drafting time when the steps draft, summed in a fixed order so that every path rounds
    alike."""
    parts = cost_model.breakdown(shape)
    if speculative:
        parts["draft_s"] = np.asarray(drafter.draft_time_s(work), dtype=np.float64)
    total = (
        parts["fixed_s"]
        + parts["linear_s"]
        + parts["attention_s"]
        + parts["allreduce_s"]
        + parts["sampling_s"]
        + parts["draft_s"]
    )
    return total, parts


def _draft_terms(drafter: Drafter) -> tuple[int, tuple[float, float, float], list[Any]]:
    """How ``drafter``'s time is priced: in the evaluator from its CPU terms (the lookup
    strategies, whose ``draft_time_s`` is ``where(seqs > 0, per_step + per_seq·seqs (+
    per_context_token·context), 0)``) or its draft networks' forwards (EAGLE, EAGLE-3, MTP:
    :class:`~sim.drafting.eagle.EagleStrategy`), or by the drafter itself. Also the constant
    terms and, for networks, the two :class:`~sim.drafting.network.NetworkCost`."""
    from sim.drafting.eagle import EagleStrategy
    from sim.drafting.lookahead import LookaheadStrategy
    from sim.drafting.ngram import NgramStrategy

    kind = type(drafter)
    if drafter.name == "none" and kind.__name__ in ("NoDrafter", "NoSpeculation"):
        return DRAFT_NONE, (0.0, 0.0, 0.0), []
    if issubclass(kind, NgramStrategy) and kind.draft_time_s is NgramStrategy.draft_time_s:
        o = drafter.overheads  # type: ignore[attr-defined]
        return DRAFT_CPU, (o.per_step_s, o.cpu_per_seq_s, o.cpu_per_context_token_s), []
    if kind is LookaheadStrategy:
        o = drafter.overheads  # type: ignore[attr-defined]
        return DRAFT_CPU, (o.per_step_s, o.cpu_per_seq_s, 0.0), []
    if kind is EagleStrategy:
        assert isinstance(drafter, EagleStrategy)
        o = drafter.overheads
        fixed_s = o.per_step_s + (1 + len(drafter.level_nodes)) * o.per_forward_s
        return DRAFT_NETWORKS, (fixed_s, 0.0, 0.0), [drafter.first, drafter.later]
    return DRAFT_GIVEN, (0.0, 0.0, 0.0), []


def _network_terms(network: Any) -> list[float]:
    """The constant terms of a draft network's forward (``NetworkCost.forward_s``), in the
    order the evaluator reads them: KV seconds per token, seconds per causal pair, fixed
    seconds, whether it launches eagerly outside CUDA graphs, its launch time, and a spare."""
    launch = network._host.costs.eager_launch_s_per_layer * network.network.num_layers
    return [
        network._kv_s_per_token,
        network._attention_s_per_pair,
        network._fixed_s,
        1.0 if network._eager else 0.0,
        launch,
        0.0,
    ]


def _network_linear(network: Any, n: FloatArray, n_logits: FloatArray) -> FloatArray:
    """A draft network's linear layers and sampling (``NetworkCost.forward_s``'s terms that
    are not arithmetic)."""
    flop_s = network._flop_s_per_token * n + network._flop_s_per_logit * n_logits
    linear = smooth_max(network._weight_s, flop_s, network._p)
    return np.asarray(linear + network._sampling_s_per_logit * n_logits, dtype=np.float64)


def lower(
    cost_model: StepCostModel,
    drafter: Drafter,
    speculative: bool,
    max_tokens: int = 0,
    max_logits: int = 0,
    max_seqs: int = 0,
) -> LoweredCost | None:
    """The compiled evaluator of ``cost_model`` and ``drafter``, or None where it cannot be
    built: without numba, or for a deployment priced by :mod:`sim.parallel_cost` (several
    attention groups or expert parallelism), which keeps the Python path. Steps of up to
    ``max_tokens`` (padded) tokens and ``max_logits`` logit rows read their linear and
    all-reduce terms from a grid priced once, as do draft forwards of up to ``max_tokens`` new
    tokens and ``max_seqs`` sequences; others are priced on first use."""
    if _compiled() is None or cost_model._parallel is not None:
        return None
    return LoweredCost(cost_model, drafter, speculative, max_tokens, max_logits, max_seqs)
