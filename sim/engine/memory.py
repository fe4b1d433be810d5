"""GPU memory: does the model fit, and how many KV blocks are left for the cache.

As vLLM sizes its cache: per GPU, ``gpu_memory_utilization × memory`` minus the weights' shard,
the activation peak of a forward over ``max_num_batched_tokens`` tokens, and the memory the engine
keeps outside the torch allocator (CUDA graphs, NCCL); what remains is divided into blocks of
``block_size`` tokens of KV.

Sliding-window layers are sized one of two ways. vLLM's rule is a fixed reserve outside the pool
(:func:`sim.parallel.window_kv_reserve_bytes`, passed in ``reserved_bytes``). SGLang's hybrid SWA
pool (``window_pool_ratio``) gives the window layers a second pool of ``ratio`` times the full
pool's tokens, so each full-pool token costs the full layers' bytes plus ``ratio`` times the window
layers' bytes: sgl-project/sglang python/sglang/srt/model_executor/pool_configurator.py,
HybridSWAPoolConfigurator (``cell_size = full_per_token·(full_layers + draft_layers) +
swa_full_tokens_ratio·swa_per_token·swa_layers``; ``swa_tokens = full_tokens·ratio``), the same
split as ``set_num_token_hybrid`` in model_runner.py of the 0.5 releases.
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
    #: Token slots of SGLang's sliding-window pool (0 without one): ``ratio`` x the full pool's.
    window_kv_tokens: int = 0

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
    window_pool_ratio: float = 0.0,
) -> MemoryPlan:
    """Size the KV pool for ``model`` on ``tp`` GPUs.

    ``extra_*`` count a drafter's weights and KV kept on the same GPUs (per GPU and in total per
    token respectively); ``weight_bytes_per_gpu`` replaces ``weights / tp`` for a deployment that
    splits experts differently (sim/parallel.py); ``window_pool_ratio`` > 0 prices the model's
    sliding-window layers into each pool token as SGLang's hybrid pool does (module docstring).
    Raise CatalogueError, with the numbers, if the
    weights do not fit or no KV block is left.
    """
    usable = gpu_memory_utilization * gpu.memory_bytes
    own = model.weight_bytes / tp if weight_bytes_per_gpu is None else weight_bytes_per_gpu
    weights = own + extra_weight_bytes
    activations = activation_peak_bytes(model, tp, max_num_batched_tokens, max_num_seqs)
    kv_per_token = (
        model.kv_bytes_per_token
        + extra_kv_bytes_per_token
        + window_pool_ratio * model.window_kv_bytes_per_token
    ) / min(tp, model.spec.num_kv_heads)
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
        window_kv_tokens=(
            int(num_blocks * block_size * window_pool_ratio)
            if model.window_kv_bytes_per_token
            else 0
        ),
    )


def window_pool_max_seqs(
    plan: MemoryPlan, sliding_window: int, max_num_batched_tokens: int, lookahead_tokens: int
) -> int | None:
    """Sequences SGLang's sliding-window pool can hold at once, or ``None`` without that pool.

    A running sequence keeps at most its window, the tokens one step writes (``1 +
    lookahead_tokens``) and one page before the tokens that slid out are freed; a prefill chunk
    (``max_num_batched_tokens``) is held whole until its step ends. The same per-request bound as
    SGLang's SWAChunkCapPoolConfigurator (pool_configurator.py: ``window + draft tokens +
    page_size + decode allocation`` per request plus the chunked-prefill size). The full pool
    stays the binding limit unless most sequences are shorter than the window. A pool that holds
    one sequence but not a whole chunk beside it still runs one (prefill then goes in smaller
    chunks); 0 means not even one sequence fits, which SGLang refuses at start-up ("SWA pool
    cannot hold even one request", pool_configurator.py).
    """
    if plan.window_kv_tokens <= 0:
        return None
    per_seq = sliding_window + 1 + lookahead_tokens + plan.block_size
    if plan.window_kv_tokens < per_seq:
        return 0
    return max(1, (plan.window_kv_tokens - max_num_batched_tokens) // per_seq)
