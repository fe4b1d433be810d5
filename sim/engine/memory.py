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

vLLM V1 (preset ``kv_sizing: vllm-v1-profile``) sizes the pool from a profile run instead, as
``determine_available_memory`` in vllm/v1/worker/gpu_worker.py (v0.14.0, the release of the month
the validated sweep ran) and ``memory_profiling`` in vllm/utils/mem_utils.py state it::

    kv = ceil(gpu_memory_utilization x total) - weights - torch_peak_increase - non_torch_increase

``total`` is the memory the driver reports (``torch.cuda.mem_get_info``;
:attr:`sim.gpu.GPU.reported_memory_bytes`), not the published capacity.
``torch_peak_increase`` is the allocator's peak during ``profile_run``: a forward over
``max_num_batched_tokens`` tokens, then ``_dummy_sampler_run`` over the last hidden state of
``min(max_num_seqs, max_num_batched_tokens)`` dummy requests with top-k and top-p set
(:func:`sampler_profile_peak_bytes`); the two do not overlap, so the peak is the larger. CUDA
graphs are captured after the pool is allocated ("Graph capturing finished ... took -0.26 GiB"
follows "GPU KV cache size" in the logs), so they are not subtracted: they come out of
the ``1 - gpu_memory_utilization`` headroom.
"""

from __future__ import annotations

import math
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


#: Ways a preset sizes its KV pool: ``budget`` (published memory less weights, a forward's
#: activations, fp32 logits and a fixed reserve) and ``vllm-v1-profile`` (module docstring).
KV_SIZING_RULES = ("budget", "vllm-v1-profile")

#: PyTorch sorts each row of an (N, V) tensor with cub's segmented radix sort once N reaches this
#: many rows (aten/src/ATen/native/cuda/SortStable.cu, ``launch_stable_sort_kernel``: one row
#: ``segmented_sort_large_segments``, under 128 ``segmented_sort_pairs_by_full_sort``).
SEGMENTED_SORT_MIN_ROWS = 128


def forward_activation_bytes(model: Model, tp: int, num_tokens: int) -> float:
    """Peak activation memory of one forward over ``num_tokens`` tokens, per GPU.

    A decoder layer holds the residual stream and normed input (2·H), the QKV and attention output
    ((n_h + 2·n_kv)·d_h + n_h·d_h, sharded by TP) and the gate/up/act MLP intermediates (3·I,
    sharded) per token in bf16. A rough per-layer estimate, not read from a source.
    """
    s = model.spec
    per_token = (
        2 * s.hidden_size
        + ((2 * s.num_heads + 2 * s.num_kv_heads) * s.head_dim + 3 * s.intermediate_size) / tp
    )
    return num_tokens * per_token * 2.0


def activation_peak_bytes(
    model: Model, tp: int, max_num_batched_tokens: int, max_num_seqs: int
) -> float:
    """The ``budget`` rule's activation term, per GPU: a forward at the token budget
    (:func:`forward_activation_bytes`) plus fp32 logits for every sequence (V·4 bytes)."""
    return (
        forward_activation_bytes(model, tp, max_num_batched_tokens)
        + max_num_seqs * model.spec.vocab_size * 4.0
    )


def sort_bytes_per_element(num_rows: int) -> float:
    """Bytes per logit PyTorch holds while ``logits.sort(dim=-1)`` runs on ``num_rows`` rows.

    The outputs, fp32 values and int64 indices (4 + 8), and the sort's own scratch, all through
    the caching allocator (aten/src/ATen/native/cuda/SortStable.cu and cub.cuh): from
    :data:`SEGMENTED_SORT_MIN_ROWS` rows an int64 iota of the input (8) and cub's
    ``DeviceSegmentedRadixSort::SortPairs`` alternate key and value buffers (4 + 8, the non-double-
    buffer form allocates them in its temporary storage); under it two int2 index/segment arrays
    (8 + 8), a key output (4) and ``DeviceRadixSort::SortPairs``' alternate fp32 keys and int2
    values (4 + 8); for one row the alternate buffers (4 + 8) and the row's iota (8).
    """
    outputs = 4.0 + 8.0
    if num_rows >= SEGMENTED_SORT_MIN_ROWS:
        return outputs + 8.0 + 12.0
    if num_rows > 1:
        return outputs + 16.0 + 4.0 + 12.0
    return outputs + 12.0 + 8.0


def sampler_profile_peak_bytes(num_rows: int, vocab_size: int, speculative: bool) -> float:
    """Allocator peak of vLLM V1's ``_dummy_sampler_run`` over ``num_rows`` dummy requests.

    E = num_rows x vocab_size logits; bytes per logit from vllm/v1 (v0.14.0), PyTorch-native
    top-k/top-p (FlashInfer's sampler is opt-in, ``VLLM_USE_FLASHINFER_SAMPLER``:
    sample/ops/topk_topp_sampler.py):

    - Plain sampler (sample/sampler.py): the model's bf16 logits (2) stay referenced by the caller
      while ``logits.to(float32)`` (4) is sorted by ``apply_top_k_top_p`` (
      :func:`sort_bytes_per_element`); the later top-k/top-p masks, softmax and scatter (28 in
      all) stay under the sort's peak: 2 + 4 + sort, 38 from 128 rows.
    - With any drafter (``speculative_config`` set) the same function then builds bf16 logits for
      one draft and one bonus token per request (2·2) and runs the rejection sampler
      (sample/rejection_sampler.py): it copies the bonus rows (2), samples them keeping their
      fp32 raw logits in the output (4), converts the target rows to fp32 (4) and clones them (4)
      before sorting: 18 + sort, 50 from 128 rows. Its own bonus-row sampler peaks lower (46).
    """
    elements = float(num_rows) * float(vocab_size)
    sort = sort_bytes_per_element(num_rows)
    plain = 2.0 + 4.0 + sort
    if not speculative:
        return elements * plain
    rejection = 4.0 + 2.0 + 4.0 + 4.0 + 4.0 + sort
    return elements * max(plain, rejection)


def profile_peak_bytes(
    model: Model,
    tp: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    speculative: bool,
) -> float:
    """vLLM V1's ``torch_peak_increase`` of the profile run, per GPU.

    ``profile_run`` (vllm/v1/worker/gpu_model_runner.py) forwards ``max_num_batched_tokens``
    tokens, keeps that forward's hidden states (tokens x H, bf16) and the last one of each of
    ``min(max_num_seqs, max_num_batched_tokens)`` dummy requests plus a random copy of those
    (2 x rows x H), and runs the sampler on them: the peak is the larger of the forward's
    activations and the sampler's peak on top of what it keeps. Logits are full-vocabulary on
    every tensor-parallel rank (``LogitsProcessor._gather_logits`` all-gathers them:
    ``Platform.use_all_gather`` is true on CUDA), so the sampler term does not shrink with TP.
    """
    rows = min(max_num_seqs, max_num_batched_tokens)
    kept = (max_num_batched_tokens + 2 * rows) * model.spec.hidden_size * 2.0
    sampler = sampler_profile_peak_bytes(rows, model.spec.vocab_size, speculative)
    return max(forward_activation_bytes(model, tp, max_num_batched_tokens), kept + sampler)


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
    kv_sizing: str = "budget",
    speculative: bool = False,
) -> MemoryPlan:
    """Size the KV pool for ``model`` on ``tp`` GPUs.

    ``extra_*`` count a drafter's weights and KV kept on the same GPUs (per GPU and in total per
    token respectively); ``weight_bytes_per_gpu`` replaces ``weights / tp`` for a deployment that
    splits experts differently (sim/parallel.py); ``window_pool_ratio`` > 0 prices the model's
    sliding-window layers into each pool token as SGLang's hybrid pool does (module docstring).
    ``kv_sizing`` picks the rule (:data:`KV_SIZING_RULES`); under ``vllm-v1-profile``
    ``speculative`` says a drafter is configured (the profile run then adds the rejection
    sampler) and ``reserved_bytes`` stands for the profile's non-torch increase.
    Raise CatalogueError, with the numbers, if the
    weights do not fit or no KV block is left.
    """
    if kv_sizing not in KV_SIZING_RULES:
        raise ValueError(f"unknown kv_sizing {kv_sizing!r}; known: {', '.join(KV_SIZING_RULES)}")
    own = model.weight_bytes / tp if weight_bytes_per_gpu is None else weight_bytes_per_gpu
    weights = own + extra_weight_bytes
    if kv_sizing == "vllm-v1-profile":
        # request_memory (vllm/v1/worker/utils.py): ceil(total x utilisation), total as reported.
        usable = float(math.ceil(gpu_memory_utilization * gpu.engine_visible_memory_bytes))
        activations = profile_peak_bytes(
            model, tp, max_num_batched_tokens, max_num_seqs, speculative
        )
    else:
        usable = gpu_memory_utilization * gpu.memory_bytes
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
