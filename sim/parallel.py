"""How a deployment splits a model over GPUs: TP within a node, DP attention and EP across them.

A deployment is ``num_nodes`` nodes of ``gpus_per_node`` GPUs (world ``W``). Attention and the
dense layers run tensor-parallel over ``tp`` GPUs of one node (Megatron-LM, Shoeybi et al.
arXiv:1909.08053); ``dp = W / tp`` such groups each hold their own share of the batch and its
KV cache (DP attention, as SGLang ``--enable-dp-attention`` and vLLM ``--data-parallel-size``
with ``--enable-expert-parallel`` run DeepSeek). The MoE layers are split over all ``W`` GPUs:
``ep`` expert-parallel ranks each hold ``E/ep`` experts, each expert split ``W/ep`` ways.

With ``ep > 1`` every MoE layer moves each token to the ranks of its routed experts and back
(dispatch and combine, DeepEP; DeepSeek-AI arXiv:2412.19437 §3.4): per GPU
``(N/W)·k·(ep−1)/ep`` token rows of ``H`` elements, fp8 with one fp32 scale per 128 on the way
out and bf16 back, over NVLink within a node and the NIC across nodes (catalogue figures). The
step's time is that of one GPU: ranks run in lock-step at every MoE layer, so a balanced batch is
assumed (imbalance between DP ranks is not modelled).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.catalogue import Model
from sim.errors import ScenarioError

#: Bytes of one dispatched element (DeepEP FP8 dispatch: 1 byte plus a fp32 scale per 128) and of
#: one combined element (bf16).
DISPATCH_BYTES_PER_ELEMENT = 1.0 + 4.0 / 128
COMBINE_BYTES_PER_ELEMENT = 2.0
#: The largest node the catalogue's NVLink/Infinity Fabric figures describe.
MAX_GPUS_PER_NODE = 8


@dataclass(frozen=True)
class Layout:
    """The split of one deployment: ``gpus_per_node × num_nodes`` GPUs, attention TP ``tp``,
    ``dp = world/tp`` attention groups, and ``ep`` expert-parallel ranks."""

    gpus_per_node: int
    num_nodes: int = 1
    tp: int | None = None
    ep: int = 1

    @property
    def world(self) -> int:
        """GPUs in the deployment."""
        return self.gpus_per_node * self.num_nodes

    @property
    def attention_tp(self) -> int:
        """GPUs one attention group spans (default: the whole node)."""
        return self.gpus_per_node if self.tp is None else self.tp

    @property
    def dp(self) -> int:
        """Attention groups, each with its own batch share and KV cache."""
        return self.world // self.attention_tp

    @property
    def moe_tp(self) -> int:
        """Ways each expert is split."""
        return self.world // self.ep

    @property
    def is_single_group(self) -> bool:
        """One tensor-parallel group and no expert parallelism: the plain TP node."""
        return self.dp == 1 and self.ep == 1

    def check(self, model: Model) -> None:
        """Refuse a split the model or hardware cannot take, naming the scenario key.

        Raise ScenarioError if TP leaves the node or does not divide the GPUs or the heads, if
        EP exceeds the expert count or does not divide the GPUs, or if a dense model is split
        into several attention groups (replicas of a dense model are a fleet).
        """
        tp, world, name = self.attention_tp, self.world, model.name
        spec = model.spec
        if self.gpus_per_node > MAX_GPUS_PER_NODE:
            raise ScenarioError(
                f"hardware.num_gpus: {self.gpus_per_node} GPUs per node; a node has at most "
                f"{MAX_GPUS_PER_NODE} (use hardware.num_nodes for more)"
            )
        if tp > self.gpus_per_node or self.gpus_per_node % tp != 0:
            raise ScenarioError(
                f"hardware.tensor_parallel: {tp} must divide the {self.gpus_per_node} GPUs of "
                "one node (tensor parallelism stays within a node)"
            )
        if spec.num_heads % tp != 0:
            kind = "MLA " if spec.attention == "mla" else ""
            raise ScenarioError(
                f"hardware.tensor_parallel: {tp} does not divide {name}'s {spec.num_heads} "
                f"{kind}attention heads"
            )
        if self.ep < 1 or world % self.ep != 0:
            raise ScenarioError(
                f"hardware.expert_parallel: {self.ep} must divide the deployment's {world} GPUs"
            )
        if self.ep > 1 and spec.num_experts == 1:
            raise ScenarioError(
                f"hardware.expert_parallel: {name} is a dense model; expert parallelism needs MoE"
            )
        if self.ep > spec.num_experts:
            raise ScenarioError(
                f"hardware.expert_parallel: {self.ep} is larger than {name}'s "
                f"{spec.num_experts} experts"
            )
        if self.dp > 1 and spec.num_experts == 1:
            raise ScenarioError(
                f"hardware: {world} GPUs in {self.dp} attention groups of TP {tp} serve a dense "
                f"model {name} as independent replicas; describe them as a fleet instead"
            )

    def weight_bytes_per_gpu(self, model: Model) -> float:
        """Weights one GPU holds: the dense part split ``tp`` ways (replicated per attention
        group) and every routed expert split ``W`` ways (``E/ep`` experts, ``1/moe_tp`` each)."""
        routed = (
            model.num_moe_layers
            * model.spec.num_experts
            * model.expert_params_per_layer
            * model.weight_bytes_per_param
        )
        return (model.weight_bytes - routed) / self.attention_tp + routed / self.world


def window_kv_reserve_bytes(model: Model, layout: Layout, max_num_seqs: int) -> float:
    """Per-GPU memory the sliding-window layers keep: ``sliding_window`` tokens for each of the
    group's ``max_num_seqs / dp`` sequences (vLLM's hybrid KV allocator frees what slides out)."""
    if not model.window_kv_bytes_per_token:
        return 0.0
    shards = min(layout.attention_tp, model.spec.num_kv_heads)
    window = float(model.spec.sliding_window or 0)
    seqs = max_num_seqs / layout.dp
    return seqs * window * model.window_kv_bytes_per_token / shards
