"""Operator classes of one step on a deployment split by :class:`sim.parallel.Layout`.

The engine steps the whole deployment's batch of ``N`` tokens at once; this module prices what
ONE GPU does with its share, every rank doing the same (balanced DP groups):

* dense layers (attention projections, dense MLPs, routers, shared experts) and the lm_head:
  the roofline ``smooth_max(bytes/tp/(η·BW), 2·P·(N/dp)/tp/(η·F))`` on the group's ``N/dp``
  tokens (docs/cost-model.md, the linear term);
* MoE layers: a measured fused-MoE fit (:mod:`sim.moe`, ``tp = W/ep`` and ``ep``), else the
  same roofline over the ``D/ep`` local distinct experts,
  ``D = E·(1 − (1 − k/E)^N)`` (every token picks ``k`` of ``E`` experts; an expert is missed by
  all ``N`` tokens with probability ``(1 − k/E)^N`` under uniform routing) and the ``N·k/ep``
  local token slots;
* attention over the group's KV: ``Σn/dp`` cached tokens split over ``min(tp, n_kv)`` ranks
  (an MLA latent is not split), the (query, key) pairs over ``dp·tp``;
* communication: the attention group's all-reduces (one per layer after attention, one per dense
  MLP, and one per MoE layer without EP) on ``N/dp`` tokens, and with EP the dispatch/combine of
  ``N/W·k·(ep−1)/ep`` rows per GPU (fp8 out, bf16 back) over NVLink within a node and the NIC
  across nodes, concurrently, each collective paying the link latency once; without EP but
  with several attention groups, every MoE layer all-gathers the ``N`` tokens' activations
  over the ``W`` GPUs its experts are split across and reduce-scatters the results back (vLLM's
  ``allgather_reducescatter`` all2all backend for data parallelism without EP, SGLang's DP
  attention gather): two ring collectives of ``(W−1)/W·N·H`` bf16 elements per GPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sim.catalogue import BF16_BYTES, GPU, Model
from sim.cost_model import Efficiency, body_peak_flops, smooth_max
from sim.linear_attention import state_s_per_seq
from sim.moe import grouped_gemm_layer
from sim.moe_kernel import experts_touched
from sim.parallel import (
    COMBINE_BYTES_PER_ELEMENT,
    DISPATCH_BYTES_PER_ELEMENT,
    Layout,
)

FloatArray = NDArray[np.float64]


class ParallelStepCost:
    """Per-GPU operator times of ``model`` on ``gpu`` under ``layout`` (module docstring)."""

    def __init__(
        self,
        model: Model,
        gpu: GPU,
        layout: Layout,
        efficiency: Efficiency,
        moe_kernel: str = "triton",
    ) -> None:
        spec = model.spec
        self.model, self.gpu, self.layout, self.efficiency = model, gpu, layout, efficiency
        tp, dp = layout.attention_tp, layout.dp
        bw = efficiency.bandwidth * gpu.hbm_bandwidth_bytes_per_s
        bf16_flops = efficiency.flops * gpu.bf16_dense_flops
        body_flops = efficiency.flops * body_peak_flops(model, gpu)
        head = float(spec.vocab_size * spec.hidden_size)
        body = float(model.dense_linear_params) - head
        self._dp, self._p = float(dp), efficiency.roofline_p
        self._body_weight_s = body * model.weight_bytes_per_param / tp / bw
        self._body_flop_s = 2.0 * body / tp / body_flops / dp
        self._head_weight_s = head * BF16_BYTES / tp / bw
        self._head_flop_s = 2.0 * head / tp / bf16_flops / dp
        # The GEMM kernels outside the experts and the lm_head's (sim/architecture.py).
        self._floor_s = (model.dense_gemm_kernels + 1) * efficiency.gemm_floor_s
        # MoE layers, per GPU.
        self._moe_layers = model.num_moe_layers
        self._measured = grouped_gemm_layer(model, gpu, layout.moe_tp, layout.ep, kernel=moe_kernel)
        expert = float(model.expert_params_per_layer)
        self._expert_weight_s = expert * model.weight_bytes_per_param / layout.moe_tp / bw
        self._expert_flop_s = (
            2.0 * spec.experts_per_token * expert / layout.ep / layout.moe_tp / body_flops
        )
        # Attention over the group's cache.
        kv_shards = min(tp, spec.num_kv_heads)
        self._kv_s = model.kv_bytes_per_token / kv_shards / bw / dp
        self._window_kv_s = model.window_kv_bytes_per_token / kv_shards / bw / dp
        self._window = float(spec.sliding_window or 0)
        self._pair_s = model.attention_flops_per_pair / (tp * dp) / bf16_flops
        self._prefill_pair_s = model.prefill_attention_flops_per_pair / (tp * dp) / bf16_flops
        # Linear-attention state of the group's B/dp sequences (sim/linear_attention.py).
        self._state_s = state_s_per_seq(model, bw, tp) / dp
        # Communication.
        moe_allreduces = self._moe_layers if layout.ep == 1 else 0
        self._num_allreduces = spec.num_layers + model.num_dense_mlp_layers + moe_allreduces
        self._ar_latency = gpu.allreduce_latency_at(tp) if tp > 1 else 0.0
        self._ar_s_per_token = (
            (2.0 * (tp - 1) / tp * spec.hidden_size * BF16_BYTES)
            / gpu.interconnect_bus_bandwidth_bytes_per_s
            / dp
        )
        self._a2a = _AllToAll(model, gpu, layout)
        self._gather = _DataParallelGather(model, gpu, layout)
        self._sampling_s = spec.vocab_size * 16.0 / bw / dp

    def linear_s(self, num_tokens: ArrayLike, num_logit_tokens: ArrayLike) -> FloatArray:
        """Dense layers, lm_head and MoE experts on one GPU."""
        n = np.asarray(num_tokens, dtype=np.float64)
        n_logits = np.asarray(num_logit_tokens, dtype=np.float64)
        p = self._p
        out = smooth_max(self._body_weight_s, self._body_flop_s * n, p)
        out = out + smooth_max(self._head_weight_s, self._head_flop_s * n_logits, p)
        out = out + self._floor_s
        if self._moe_layers:
            out = out + self._moe_layers * self.moe_layer_s(n)
        return np.asarray(out, dtype=np.float64)

    def moe_layer_s(self, num_tokens: ArrayLike) -> FloatArray:
        """One MoE layer's experts on one GPU for ``num_tokens`` tokens of the whole batch."""
        n = np.asarray(num_tokens, dtype=np.float64)
        if self._measured is not None:
            return self._measured.time_s(n)
        spec = self.model.spec
        touched = experts_touched(n, spec.num_experts, spec.experts_per_token)
        weight_s = self._expert_weight_s * touched / self.layout.ep
        return smooth_max(weight_s, self._expert_flop_s * n, self._p) + self.efficiency.gemm_floor_s

    def attention_s(
        self,
        num_seqs: ArrayLike,
        kv_read_tokens: ArrayLike,
        attention_pairs: ArrayLike,
        decode_only: ArrayLike,
    ) -> FloatArray:
        """Attention of the GPU's group: KV bytes over bandwidth vs pair FLOPs over throughput,
        sliding-window layers reading at most ``window`` tokens per sequence."""
        kv = np.asarray(kv_read_tokens, dtype=np.float64)
        pairs = np.asarray(attention_pairs, dtype=np.float64)
        b = np.asarray(num_seqs, dtype=np.float64)
        pair_s = np.where(np.asarray(decode_only), self._pair_s, self._prefill_pair_s)
        read = self._kv_s * kv + self._window_kv_s * np.minimum(kv, b * self._window)
        return np.maximum(read, pair_s * pairs) + self._state_s * b

    def comm_s(self, num_tokens: ArrayLike) -> FloatArray:
        """All-reduces within the attention group and the MoE dispatch/combine."""
        n = np.asarray(num_tokens, dtype=np.float64)
        allreduce = self._num_allreduces * (self._ar_latency + self._ar_s_per_token * n)
        if self.layout.attention_tp == 1:
            allreduce = np.zeros_like(n)
        moe = self._a2a.time_s(n) + self._gather.time_s(n)
        return np.asarray(allreduce + moe, dtype=np.float64)

    def sampling_s(self, num_logit_tokens: ArrayLike) -> FloatArray:
        """Softmax and sampling over the group's fp32 logit rows."""
        return self._sampling_s * np.asarray(num_logit_tokens, dtype=np.float64)


class _AllToAll:
    """Dispatch and combine of every MoE layer, per GPU (see the module docstring)."""

    def __init__(self, model: Model, gpu: GPU, layout: Layout) -> None:
        ep, gpn = layout.ep, layout.gpus_per_node
        self._layers = model.num_moe_layers if ep > 1 else 0
        spec = model.spec
        per_row = spec.hidden_size * (DISPATCH_BYTES_PER_ELEMENT + COMBINE_BYTES_PER_ELEMENT)
        # Rows per GPU bound for other ranks: (N/W)·k·(ep−1)/ep.
        self._bytes_per_token = per_row * spec.experts_per_token * (ep - 1) / ep / layout.world
        peers = max(ep - 1, 1)
        local = min(ep, gpn) - 1
        remote = ep - 1 - local
        self._local_s = local / peers / gpu.interconnect_bus_bandwidth_bytes_per_s
        self._remote_s = remote / peers / gpu.internode_bandwidth_bytes_per_s
        latency = gpu.allreduce_latency_at(max(2, min(ep, gpn)))
        if remote > 0:
            latency += gpu.internode_latency_s
        self._latency = 2.0 * latency

    def time_s(self, n: Any) -> FloatArray:
        if not self._layers:
            return np.zeros_like(n)
        moved = self._bytes_per_token * n
        transfer = np.maximum(self._local_s * moved, self._remote_s * moved)
        return self._layers * (self._latency + transfer)


class _DataParallelGather:
    """Without EP, the MoE layers of several attention groups: each layer all-gathers the whole
    batch's ``N·H`` bf16 activations over the ``W`` GPUs and reduce-scatters the expert outputs
    back, each a ring collective moving ``(W−1)/W·N·H·2`` bytes per GPU (Patarasuk & Yuan
    2009) at the NVLink bus bandwidth within a node, the NIC across nodes, plus its latency."""

    def __init__(self, model: Model, gpu: GPU, layout: Layout) -> None:
        world = layout.world
        self._layers = model.num_moe_layers if layout.ep == 1 and layout.dp > 1 else 0
        link = (
            gpu.interconnect_bus_bandwidth_bytes_per_s
            if layout.num_nodes == 1
            else gpu.internode_bandwidth_bytes_per_s
        )
        per_token = (world - 1) / world * model.spec.hidden_size * BF16_BYTES
        self._s_per_token = 2.0 * per_token / link
        latency = gpu.allreduce_latency_at(max(2, min(world, layout.gpus_per_node)))
        if layout.num_nodes > 1:
            latency += gpu.internode_latency_s
        self._latency = 2.0 * latency

    def time_s(self, n: Any) -> FloatArray:
        if not self._layers:
            return np.zeros_like(n)
        return self._layers * (self._latency + self._s_per_token * n)
