"""The compiled loop of :mod:`sim.engine.cost_kernel`: each step's cost from its shape.

:func:`evaluate` repeats :meth:`StepCostModel.breakdown <sim.cost_model.StepCostModel.breakdown>`
(and an EAGLE-family or lookup drafter's ``draft_time_s``) step by step, in the same order of
operations, reading the transcendental terms from grids and an open-addressing table that
:class:`~sim.engine.cost_kernel.LoweredCost` fills with the Python model's own values. The
functions are plain Python; :func:`compiled` compiles them with numba (imported on first use,
the machine code cached on disk), or returns None without numba.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sim.errors import InvariantError

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

#: Rows of the evaluator's output, in this order (``total_s`` last).
ROWS = ("fixed_s", "linear_s", "attention_s", "allreduce_s", "sampling_s", "draft_s", "total_s")

#: How the drafting time is priced: in the evaluator (none; CPU lookup per sequence and context
#: token) or by the drafter in numpy and passed in.
DRAFT_NONE, DRAFT_CPU, DRAFT_GIVEN, DRAFT_NETWORKS = 0, 1, 2, 3

#: Table keys of the draft networks' linear terms: (tokens, logit rows, FIRST_NET or LATER_NET).
FIRST_NET, LATER_NET = 2.0, 3.0

#: Rows of a grid block priced at once when a step first needs one of its entries.
ROWS_PER_FILL = 256
#: Columns of a grid block: a grid is stored block column by block column, ``grid[column //
#: COLUMNS_PER_FILL, row, column % COLUMNS_PER_FILL]``, so that a block's entries share memory
#: pages and a grid takes memory only where it was priced (it starts as zero pages: an entry
#: not priced yet reads 0.0; the rare entry priced to 0.0 is kept in the table instead).
COLUMNS_PER_FILL = 64

#: Terms of one draft network in ``nets`` (``cost_terms._network_terms``), per network.
NET_TERMS = 6

#: Attention forms: the cost model's roofline, or the measured decode and prefill kernels.
ATTENTION_ROOFLINE, ATTENTION_KERNELS = 0, 1


def evaluate(
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
    levels_by_k: IntArray,
    fixed_by_k: FloatArray,
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
    :class:`LoweredCost`'s parameters. ``levels_by_k`` and ``fixed_by_k``: for a chain whose
    length a policy chooses per step, the later forwards and the fixed drafting seconds of a
    chain of k drafts (index k; a step drafts ``ceil(proposed / sequences)``, as
    :class:`~sim.engine.policies.AdaptiveDrafter` costs it); empty otherwise."""
    counts_sequences, padding, mixed, max_tokens = flags[0], flags[1], flags[2], flags[3]
    expansion, attention_form, window_on, prefill_differs = flags[4], flags[5], flags[6], flags[7]
    overlap, draft_form, num_layers, tree_mask = flags[8], flags[9], flags[10], flags[11]
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
        dense = (
            row == n
            and row < linear_grid.shape[1]
            and column < linear_grid.shape[0] * COLUMNS_PER_FILL
        )
        linear = 0.0
        if dense:
            linear = linear_grid[column // COLUMNS_PER_FILL, row, column % COLUMNS_PER_FILL]
        # A grid entry reads 0.0 until it is priced (then a priced 0.0 is in the table).
        slot = -1
        found = dense and linear != 0.0
        if not found:
            slot = _probe(table_keys, table_used, n, n_logits, key[2])
            found = bool(table_used[slot])
        if not found:
            missing[0, num_missing] = n
            missing[1, num_missing] = n_logits
            missing[2, num_missing] = key[2]
            num_missing += 1
        draft = 0.0
        # A step that drafts nothing costs nothing to draft (as below): its forwards unpriced.
        if draft_form == DRAFT_NETWORKS and draft_seqs_i[j] > 0 and draft_proposed_i[j] > 0:
            # EagleStrategy.draft_time_s: a catch-up forward of the first network, then one
            # forward of the later network per tree level (NetworkCost.forward_s each).
            seqs = float(draft_seqs_i[j])
            new = float(draft_new_i[j])
            context = float(draft_context_i[j])
            mean = context / max(seqs, 1.0)
            seconds = 0.0
            later = 0.0
            num_step_missing = 0
            num_levels = len(levels)
            fixed_draft = c[22]
            if len(levels_by_k):
                # AdaptiveDrafter: the strategy of the step's k (none drafts at k = 0).
                k = -(-draft_proposed_i[j] // max(draft_seqs_i[j], 1))
                if k >= len(levels_by_k):
                    raise InvariantError("a step drafts more than the longest chain built")
                if k > 0:
                    num_levels = levels_by_k[k]
                    fixed_draft = fixed_by_k[k]
            for f in range(num_levels + 1):
                if f == 0:
                    which, base = FIRST_NET, 0
                    f_tokens, f_logits, f_kv, f_pairs = new, seqs, context, new * mean
                else:
                    which, base = LATER_NET, NET_TERMS
                    index_f = float(f)
                    f_tokens = levels[f - 1] * seqs
                    f_logits = f_tokens
                    f_kv = context + index_f * seqs
                    if nets[base + 5] != 0.0:
                        # Every node reads its own prefix and path (EagleStrategy).
                        f_kv = levels[f - 1] * f_kv
                    f_pairs = f_tokens * (mean + index_f)
                # The grids hold every whole (new tokens, sequences) of the first forward and
                # every sequence count of each later one; others are in the table.
                f_seqs = int(seqs)
                f_linear = 0.0
                if f == 0:
                    f_row = int(new)
                    in_grid = (
                        f_row < first_grid.shape[1]
                        and f_seqs < first_grid.shape[0] * COLUMNS_PER_FILL
                    )
                    if in_grid:
                        f_block, f_column = f_seqs // COLUMNS_PER_FILL, f_seqs % COLUMNS_PER_FILL
                        f_linear = first_grid[f_block, f_row, f_column]
                    # Not priced yet while it reads 0.0 (a priced 0.0 is in the table).
                    in_grid = in_grid and f_linear != 0.0
                else:
                    in_grid = f_seqs < later_grid.shape[1]
                    if in_grid:
                        f_linear = later_grid[f - 1, f_seqs]
                if not in_grid:
                    f_slot = _probe(table_keys, table_used, f_tokens, f_logits, which)
                    if table_used[f_slot]:
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
            if num_levels:
                seconds = seconds + later
            drafting = seqs > 0 and draft_proposed_i[j] > 0
            draft = (fixed_draft + seconds) * (1.0 if drafting else 0.0)
        if not found:
            continue
        if slot < 0:  # from the grids
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
            if tree_mask and decode_only and n_real > b and b > 0:
                # A tree's verify step: the masked kernel over the t·(c + t) rectangle.
                full = pairs + n_real * (n_real / max(b, 1.0) - 1.0) / 2.0
                masked = c[25] + n_real * c[7] * c[26] + c[9] * full / c[27] + full * c[28]
                attention = num_layers * max(decode, masked) + full * c[29]
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
        if expansion and decode_only and n_real > b:
            # Batch expansion's extra single-token sequences, each prepared and sampled on the CPU.
            variable = variable + c[30] * (n_real - b)
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
    size a power of two): where it is, or the empty slot where it goes. The probe visits each
    slot once at most: a full table without the key raises InvariantError (the table is kept
    at most half full, so that is a bug, and it must not loop for ever)."""
    mask = len(used) - 1
    slot = (int(a) * 31 + int(b) * 7 + int(c)) & mask
    for _ in range(len(used)):
        if not used[slot] or (keys[slot, 0] == a and keys[slot, 1] == b and keys[slot, 2] == c):
            return slot
        slot = (slot + 1) & mask
    raise InvariantError("step-cost table full: a key found no slot (it is kept half empty)")


def store(
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
def compiled() -> tuple[Callable[..., int], Callable[..., None]] | None:
    """The evaluator and the table's store, compiled (cached on disk), or None without
    numba."""
    try:
        import numba
    except ImportError:
        return None
    # The module's functions call the compiled probe: compiled ones in its namespace.
    globals()["_probe"] = numba.njit(cache=True, nogil=True)(_probe)
    evaluator: Any = numba.njit(cache=True, nogil=True)(evaluate)
    storer: Any = numba.njit(cache=True, nogil=True)(store)
    return evaluator, storer
