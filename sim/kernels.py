"""Measured kernel tables of vLLM on one GPU: all-reduce, fused MoE, FP8 GEMM and attention.

``sim/data/kernels/<gpu>.yaml`` holds, per GPU, what was measured for it (never carried over from
another GPU): all-reduce latency tables by TP degree and message size for three paths, and fitted
parameters of the fused-MoE, FP8 GEMM and attention kernels, each with its source rows, method, 95 %
interval and agreement (``docs/kernels.md``; written by ``tools/fit_kernels.py``). This module
validates the files and evaluates them with numpy on arrays, one entry per step (the fused-MoE
kernel in :mod:`sim.moe_kernel`).

Units: seconds, bytes, tokens. Every time is for ONE call on ONE GPU (a layer's MoE or attention on
that GPU's share of heads and experts; one all-reduce of ``message_bytes`` per GPU).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sim.catalogue import get_gpu
from sim.cost_model import Efficiency
from sim.errors import CatalogueError
from sim.kernel_schema import (
    AllReduceMode,
    CollectiveEntry,
    DecodeEntry,
    GemmEntry,
    KernelFile,
    PrefillEntry,
    parse_kernel_file,
)

FloatArray = NDArray[np.float64]
KERNEL_DIR = "data/kernels"
#: Bytes of one weight element by MoE/GEMM dtype (block-scale factors are under 0.01 % and omitted).
WEIGHT_BYTES = {"bf16": 2, "fp8": 1, "fp8_block": 1}
KV_BYTES = {"bf16": 2, "fp8": 1}


@cache
def _file(gpu: str) -> KernelFile | None:
    # Parsed once per process: package data does not change while running.
    path = resources.files("sim").joinpath(f"{KERNEL_DIR}/{gpu}.yaml")
    if not path.is_file():
        return None
    parsed = parse_kernel_file(path.read_text(encoding="utf-8"), f"sim/{KERNEL_DIR}/{gpu}.yaml")
    if parsed.gpu != gpu:
        raise CatalogueError(f"sim/{KERNEL_DIR}/{gpu}.yaml: gpu: names {parsed.gpu!r}")
    return parsed


def kernel_gpu_names() -> list[str]:
    """The catalogue GPUs that have a kernel file."""
    root = resources.files("sim").joinpath(KERNEL_DIR)
    return sorted(p.name.removesuffix(".yaml") for p in root.iterdir() if p.name.endswith(".yaml"))


def _need(gpu: str, section: str, key: str) -> Any:
    parsed = _file(gpu)
    entries = getattr(parsed, section, None) or {}
    if key not in entries:
        have = ", ".join(map(str, entries)) or "none"
        reason = parsed.not_measured.get(section, "") if parsed else "no kernel file"
        raise CatalogueError(
            f"no measured {section} {key!r} for GPU {gpu!r} in sim/{KERNEL_DIR}/ (have: {have})"
            + (f"; {reason}" if reason else "")
        )
    return entries[key]


# --- all-reduce -------------------------------------------------------------------------------
@dataclass(frozen=True)
class AllReduceTable:
    """Latency of one all-reduce against message size, interpolated log-log between measured sizes.

    Between sizes ``b_i < b < b_{i+1}``: ``t_i·(t_{i+1}/t_i)^w`` with ``w`` the position of
    ``log b`` between ``log b_i`` and ``log b_{i+1}``. Below the smallest size: the smallest
    latency. From the largest on: the last latency plus the extra bytes at the last segment's
    bandwidth.
    Non-decreasing in bytes and exact at the table's points.
    """

    tp: int
    message_bytes: FloatArray
    latency_s: FloatArray
    _log_bytes: FloatArray = field(init=False, repr=False)
    _ratio: FloatArray = field(init=False, repr=False)
    _tail_s_per_byte: float = field(init=False, repr=False)
    _bytes_list: list[float] = field(init=False, repr=False)
    _latency_list: list[float] = field(init=False, repr=False)
    _log_list: list[float] = field(init=False, repr=False)
    _ratio_list: list[float] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        b, t = self.message_bytes, self.latency_s
        object.__setattr__(self, "_log_bytes", np.log(b))
        object.__setattr__(self, "_ratio", t[1:] / t[:-1])
        # Python copies for the scalar path: the same numbers, without numpy's per-call overhead.
        for name, values in (
            ("_bytes_list", b),
            ("_latency_list", t),
            ("_log_list", np.log(b)),
            ("_ratio_list", t[1:] / t[:-1]),
        ):
            object.__setattr__(self, name, [float(v) for v in values])
        object.__setattr__(self, "_tail_s_per_byte", float((t[-1] - t[-2]) / (b[-1] - b[-2])))

    def __call__(self, message_bytes: ArrayLike) -> FloatArray:
        """Seconds per all-reduce of ``message_bytes`` per GPU. Raise ValueError if negative."""
        if isinstance(message_bytes, int | float):
            return np.asarray(self.at(float(message_bytes)))
        b = np.asarray(message_bytes, dtype=np.float64)
        if np.any(b < 0):
            raise ValueError("message_bytes must be >= 0")
        table_b, table_t, log_b = self.message_bytes, self.latency_s, self._log_bytes
        i = np.clip(np.searchsorted(table_b, b, side="right") - 1, 0, table_b.size - 2)
        x = np.log(np.maximum(b, table_b[0]))
        w = np.clip((x - log_b[i]) / (log_b[i + 1] - log_b[i]), 0.0, 1.0)
        # The minimum keeps rounding in the power from stepping past the segment's upper end.
        inside = np.minimum(table_t[i] * self._ratio[i] ** w, table_t[i + 1])
        beyond = table_t[-1] + (b - table_b[-1]) * self._tail_s_per_byte
        return np.where(b >= table_b[-1], beyond, inside)

    def at(self, message_bytes: float) -> float:
        """:meth:`__call__` for one size, in plain Python (a step's single all-reduce size)."""
        if message_bytes < 0:
            raise ValueError("message_bytes must be >= 0")
        table_b, table_t = self._bytes_list, self._latency_list
        if message_bytes >= table_b[-1]:
            return table_t[-1] + (message_bytes - table_b[-1]) * self._tail_s_per_byte
        i = min(max(bisect.bisect_right(table_b, message_bytes) - 1, 0), len(table_b) - 2)
        x = math.log(max(message_bytes, table_b[0]))
        w = min(
            max((x - self._log_list[i]) / (self._log_list[i + 1] - self._log_list[i]), 0.0), 1.0
        )
        return min(table_t[i] * self._ratio_list[i] ** w, table_t[i + 1])


@cache
def allreduce_table(gpu: str, tp: int, mode: AllReduceMode = "graph") -> AllReduceTable:
    """The measured table of ``mode`` at ``tp`` GPUs on ``gpu`` (hold it to price many steps).

    Raise CatalogueError naming the measured degrees if ``tp`` has none, or if ``gpu`` has none.
    """
    entry: CollectiveEntry = _need(gpu, "allreduce", mode)
    if tp not in entry.tp:
        raise CatalogueError(
            f"no {mode} all-reduce table for TP {tp} on GPU {gpu!r}; measured TP degrees: "
            f"{', '.join(map(str, sorted(entry.tp)))}"
        )
    table = entry.tp[tp]
    return AllReduceTable(tp, np.asarray(table.message_bytes), np.asarray(table.latency_s))


def has_collectives(gpu: str) -> bool:
    """True if ``gpu`` has measured all-reduce tables (else the cost model keeps its formula)."""
    f = _file(gpu)
    return f is not None and bool(f.allreduce)


def allreduce_tp_degrees(gpu: str, mode: AllReduceMode = "graph") -> tuple[int, ...]:
    """The TP degrees measured for ``mode`` on ``gpu``. Raise CatalogueError if none."""
    return tuple(sorted(_need(gpu, "allreduce", mode).tp))


def allreduce_s(
    gpu: str, tp: int, message_bytes: ArrayLike, mode: AllReduceMode = "graph"
) -> FloatArray:
    """Seconds of one all-reduce of ``message_bytes`` (per GPU) among ``tp`` GPUs.

    ``mode``: ``graph`` (vLLM's custom all-reduce captured in a CUDA graph), ``eager`` (the same
    outside a graph) or ``nccl`` (nccl-tests all_reduce). Raise CatalogueError naming the measured
    degrees if ``tp`` has no table (e.g. 3 or 16), or if ``gpu`` has none; ValueError if a size < 0.
    """
    return allreduce_table(gpu, tp, mode)(message_bytes)


# --- GEMM -------------------------------------------------------------------------------------
def gemm_efficiency(gpu: str, dtype: str) -> Efficiency:
    """Linear-layer :class:`Efficiency` of ``dtype`` on ``gpu``; flops are against the fp8 peak.

    ``bf16`` returns the shipped ``sim/data/hardware_efficiency.yaml`` entry (checked, not refitted,
    in ``docs/kernels.md``). Raise CatalogueError if ``dtype`` was not measured on ``gpu``.
    """
    if dtype == "bf16":
        from sim.efficiency import load_efficiency

        return load_efficiency(gpu)
    e: GemmEntry = _need(gpu, "gemm", dtype)
    return Efficiency(e.bandwidth, e.flops, e.roofline_p, e.gemm_floor_s)


# --- attention --------------------------------------------------------------------------------
@dataclass(frozen=True)
class DecodeAttention:
    """Paged decode attention (one query per sequence), one layer on one GPU.

    ``floor_s + num_seqs·n_kv·per_seq_kv_head_s + KV bytes / (bandwidth·BW)``.
    """

    bandwidth: float
    per_seq_kv_head_s: float
    floor_s: float
    kv_bytes_per_element: int
    hbm_bandwidth_bytes_per_s: float

    def layer_s(
        self, num_seqs: ArrayLike, kv_read_tokens: ArrayLike, num_kv_heads: int, head_dim: int
    ) -> FloatArray:
        """Seconds for ``num_seqs`` sequences reading ``kv_read_tokens`` cached tokens in all."""
        b = np.asarray(num_seqs, dtype=np.float64)
        kv = np.asarray(kv_read_tokens, dtype=np.float64)
        kv_bytes = kv * 2.0 * num_kv_heads * head_dim * self.kv_bytes_per_element
        return (
            self.floor_s
            + b * num_kv_heads * self.per_seq_kv_head_s
            + kv_bytes / (self.bandwidth * self.hbm_bandwidth_bytes_per_s)
        )


@dataclass(frozen=True)
class PrefillAttention:
    """Causal prefill attention, one layer on one GPU.

    ``floor_s + tokens·n_h·per_token_head_s + 4·n_h·d_h·pairs / (flops·F)``.
    """

    flops: float
    per_token_head_s: float
    floor_s: float
    bf16_dense_flops: float

    def layer_s(
        self, num_tokens: ArrayLike, attention_pairs: ArrayLike, num_heads: int, head_dim: int
    ) -> FloatArray:
        """Seconds for ``num_tokens`` new tokens attending over ``attention_pairs`` pairs."""
        n = np.asarray(num_tokens, dtype=np.float64)
        pairs = np.asarray(attention_pairs, dtype=np.float64)
        return (
            self.floor_s
            + n * num_heads * self.per_token_head_s
            + 4.0 * num_heads * head_dim * pairs / (self.flops * self.bf16_dense_flops)
        )


#: Share of the dense bf16 peak that FlashAttention-2-class kernels reach on an H100: "only 35%
#: utilization" (Shah et al. 2024, FlashAttention-3, arXiv:2407.08608, abstract). FlashInfer runs
#: a custom mask on its FA2 template on Hopper: ``is_fa3_backend_supported`` returns False for
#: ``use_custom_mask`` (flashinfer-ai/flashinfer ``flashinfer/utils.py``).
FA2_FLOPS_UTILIZATION_H100 = 0.35
#: The catalogue GPUs that figure is for (the paper's H100 SXM5).
FA2_UTILIZATION_GPUS = ("h100-sxm",)
#: Bytes a step moves per (query, key) pair to build a tree's mask before the forward: SGLang
#: fills a bool per pair (``torch.full`` in ``build_tree_kernel_efficient``,
#: python/sglang/srt/speculative/eagle_utils.py, FULL_MASK: ``seq_lens_sum · t + t² · B``
#: entries), FlashInfer's ``segment_packbits`` reads it and writes one bit per pair.
TREE_MASK_BUILD_BYTES_PER_PAIR = 1.0 + 1.0 + 1.0 / 8.0


@dataclass(frozen=True)
class TreeMaskAttention:
    """Tree verification with a packed custom mask (FlashInfer's batch prefill kernel, FA2
    template), one layer on one GPU.

    ``floor_s + N·n_h·per_token_head_s + 4·n_h·d_h·pairs/(flops·F) + pairs/8 / (bandwidth·BW)``
    with ``pairs`` every (query, key) pair of the tree's rectangle, ``Σ t_i·(c_i + t_i)``: the
    kernel computes each one and reads its mask bit. ``compute`` is the measured causal prefill
    kernel's floor and per-token term (no FA2 kernel was measured) at
    :data:`FA2_FLOPS_UTILIZATION_H100`; ``bandwidth`` the measured decode kernel's.
    """

    compute: PrefillAttention
    bandwidth: float
    hbm_bandwidth_bytes_per_s: float

    def layer_s(
        self, num_tokens: ArrayLike, full_pairs: ArrayLike, num_heads: int, head_dim: int
    ) -> FloatArray:
        """Seconds for ``num_tokens`` tree tokens attending over ``full_pairs`` masked pairs."""
        pairs = np.asarray(full_pairs, dtype=np.float64)
        computed = self.compute.layer_s(num_tokens, pairs, num_heads, head_dim)
        return np.asarray(computed + pairs * self.mask_read_s_per_pair, dtype=np.float64)

    @property
    def mask_read_s_per_pair(self) -> float:
        """Seconds per pair to read the packed mask (one bit) in one layer."""
        return 1.0 / 8.0 / (self.bandwidth * self.hbm_bandwidth_bytes_per_s)

    @property
    def mask_build_s_per_pair(self) -> float:
        """Seconds per pair to build and pack the mask once per step
        (:data:`TREE_MASK_BUILD_BYTES_PER_PAIR`)."""
        return TREE_MASK_BUILD_BYTES_PER_PAIR / (self.bandwidth * self.hbm_bandwidth_bytes_per_s)


def tree_mask_attention(gpu: str, kv_dtype: str = "bf16") -> TreeMaskAttention:
    """Tree verification attention with a custom mask on ``gpu`` (:class:`TreeMaskAttention`).

    Raise CatalogueError if the GPU's causal prefill or decode kernel was not measured, or if it
    is not an H100 (the FA2 utilization is the H100's).
    """
    if gpu not in FA2_UTILIZATION_GPUS:
        raise CatalogueError(
            f"no FA2 utilization for GPU {gpu!r}: the published figure is the H100's"
        )
    pre: PrefillEntry = _need(gpu, "prefill_attention", kv_dtype)
    dec: DecodeEntry = _need(gpu, "decode_attention", kv_dtype)
    spec = get_gpu(gpu)
    compute = PrefillAttention(
        FA2_FLOPS_UTILIZATION_H100, pre.per_token_head_s, pre.floor_s, spec.bf16_dense_flops
    )
    return TreeMaskAttention(compute, dec.bandwidth, spec.hbm_bandwidth_bytes_per_s)


def decode_attention(gpu: str, kv_dtype: str = "bf16") -> DecodeAttention:
    """Fitted decode attention of ``kv_dtype`` (bf16, fp8) KV cache on ``gpu``.

    Raise CatalogueError if it was not measured on that GPU.
    """
    e: DecodeEntry = _need(gpu, "decode_attention", kv_dtype)
    bw = get_gpu(gpu).hbm_bandwidth_bytes_per_s
    return DecodeAttention(e.bandwidth, e.per_seq_kv_head_s, e.floor_s, KV_BYTES[kv_dtype], bw)


def prefill_attention(gpu: str, kv_dtype: str = "bf16") -> PrefillAttention:
    """Fitted causal prefill attention (bf16 compute; ``kv_dtype`` of the cache) on ``gpu``.

    Raise CatalogueError if it was not measured on that GPU.
    """
    e: PrefillEntry = _need(gpu, "prefill_attention", kv_dtype)
    return PrefillAttention(e.flops, e.per_token_head_s, e.floor_s, get_gpu(gpu).bf16_dense_flops)
