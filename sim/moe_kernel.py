"""The measured fused-MoE kernel of vLLM (``fused_experts``) on one GPU: its fitted roofline
(:class:`MoeEfficiency`), the experts a step's tokens touch, and one MoE layer's time on that
GPU's share of the experts (:class:`MoeLayer`).

The fits are in ``sim/data/kernels/<gpu>.yaml`` (:mod:`sim.kernels` reads them;
``docs/kernels.md``). Units: seconds, bytes, tokens; every time is for ONE call on ONE GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sim.catalogue import get_gpu
from sim.cost_model import smooth_max
from sim.errors import CatalogueError
from sim.kernel_schema import (
    MoeEntry,
)
from sim.kernels import WEIGHT_BYTES, _need
from sim.package_data import packaged_yaml

FloatArray = NDArray[np.float64]


# --- fused MoE --------------------------------------------------------------------------------
@dataclass(frozen=True)
class MoeEfficiency:
    """Fused-MoE roofline: fractions of peak bandwidth and tensor throughput, p and a floor."""

    bandwidth: float
    flops: float
    roofline_p: float
    floor_s: float


def moe_efficiency(gpu: str, dtype: str) -> MoeEfficiency:
    """The fitted fused-MoE efficiency of ``dtype`` (bf16, fp8, fp8_block) on ``gpu``.

    Raise CatalogueError if it was not measured on that GPU.
    """
    e: MoeEntry = _need(gpu, "moe", dtype)
    return MoeEfficiency(e.bandwidth, e.flops, e.roofline_p, e.floor_s)


def experts_touched(
    num_tokens: ArrayLike, num_experts: int, topk: int, routing: str = "uniform"
) -> FloatArray:
    """Distinct experts read by ``num_tokens`` tokens routed top-``topk`` of ``num_experts``.

    ``uniform``: independent uniform routing, ``E·(1 − (1 − k/E)^T)`` (as
    ``Model.expected_experts_touched``); ``spread``: the benchmark's balanced routing, which
    spreads the slots over ``min(E, T·k)`` experts. Raise ValueError for another routing.
    """
    t = np.asarray(num_tokens, dtype=np.float64)
    if routing == "uniform":
        return num_experts * (1.0 - (1.0 - topk / num_experts) ** t)
    if routing == "spread":
        return np.minimum(float(num_experts), t * topk)
    raise ValueError(f"routing must be 'uniform' or 'spread', got {routing!r}")


@dataclass(frozen=True)
class MoeLayer:
    """One MoE layer's expert computation (vLLM ``fused_experts``) on one GPU, ready to price.

    ``floor + smooth_max(bytes/(η_bw·BW), 2·S·3·H·I/tp/(η_fl·F), p)`` with ``S = T·k/ep`` local
    (token, expert) slots and bytes = the local distinct experts' weights ``D·3·H·I/tp·w``
    (``D`` = :func:`experts_touched` / ``ep``) plus :func:`moe_activation_bytes`. The per-token
    coefficients are computed once (:func:`moe_layer`); :meth:`time_s` is a few array operations.
    """

    efficiency: MoeEfficiency
    num_experts: int
    topk: int
    routing: str
    weight_s_per_expert: float
    activation_s_per_token: float
    flop_s_per_token: float

    def time_s(self, num_tokens: ArrayLike) -> FloatArray:
        """Seconds for ``num_tokens`` tokens (array or scalar) entering the layer."""
        t = np.asarray(num_tokens, dtype=np.float64)
        touched = experts_touched(t, self.num_experts, self.topk, self.routing)
        bw_s = self.weight_s_per_expert * touched + self.activation_s_per_token * t
        fl_s = self.flop_s_per_token * t
        return self.efficiency.floor_s + smooth_max(bw_s, fl_s, self.efficiency.roofline_p)


def moe_layer(
    gpu: str,
    dtype: str,
    *,
    hidden_size: int,
    inter_size: int,
    num_experts: int,
    topk: int,
    tp: int = 1,
    ep: int = 1,
    routing: str = "uniform",
    efficiency: MoeEfficiency | None = None,
) -> MoeLayer:
    """The :class:`MoeLayer` of a model's MoE shape split ``tp`` × ``ep`` ways on ``gpu``.

    ``efficiency`` replaces the GPU's own fit (sim/moe.py carries a measured fit to GPUs without
    one).

    Raise CatalogueError if ``dtype`` was not measured on ``gpu``; ValueError for an unknown
    routing or a split below 1.
    """
    if tp < 1 or ep < 1:
        raise ValueError(f"tp and ep must be >= 1, got tp={tp}, ep={ep}")
    experts_touched(1.0, num_experts, topk, routing)  # validates the routing name
    eff = moe_efficiency(gpu, dtype) if efficiency is None else efficiency
    spec = get_gpu(gpu)
    peak = spec.bf16_dense_flops if dtype == "bf16" else spec.fp8_dense_flops
    if peak is None:
        raise CatalogueError(f"GPU {gpu!r} has no fp8 throughput in the catalogue")
    bw = eff.bandwidth * spec.hbm_bandwidth_bytes_per_s
    inter_local = inter_size / tp
    return MoeLayer(
        efficiency=eff,
        num_experts=num_experts,
        topk=topk,
        routing=routing,
        weight_s_per_expert=3.0 * hidden_size * inter_local * WEIGHT_BYTES[dtype] / ep / bw,
        activation_s_per_token=float(
            moe_activation_bytes(topk, topk / ep, hidden_size, inter_local) / bw
        ),
        flop_s_per_token=2.0 * topk / ep * 3.0 * hidden_size * inter_local / (eff.flops * peak),
    )


def moe_layer_s(
    gpu: str,
    dtype: str,
    num_tokens: ArrayLike,
    *,
    hidden_size: int,
    inter_size: int,
    num_experts: int,
    topk: int,
    tp: int = 1,
    ep: int = 1,
    routing: str = "uniform",
) -> FloatArray:
    """Seconds of one MoE layer for ``num_tokens`` tokens: :func:`moe_layer` then ``time_s``.

    Hold the :class:`MoeLayer` instead when pricing many steps. Raise as :func:`moe_layer`.
    """
    layer = moe_layer(
        gpu,
        dtype,
        hidden_size=hidden_size,
        inter_size=inter_size,
        num_experts=num_experts,
        topk=topk,
        tp=tp,
        ep=ep,
        routing=routing,
    )
    return layer.time_s(num_tokens)


def moe_activation_bytes(
    slots_global: ArrayLike, slots_local: ArrayLike, hidden_size: int, inter_local: float
) -> FloatArray:
    """bf16 activation bytes moved by fused_experts besides the weights.

    Over every routed slot (T·k, local or not): the gate/up activation pass reads 2·I and writes I
    elements and the final sum reads H; over the local slots: GEMM 1 reads H and writes 2·I,
    GEMM 2 reads I and writes H. Two bytes per element.
    """
    g = np.asarray(slots_global, dtype=np.float64)
    loc = np.asarray(slots_local, dtype=np.float64)
    return 2.0 * (
        g * (3.0 * inter_local + hidden_size) + loc * (2.0 * hidden_size + 3.0 * inter_local)
    )


# --- DeepGEMM contiguous grouped GEMM ---------------------------------------------------------
#: The packaged description of the DeepGEMM kernel and the engine versions that run it.
MOE_KERNELS_FILE = "data/moe_kernels.yaml"


def moe_kernels_document() -> dict[str, Any]:
    """``sim/data/moe_kernels.yaml`` as a mapping. Raise CatalogueError if it is malformed."""
    return packaged_yaml(MOE_KERNELS_FILE, section="deepgemm", error=CatalogueError)


def deepgemm_flops_fraction() -> float:
    """DeepGEMM's published contiguous-layout throughput as a fraction of the FP8 peak.

    A MoE layer's gate-up GEMM does 2/3 of its FLOPs and the down GEMM 1/3, so the layer runs at
    the harmonic mean ``1 / (2/(3·F_gate_up) + 1/(3·F_down))`` of the README's two shapes (each
    the mean of its rows), over the H800's FP8 dense peak.
    """
    d = moe_kernels_document()["deepgemm"]
    gate_up = float(np.mean(d["gate_up_tflops"])) * 1e12
    down = float(np.mean(d["down_tflops"])) * 1e12
    layer = 1.0 / (2.0 / (3.0 * gate_up) + 1.0 / (3.0 * down))
    return layer / float(d["reference_peak_fp8_flops"])


def deepgemm_padded_rows(num_tokens: ArrayLike, topk: int, local_experts: int) -> FloatArray:
    """Rows both grouped GEMMs compute for ``num_tokens`` tokens: vLLM's worst-case layout
    ``round_up(T·k + E_local·(BLOCK_M − 1), BLOCK_M)`` (``compute_aligned_M``), every row of which
    DeepGEMM multiplies (the unused tail is given to expert 0, not skipped)."""
    block_m = int(moe_kernels_document()["deepgemm"]["block_m"])
    t = np.asarray(num_tokens, dtype=np.float64)
    return np.ceil((t * topk + local_experts * (block_m - 1)) / block_m) * block_m


@dataclass(frozen=True)
class DeepGemmMoeLayer:
    """One MoE layer run by vLLM's DeepGEMM path (``DeepGemmExperts``) on one GPU.

    ``floor + smooth_max(D·w, R·f, p) + R·a`` with ``D`` the local distinct experts read once
    each, ``R`` :func:`deepgemm_padded_rows`, ``f`` seconds of both GEMMs per padded row at
    DeepGEMM's published throughput (:func:`deepgemm_flops_fraction`), ``a`` seconds per padded
    row of the activation and FP8 quantisation between them (``9·I_local`` bytes: gate-up output
    read ``4·I``, activation written ``2·I``, read ``2·I``, quantised written ``I``). Floor,
    bandwidth fraction and ``p`` are the GPU's fused-MoE fit of block FP8.
    """

    efficiency: MoeEfficiency
    num_experts: int
    topk: int
    local_experts: int
    weight_s_per_expert: float
    row_flop_s: float
    row_bytes_s: float

    def time_s(self, num_tokens: ArrayLike) -> FloatArray:
        """Seconds for ``num_tokens`` tokens (array or scalar) entering the layer."""
        t = np.asarray(num_tokens, dtype=np.float64)
        touched = experts_touched(t, self.num_experts, self.topk) * (
            self.local_experts / self.num_experts
        )
        rows = deepgemm_padded_rows(t, self.topk, self.local_experts)
        weights = self.weight_s_per_expert * touched
        compute = smooth_max(weights, self.row_flop_s * rows, self.efficiency.roofline_p)
        return self.efficiency.floor_s + compute + self.row_bytes_s * rows


def deepgemm_layer(
    gpu: str,
    *,
    hidden_size: int,
    inter_size: int,
    num_experts: int,
    topk: int,
    tp: int = 1,
    ep: int = 1,
    efficiency: MoeEfficiency,
) -> DeepGemmMoeLayer:
    """The :class:`DeepGemmMoeLayer` of a block-FP8 MoE shape split ``tp`` × ``ep`` ways on
    ``gpu``; ``efficiency`` is the GPU's block-FP8 fused-MoE fit (floor, bandwidth, p).

    Raise CatalogueError if the GPU has no FP8 throughput; ValueError for a split below 1.
    """
    if tp < 1 or ep < 1:
        raise ValueError(f"tp and ep must be >= 1, got tp={tp}, ep={ep}")
    spec = get_gpu(gpu)
    if spec.fp8_dense_flops is None:
        raise CatalogueError(f"GPU {gpu!r} has no fp8 throughput in the catalogue")
    bw = efficiency.bandwidth * spec.hbm_bandwidth_bytes_per_s
    flops = deepgemm_flops_fraction() * spec.fp8_dense_flops
    inter_local = inter_size / tp
    return DeepGemmMoeLayer(
        efficiency=efficiency,
        num_experts=num_experts,
        topk=topk,
        local_experts=max(1, num_experts // ep),
        weight_s_per_expert=3.0 * hidden_size * inter_local * WEIGHT_BYTES["fp8_block"] / bw,
        row_flop_s=2.0 * 3.0 * hidden_size * inter_local / flops,
        row_bytes_s=9.0 * inter_local / bw,
    )
