"""GPU memory: does the model fit, and how many KV blocks are left for the cache.

As vLLM sizes its cache: per GPU, ``gpu_memory_utilization × memory`` minus the weights' shard,
the activation peak of a forward over ``max_num_batched_tokens`` tokens, and the memory the engine
keeps outside the torch allocator (CUDA graphs, NCCL); what remains is divided into blocks of
``block_size`` tokens of KV.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.catalogue import GPU, Model
from sim.errors import CatalogueError

GIB = float(1 << 30)


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory budget and the resulting KV block pool."""

    usable_bytes: float
    weight_bytes: float
    activation_bytes: float
    reserved_bytes: float
    kv_bytes_per_token: float
    kv_budget_bytes: float
    num_blocks: int
    block_size: int

    @property
    def num_kv_tokens(self) -> int:
        """Token slots in the KV pool."""
        return self.num_blocks * self.block_size


def activation_peak_bytes(
    model: Model, tp: int, max_num_batched_tokens: int, max_num_seqs: int
) -> float:
    """Peak activation memory of one forward at the token budget, per GPU.

    A decoder layer holds the residual stream and normed input (2·H), the QKV and attention output
    ((n_h + 2·n_kv)·d_h + n_h·d_h, sharded by TP) and the gate/up/act MLP intermediates (3·I,
    sharded) per token in bf16; the sampler holds fp32 logits for every sequence (V·4 bytes).
    """
    s = model.spec
    per_token = (
        2 * s.hidden_size
        + ((2 * s.num_heads + 2 * s.num_kv_heads) * s.head_dim + 3 * s.intermediate_size) / tp
    )
    return max_num_batched_tokens * per_token * 2.0 + max_num_seqs * s.vocab_size * 4.0


def plan_memory(
    model: Model,
    gpu: GPU,
    tp: int,
    gpu_memory_utilization: float,
    block_size: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    reserved_bytes: float,
    extra_weight_bytes: float = 0.0,
    extra_kv_bytes_per_token: float = 0.0,
    weight_bytes_per_gpu: float | None = None,
) -> MemoryPlan:
    """Size the KV pool for ``model`` on ``tp`` GPUs.

    ``extra_*`` count a drafter's weights and KV kept on the same GPUs (per GPU and in total per
    token respectively); ``weight_bytes_per_gpu`` replaces ``weights / tp`` for a deployment that
    splits experts differently (sim/parallel.py). Raise CatalogueError, with the numbers, if the
    weights do not fit or no KV block is left.
    """
    usable = gpu_memory_utilization * gpu.memory_bytes
    own = model.weight_bytes / tp if weight_bytes_per_gpu is None else weight_bytes_per_gpu
    weights = own + extra_weight_bytes
    activations = activation_peak_bytes(model, tp, max_num_batched_tokens, max_num_seqs)
    kv_per_token = (model.kv_bytes_per_token + extra_kv_bytes_per_token) / min(
        tp, model.spec.num_kv_heads
    )
    budget = usable - weights - activations - reserved_bytes
    # Name the key to change first: the GPU count, or the utilisation where vLLM's default
    # (0.9) would hold the weights.
    key = (
        "engine.gpu_memory_utilization"
        if gpu_memory_utilization < 0.9 and weights < 0.9 * gpu.memory_bytes
        else "hardware.num_gpus"
    )
    if weights >= usable:
        raise CatalogueError(
            f"{key}: {model.name} needs {weights / GIB:.1f} GiB of weights per GPU at TP {tp}, "
            f"but {gpu.name} at gpu_memory_utilization {gpu_memory_utilization} offers "
            f"{usable / GIB:.1f} GiB: raise {key}"
        )
    num_blocks = int(budget // (block_size * kv_per_token)) if budget > 0 else 0
    if num_blocks < 1:
        raise CatalogueError(
            f"{key}: {model.name} at TP {tp} on {gpu.name} leaves no room for the KV cache "
            f"({budget / GIB:.2f} GiB after weights {weights / GIB:.1f} GiB, activations "
            f"{activations / GIB:.1f} GiB, reserved {reserved_bytes / GIB:.1f} GiB): raise "
            "hardware.num_gpus or engine.gpu_memory_utilization, or lower "
            "engine.max_num_batched_tokens"
        )
    return MemoryPlan(
        usable_bytes=usable,
        weight_bytes=weights,
        activation_bytes=activations,
        reserved_bytes=reserved_bytes,
        kv_bytes_per_token=kv_per_token,
        kv_budget_bytes=budget,
        num_blocks=num_blocks,
        block_size=block_size,
    )
