"""Operator classes priced from measured kernel tables, where the GPU has them.

:class:`sim.cost_model.StepCostModel` prices a step from rooflines with efficiencies fitted on a
dense bf16 model. For the regimes those fits never saw, ``sim/data/kernels/`` holds vLLM 0.19
kernel measurements on the GPU itself (:mod:`sim.kernels`, docs/kernels.md), and this module turns
them into the step's operator classes:

* **all-reduce**: two per layer of ``N·H·2`` bytes, each the measured latency of vLLM's custom
  all-reduce at that size and TP degree, inside a CUDA graph for a graphed step and outside it
  otherwise (Megatron-LM's two all-reduces per layer, Shoeybi et al. arXiv:1909.08053);
* **attention**: per layer the larger of the fitted paged decode kernel
  (``floor + B·n_kv·c + KV bytes/(η·BW)``) and the fitted causal prefill kernel
  (``floor + N·n_h·c + 4·n_h·d_h·pairs/(η·F)``), heads split over the TP ranks; a token tree
  verified with a custom mask (``tree_mask``) takes the masked kernel
  (:class:`sim.kernels.TreeMaskAttention`) in place of the causal one on its verify steps, over
  the tree's whole ``t·(c + t)`` rectangle, plus the step's mask build;
* **dense linear layers** (bf16 or FP8 decoder, bf16 lm_head): the measured GEMM grid where the
  GPU has one (:mod:`sim.gemm_grid`), each layer's tensor-parallel shards priced at their own
  shapes; elsewhere FP8 decoders at the fitted FP8 efficiency (the lm_head stays bf16);
* **MoE experts**: ``L`` fused-MoE layers priced by the fitted grouped-GEMM roofline over the
  expected distinct experts the step's tokens touch (uniform top-k routing), the dense part
  (attention projections, router, lm_head) by the linear roofline.

Each class is used only when its table exists for the GPU (and the TP degree, for all-reduce);
otherwise the cost model keeps its formula, except attention on a GPU of :data:`ATTENTION_FROM`,
which takes the fits of the same die at its own bandwidth. Every function takes arrays, one entry
per step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sim.catalogue import BF16_BYTES, GPU, Model
from sim.cost_model import Efficiency, body_peak_flops, smooth_max
from sim.errors import CatalogueError
from sim.gemm_grid import GRID_DTYPES, LinearCurve, dense_linear_curves
from sim.gemm_grid import gemm_grid as load_gemm_grid
from sim.kernels import (
    AllReduceTable,
    DecodeAttention,
    PrefillAttention,
    TreeMaskAttention,
    allreduce_table,
    allreduce_tp_degrees,
    decode_attention,
    gemm_efficiency,
    has_collectives,
    prefill_attention,
    tree_mask_attention,
)
from sim.moe import grouped_gemm_layer
from sim.moe_kernel import DeepGemmMoeLayer, MoeLayer

FloatArray = NDArray[np.float64]

#: GPUs whose measured attention rows were set aside (tools/kernel_sources.py ``SET_ASIDE``),
#: priced by the attention fits of the GPU with the same die at their own HBM bandwidth (the
#: fits' floors and per-head terms unchanged). The H200 is the H100's GH100 (132 SMs) with HBM3e:
#: where a decode step's floor and per-head terms dominate (up to 511 cached tokens) its own
#: rows take 0.995x the H100's time on the same keys (median of 15,212 keys, 10-90 %
#: 0.956-1.026x; ai-dynamo/aiconfigurator@095f58a51c, vLLM 0.19.0 generation_attention_perf).
ATTENTION_FROM = {"h200": "h100-sxm"}


def _optional(build: Any, *args: Any, **kwargs: Any) -> Any:
    """``build(...)``, or None when the GPU has no such table."""
    try:
        return build(*args, **kwargs)
    except CatalogueError:
        return None


def _carried_attention(
    reference: str, gpu: GPU, kv_dtype: str
) -> tuple[DecodeAttention | None, PrefillAttention | None]:
    """The ``reference`` GPU's decode and prefill attention fits at ``gpu``'s own peaks."""
    decode = _optional(decode_attention, reference, kv_dtype)
    prefill = _optional(prefill_attention, reference, kv_dtype)
    if decode is None or prefill is None:
        return None, None
    return (
        replace(decode, hbm_bandwidth_bytes_per_s=gpu.hbm_bandwidth_bytes_per_s),
        replace(prefill, bf16_dense_flops=gpu.bf16_dense_flops),
    )


@dataclass(frozen=True)
class _Linear:
    """One roofline of linear layers: weight seconds, FLOP seconds per token and per logit row,
    and the fixed time of its GEMM kernels."""

    weight_s: float
    flop_s_per_token: float
    flop_s_per_logit: float
    floor_s: float
    roofline_p: float

    def time_s(self, n: FloatArray, n_logits: FloatArray) -> FloatArray:
        flop_s = self.flop_s_per_token * n + self.flop_s_per_logit * n_logits
        return smooth_max(self.weight_s, flop_s, self.roofline_p) + self.floor_s


def _roofline(
    weight_bytes: float,
    params_per_token: float,
    params_per_logit: float,
    num_gemms: int,
    eff: Efficiency,
    gpu: GPU,
    tp: int,
    peak_flops: float,
) -> _Linear:
    bw = tp * eff.bandwidth * gpu.hbm_bandwidth_bytes_per_s
    flops = tp * eff.flops * peak_flops
    return _Linear(
        weight_s=weight_bytes / bw,
        flop_s_per_token=2.0 * params_per_token / flops,
        flop_s_per_logit=2.0 * params_per_logit / flops,
        floor_s=num_gemms * eff.gemm_floor_s,
        roofline_p=eff.roofline_p,
    )


class KernelCosts:
    """The measured-kernel operator classes of one model on one node (see the module docstring).

    ``bf16``: the GPU's linear-layer efficiency (for the lm_head and bf16 layers); ``gemm_grid``:
    whether the GPU's measured GEMM grid, where it has one, prices dense linear layers;
    ``tree_mask``: the engine verifies token trees with a custom mask (FlashInfer), so a verify
    step's attention is the masked kernel's where the GPU has one.
    """

    def __init__(
        self,
        model: Model,
        gpu: GPU,
        tp: int,
        bf16: Efficiency,
        *,
        gemm_grid: bool = True,
        moe_kernel: str = "triton",
        tree_mask: bool = False,
    ) -> None:
        spec = model.spec
        self.num_layers = spec.num_layers
        self.num_moe_layers = model.num_moe_layers
        self.hidden_size = spec.hidden_size
        # All-reduce: the custom all-reduce's tables in and out of CUDA graphs.
        self._graph_ar: AllReduceTable | None = None
        self._eager_ar: AllReduceTable | None = None
        if tp > 1 and has_collectives(gpu.name) and tp in allreduce_tp_degrees(gpu.name):
            self._graph_ar = allreduce_table(gpu.name, tp, "graph")
            self._eager_ar = allreduce_table(gpu.name, tp, "eager")
        # Attention: heads per rank (KV heads are replicated when TP exceeds them).
        self._kv_heads = max(1, spec.num_kv_heads // tp)
        self._heads = max(1, spec.num_heads // tp)
        self._head_dim = spec.head_dim
        kv_dtype = model.kv_cache_precision
        self._decode: DecodeAttention | None = None
        self._prefill: PrefillAttention | None = None
        # The measured kernels are FlashAttention's on full-context GQA layers; MLA,
        # sliding-window and linear-attention models keep the formula (sim/architecture.py).
        gqa_only = spec.attention == "gqa" and not spec.num_linear_attention_layers
        if gqa_only and spec.sliding_window is None:
            self._decode = _optional(decode_attention, gpu.name, kv_dtype)
            self._prefill = _optional(prefill_attention, gpu.name, kv_dtype)
            same_die = ATTENTION_FROM.get(gpu.name)
            if same_die is not None and self._decode is None and self._prefill is None:
                self._decode, self._prefill = _carried_attention(same_die, gpu, kv_dtype)
        self._tree: TreeMaskAttention | None = None
        if tree_mask and self._decode is not None and self._prefill is not None:
            self._tree = _optional(tree_mask_attention, gpu.name, kv_dtype)
        # Linear layers: FP8 decoder GEMMs and MoE experts from their own fits.
        head = float(spec.vocab_size * spec.hidden_size)
        moe = spec.num_experts > 1
        dtype = model.weight_precision
        # Experts: the fused-MoE fit of the weights' datatype, or the engine's DeepGEMM path
        # (sim/moe.py).
        self._moe: MoeLayer | DeepGemmMoeLayer | None = (
            grouped_gemm_layer(model, gpu, tp, kernel=moe_kernel) if moe else None
        )
        body_eff = bf16 if dtype == "bf16" else _optional(gemm_efficiency, gpu.name, dtype)
        if body_eff is None and self._moe is not None:
            # No GEMM fit for this format here: the shipped dense fit at the format's own peak.
            body_eff = bf16
        self._linear: tuple[_Linear, ...] | None = None
        # Dense models on a GPU with a measured GEMM grid: every shard at its own shape.
        self._grid: tuple[LinearCurve, LinearCurve] | None = None
        use_grid = gemm_grid and not moe
        body_grid = load_gemm_grid(gpu.name, GRID_DTYPES.get(dtype, "")) if use_grid else None
        head_grid = load_gemm_grid(gpu.name, "bf16") if body_grid is not None else None
        if body_grid is not None and head_grid is not None:
            self._grid = dense_linear_curves(model, tp, body_grid, head_grid)
        elif body_eff is not None and (self._moe is not None or dtype != "bf16"):
            body = float(model.dense_linear_params) - head
            peak = body_peak_flops(model, gpu)
            # The GEMM kernels outside the experts (sim/architecture.py: 4 per dense layer).
            self._linear = (
                _roofline(
                    body * model.weight_bytes_per_param,
                    body,
                    0.0,
                    model.dense_gemm_kernels,
                    body_eff,
                    gpu,
                    tp,
                    peak,
                ),
                _roofline(head * BF16_BYTES, 0.0, head, 1, bf16, gpu, tp, gpu.bf16_dense_flops),
            )

    # --- which classes are measured -----------------------------------------------------------
    @property
    def prices_allreduce(self) -> bool:
        """Whether all-reduce comes from the measured tables."""
        return self._graph_ar is not None

    @property
    def prices_attention(self) -> bool:
        """Whether attention comes from the measured decode and prefill kernels."""
        return self._decode is not None and self._prefill is not None

    @property
    def prices_tree_mask(self) -> bool:
        """Whether a tree's verify steps take the masked kernel (:class:`TreeMaskAttention`)."""
        return self._tree is not None

    @property
    def prices_linear(self) -> bool:
        """Whether the linear layers come from the measured GEMM grid or the FP8 or MoE fits."""
        return self._grid is not None or self._linear is not None

    # --- operator classes ---------------------------------------------------------------------
    def allreduce_s(self, num_tokens: ArrayLike, graphed: ArrayLike) -> FloatArray:
        """Two all-reduces per layer of ``N·H`` bf16 activations, in or out of a CUDA graph."""
        assert self._graph_ar is not None and self._eager_ar is not None
        message = np.asarray(num_tokens, dtype=np.float64) * self.hidden_size * BF16_BYTES
        inside, outside = self._graph_ar(message), self._eager_ar(message)
        one = np.where(np.asarray(graphed, dtype=bool), inside, outside)
        return 2.0 * self.num_layers * one

    def attention_s(
        self,
        num_seqs: ArrayLike,
        num_tokens: ArrayLike,
        kv_read_tokens: ArrayLike,
        attention_pairs: ArrayLike,
        decode_only: ArrayLike = False,
    ) -> FloatArray:
        """Every layer's attention: the decode kernel's or the prefill kernel's time, whichever
        the step's shape makes larger. With ``tree_mask``, a ``decode_only`` step of more tokens
        than sequences (a tree's verify step) takes the masked kernel in place of the causal
        one, and the step builds its mask."""
        assert self._decode is not None and self._prefill is not None
        decode = self._decode.layer_s(num_seqs, kv_read_tokens, self._kv_heads, self._head_dim)
        prefill = self._prefill.layer_s(num_tokens, attention_pairs, self._heads, self._head_dim)
        causal = self.num_layers * np.maximum(decode, prefill)
        if self._tree is None:
            return causal
        b = np.asarray(num_seqs, dtype=np.float64)
        n = np.asarray(num_tokens, dtype=np.float64)
        # A verify step: every sequence brings t = N/B tree tokens (a tree run proposes one
        # shape). The rectangle adds the pairs a causal count leaves out, Σ t(t−1)/2 = N(t−1)/2.
        tree_step = np.asarray(decode_only, dtype=bool) & (n > b) & (b > 0)
        full = (
            np.asarray(attention_pairs, dtype=np.float64) + n * (n / np.maximum(b, 1.0) - 1.0) / 2.0
        )
        masked = self._tree.layer_s(n, full, self._heads, self._head_dim)
        tree = (
            self.num_layers * np.maximum(decode, masked) + full * self._tree.mask_build_s_per_pair
        )
        return np.asarray(np.where(tree_step, tree, causal), dtype=np.float64)

    def linear_s(self, num_tokens: ArrayLike, num_logit_tokens: ArrayLike) -> FloatArray:
        """Decoder GEMMs at their precision's efficiency, the bf16 lm_head, and the experts."""
        n = np.asarray(num_tokens, dtype=np.float64)
        n_logits = np.asarray(num_logit_tokens, dtype=np.float64)
        if self._grid is not None:
            decoder, lm_head = self._grid
            return np.asarray(decoder(n) + lm_head(n_logits), dtype=np.float64)
        assert self._linear is not None
        body, head = self._linear
        out = body.time_s(n, np.zeros_like(n)) + head.time_s(np.zeros_like(n), n_logits)
        if self._moe is not None:
            out = out + self.num_moe_layers * self._moe.time_s(n)
        return np.asarray(out, dtype=np.float64)
