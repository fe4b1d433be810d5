"""A draft network's forward pass, costed with the verifier's own efficiency roofline.

Drafting heads (EAGLE, Medusa, MTP) are not catalogue models: an EAGLE head is one decoder layer of
the target's shape plus a fusion matrix, and it reads the target's lm_head. :class:`DraftNetwork`
holds the sizes of such a network and :class:`NetworkCost` maps one forward of it to seconds with
the same per-operator-class rooflines as :class:`sim.cost_model.StepCostModel` (docs/cost-model.md):

* linear layers ``smooth_max(w_bytes/(TP·η_bw·BW), 2·(P_body·N + P_head·N_logits)/(TP·η_fl·F))``
  plus the fitted per-GEMM floor for each GEMM kernel of the network;
* attention ``max(Σn·kv_tok/(min(TP, n_kv)·η_bw·BW), 4·L·n_h·d_h·pairs/(TP·η_fl·F))``;
* two all-reduces per layer under tensor parallelism (latency only: draft messages are tiny);
* the draft's own sampling: every logit row is written and read in fp32 to pick the draft tokens
  (argmax or top-k), a bandwidth-bound pass over ``N_logits · V_draft`` elements that grows with
  the batch and with the nodes per level (:data:`sim.cost_model.SAMPLING_BYTES_PER_LOGIT`).

Full draft models are catalogue models and use ``StepCostModel.forward_time`` instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sim.catalogue import BF16_BYTES, Model
from sim.cost_model import SAMPLING_BYTES_PER_LOGIT, StepCostModel, smooth_max

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class DraftNetwork:
    """The sizes of a draft network that one forward reads and computes.

    ``body_params``: parameters every token multiplies by (fusion fc, decoder layers, ResBlocks);
    ``head_params``: lm_head parameters per logit row (``V_draft·H``; summed over Medusa heads);
    ``weight_bytes``: bytes read per forward (body + head, bf16); ``resident_bytes``: bytes kept
    in GPU memory that the target does not already hold; ``num_gemms``: GEMM kernels launched per
    forward. Raise ValueError if a size is negative.
    """

    name: str
    body_params: float
    head_params: float
    resident_bytes: float
    num_layers: int
    num_gemms: int
    kv_bytes_per_token: float = 0.0
    num_kv_heads: int = 1
    attention_flops_per_pair: float = 0.0

    def __post_init__(self) -> None:
        for field_name in ("body_params", "head_params", "resident_bytes", "kv_bytes_per_token"):
            if getattr(self, field_name) < 0:
                raise ValueError(f"draft network {self.name}: {field_name} must be >= 0")

    @property
    def weight_bytes(self) -> float:
        """Bytes of weights one forward reads (bf16)."""
        return (self.body_params + self.head_params) * BF16_BYTES


def decoder_layer_params(target: Model, qkv_input_multiple: int = 1) -> float:
    """Parameters of one dense decoder layer of ``target``'s shape (MoE: the routed experts one
    token reaches, as the per-token work; see ``resident`` for what is stored).

    ``qkv_input_multiple`` widens the q/k/v projections' input (EAGLE-3 feeds ``2H``: the token
    embedding concatenated with the fused feature; SafeAILab/EAGLE ``eagle/model/cnets.py``).
    """
    s = target.spec
    q_out, kv_out = s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim
    attention = qkv_input_multiple * s.hidden_size * (q_out + 2 * kv_out) + q_out * s.hidden_size
    if s.attention == "mla":
        # An MLA target's layer (DeepSeek's MTP module) keeps its low-rank projections.
        attention = target.attention_params_per_layer
    experts = s.experts_per_token if s.num_experts > 1 else 1
    shared = target.counts.shared_experts
    return float(attention + shared + experts * target.expert_params_per_layer + 2 * s.hidden_size)


class NetworkCost:
    """Seconds of one forward of a :class:`DraftNetwork` on the verifier's GPUs.

    ``tp``: GPUs the network is sharded over (EAGLE heads and MTP modules run at the target's TP).
    Raise ValueError if ``tp`` < 1.
    """

    def __init__(self, network: DraftNetwork, cost_model: StepCostModel, tp: int) -> None:
        if tp < 1:
            raise ValueError(f"draft tensor-parallel degree must be >= 1, got {tp}")
        self.network = network
        self.tp = tp
        eff, gpu = cost_model.efficiency, cost_model.gpu
        self._p = eff.roofline_p
        self._bw = tp * eff.bandwidth * gpu.hbm_bandwidth_bytes_per_s
        self._kv_bw = min(tp, network.num_kv_heads) * eff.bandwidth * gpu.hbm_bandwidth_bytes_per_s
        self._flops = tp * eff.flops * gpu.bf16_dense_flops
        self._floor_s = network.num_gemms * eff.gemm_floor_s
        self._allreduce_s = (
            2.0 * network.num_layers * gpu.allreduce_latency_at(tp) if tp > 1 else 0.0
        )
        # Per-unit coefficients, so a forward costs a handful of array operations.
        self._weight_s = network.weight_bytes / self._bw
        self._flop_s_per_token = 2.0 * network.body_params / self._flops
        self._flop_s_per_logit = 2.0 * network.head_params / self._flops
        self._kv_s_per_token = network.kv_bytes_per_token / self._kv_bw
        self._attention_s_per_pair = network.attention_flops_per_pair / self._flops
        self._fixed_s = self._floor_s + self._allreduce_s
        # The verifier's engine runs draft forwards in CUDA graphs within its captured sizes and
        # launches them eagerly above (sim.host_costs); a draft forward is a decode-shaped step.
        self._host = cost_model.host
        self._eager = cost_model.host_costs.eager_launch_s_per_layer > 0
        # Logit rows are sampled on one GPU: V_draft = head_params / H elements per row.
        vocab = network.head_params / cost_model.model.spec.hidden_size
        self._sampling_s_per_logit = (
            vocab * SAMPLING_BYTES_PER_LOGIT / (eff.bandwidth * gpu.hbm_bandwidth_bytes_per_s)
        )

    def forward_s(
        self,
        num_tokens: ArrayLike,
        num_logit_tokens: ArrayLike,
        kv_read_tokens: ArrayLike = 0.0,
        attention_pairs: ArrayLike = 0.0,
    ) -> FloatArray:
        """One forward over ``num_tokens`` tokens producing ``num_logit_tokens`` logit rows."""
        n = np.asarray(num_tokens, dtype=np.float64)
        n_logits = np.asarray(num_logit_tokens, dtype=np.float64)
        flop_s = self._flop_s_per_token * n + self._flop_s_per_logit * n_logits
        linear = smooth_max(self._weight_s, flop_s, self._p) + self._sampling_s_per_logit * n_logits
        attention = np.maximum(
            self._kv_s_per_token * np.asarray(kv_read_tokens, dtype=np.float64),
            self._attention_s_per_pair * np.asarray(attention_pairs, dtype=np.float64),
        )
        forward = np.asarray(linear + attention + self._fixed_s)
        if not self._eager:
            return forward
        graphed = self._host.graphed(n_logits, n, np.ones(n.shape, dtype=bool))
        return forward + self._host.launch_stall_s(forward, graphed, self.network.num_layers)
