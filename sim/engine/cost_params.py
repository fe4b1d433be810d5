"""The compiled cost evaluator's scalar parameters, read from a scenario's step-cost model.

:func:`step_terms` reads once what :func:`sim.engine.cost_eval.evaluate` needs of a
:class:`~sim.cost_model.StepCostModel` besides its tables: the attention coefficients (the
roofline's or the measured kernels' fits), sampling, the host's per-step, per-sequence, per-token
and per-layer costs, the drafting terms, the CUDA-graph capture sizes and the flags that choose
each form, in the layout the evaluator reads (``c``, ``sizes``, ``flags``). The values are the
model's own attributes, so the evaluator's arithmetic on them is the model's.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from sim.cost_model import StepCostModel
from sim.engine.cost_eval import ATTENTION_KERNELS, ATTENTION_ROOFLINE


def step_terms(
    cost_model: StepCostModel, draft_form: int, draft: tuple[float, float, float]
) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.int64]]:
    """``cost_model``'s scalar terms for the evaluator: ``c`` (31 coefficients: 22-24 the
    drafting's ``draft`` terms, 25-29 the masked kernel of a tree's verify steps, 30 the CPU work
    of each sequence batch expansion adds), the CUDA-graph
    capture sizes, and the flags (``draft_form`` among them), as
    :func:`sim.engine.cost_eval.evaluate` reads them."""
    host = cost_model.host
    costs = cost_model.host_costs
    kernels = cost_model._kernels
    measured_attention = kernels is not None and kernels.prices_attention
    c = np.zeros(31, dtype=np.float64)
    tree = kernels._tree if measured_attention and kernels is not None else None
    if tree is not None:
        # The masked kernel of a tree's verify steps (KernelCosts.attention_s).
        c[25], c[26] = tree.compute.floor_s, tree.compute.per_token_head_s
        c[27] = tree.compute.flops * tree.compute.bf16_dense_flops
        c[28], c[29] = tree.mask_read_s_per_pair, tree.mask_build_s_per_pair
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
    c[30] = costs.expanded_sequence_overhead_s if costs.verify_batch_expansion else 0.0
    sizes = np.asarray(host._sizes, dtype=np.int64)
    flags = np.array(
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
            tree is not None,
        ],
        dtype=np.int64,
    )
    return c, sizes, flags
