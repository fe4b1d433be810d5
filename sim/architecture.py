"""Per-layer parameter counts and KV geometry of the decoder kinds served today.

:class:`sim.model_spec.Model` derives its sizes from these counts. Each formula follows the
layer as the model's reference implementation (Hugging Face ``transformers``) builds it:

* **GQA attention** (Llama, Qwen, Mixtral, gpt-oss): ``H·n_h·d + 2·H·n_kv·d + n_h·d·H`` (+ q/k/v
  biases, + q/k norms ``2·d``, + one learned sink logit per head for gpt-oss, OpenAI gpt-oss model
  card 2025 §2).
* **MLA** (DeepSeek-V2/V3, Kimi-K2; DeepSeek-AI arXiv:2405.04434 §2.1): queries through a low-rank
  ``H → q_lora → n_h·(d_nope + d_rope)`` (or directly when ``q_lora_rank`` is absent), keys and
  values through the shared latent ``H → kv_lora + d_rope`` and ``kv_lora → n_h·(d_nope + d_v)``,
  output ``n_h·d_v → H``, plus the two latent RMS norms. The cache holds one latent row of
  ``kv_lora + d_rope`` elements per token and layer (no separate K and V), shared by all heads, so
  it is not split by tensor parallelism (every rank keeps the whole latent).
* **Attention FLOPs per (query, key) pair and head**: GQA ``2·d`` for QKᵀ + ``2·d`` for PV. MLA in
  decode absorbs the up-projections into the query and output (arXiv:2405.04434 §2.1.2, as
  vLLM/FlashMLA run it): ``2·(kv_lora + d_rope) + 2·kv_lora``; in prefill it materialises K and V
  per head: ``2·(d_nope + d_rope) + 2·d_v``.
* **MoE layers** (Mixtral, DeepSeekMoE arXiv:2401.06066, Qwen3-MoE, Llama-4): a router ``H·E``,
  ``E`` routed experts of ``3·H·I_moe`` (gate, up, down) of which each token reaches ``k``, and
  ``S`` shared experts every token passes through; the first ``num_dense_layers`` layers
  (DeepSeek ``first_k_dense_replace``) and, with ``moe_layer_step`` s > 1, all but every s-th
  layer (Llama-4 ``interleave_moe_layer_step``) have a dense MLP of ``3·H·I`` instead.
* **Sliding-window layers** (gpt-oss: every other layer attends to the last 128 tokens) keep and
  read at most ``window`` tokens per sequence.
* **Gated attention and Gated DeltaNet** (Qwen3-Next): the full-attention layers' ``q_proj`` also
  yields a per-head output gate (``2·n_h·d`` outputs); the linear-attention layers' token mixer is
  priced by :mod:`sim.linear_attention` and keeps a per-sequence state instead of KV. The
  per-layer ``attention`` count is then the mean over the model's layers of both kinds (exact
  totals: ``L`` times it is the sum; it must divide, and does for Qwen3-Next).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.errors import CatalogueError
from sim.linear_attention import gdn_layer_params, gdn_state_elements


@dataclass(frozen=True)
class LayerCounts:
    """The parameter counts and KV geometry of one model, per layer kind."""

    attention: int
    dense_mlp: int
    routed_expert: int
    shared_experts: int
    router: int
    num_moe_layers: int
    num_window_layers: int
    kv_elements_per_layer: int
    pair_flops_per_layer_decode: int
    pair_flops_per_layer_prefill: int
    num_linear_layers: int = 0
    linear_state_elements: int = 0


def _need(spec: Any, name: str, key: str) -> int:
    value = getattr(spec, key)
    if value is None:
        raise CatalogueError(f"model {name}: attention 'mla' needs {key}")
    return int(value)


def _mla(spec: Any, name: str) -> tuple[int, int, int, int]:
    """MLA attention parameters, latent elements per token, and pair FLOPs (decode, prefill)."""
    h, nh = spec.hidden_size, spec.num_heads
    kv_lora = _need(spec, name, "kv_lora_rank")
    nope = _need(spec, name, "qk_nope_head_dim")
    rope = _need(spec, name, "qk_rope_head_dim")
    v = _need(spec, name, "v_head_dim")
    if spec.num_kv_heads != 1 or spec.head_dim != kv_lora + rope:
        raise CatalogueError(
            f"model {name}: an MLA model caches one latent row per token: give num_kv_heads 1 and "
            f"head_dim kv_lora_rank + qk_rope_head_dim = {kv_lora + rope} "
            f"(got {spec.num_kv_heads} and {spec.head_dim})"
        )
    q_width = nh * (nope + rope)
    q_lora = spec.q_lora_rank
    query = h * q_width if q_lora is None else h * q_lora + q_lora + q_lora * q_width
    latent = h * (kv_lora + rope) + kv_lora + kv_lora * nh * (nope + v)
    params = query + latent + nh * v * h
    decode = nh * (2 * (kv_lora + rope) + 2 * kv_lora)
    prefill = nh * (2 * (nope + rope) + 2 * v)
    return params, kv_lora + rope, decode, prefill


def layer_counts(spec: Any, name: str) -> LayerCounts:
    """Derive :class:`LayerCounts` from a ``ModelSpec`` (formulas in the module docstring).

    Raise CatalogueError naming the model and field if the geometry is inconsistent.
    """
    h, hd, nh, nkv = spec.hidden_size, spec.head_dim, spec.num_heads, spec.num_kv_heads
    if spec.attention == "mla":
        attention, kv_elements, decode, prefill = _mla(spec, name)
    else:
        q_out, kv_out = nh * hd, nkv * hd
        gate = q_out if spec.attention_output_gate else 0
        attention = h * (q_out + gate) + 2 * h * kv_out + q_out * h
        if spec.qkv_bias:
            attention += q_out + 2 * kv_out
        if spec.qk_norm:
            attention += 2 * hd
        if spec.attention_sinks:
            attention += nh
        kv_elements = 2 * nkv * hd
        decode = prefill = 4 * nh * hd
    moe = spec.num_experts > 1
    num_moe_layers = 0
    if moe:
        if spec.num_dense_layers >= spec.num_layers:
            raise CatalogueError(
                f"model {name}: num_dense_layers {spec.num_dense_layers} leaves no MoE layer of "
                f"{spec.num_layers}"
            )
        num_moe_layers = sum(
            1
            for i in range(spec.num_dense_layers, spec.num_layers)
            if (i + 1) % spec.moe_layer_step == 0
        )
    inter_moe = spec.moe_intermediate_size or spec.intermediate_size
    shared_width = spec.shared_expert_intermediate_size or inter_moe
    window_layers = spec.num_sliding_window_layers
    if window_layers and spec.sliding_window is None:
        raise CatalogueError(f"model {name}: num_sliding_window_layers needs sliding_window")
    if window_layers >= spec.num_layers:
        raise CatalogueError(
            f"model {name}: num_sliding_window_layers {window_layers} must leave a full-attention "
            f"layer of {spec.num_layers}"
        )
    linear = spec.num_linear_attention_layers
    state = 0
    if linear:
        if linear + window_layers >= spec.num_layers:
            raise CatalogueError(
                f"model {name}: num_linear_attention_layers {linear} must leave a full-attention "
                f"layer of {spec.num_layers}"
            )
        total = (spec.num_layers - linear) * attention + linear * gdn_layer_params(spec)
        if total % spec.num_layers:
            raise CatalogueError(
                f"model {name}: its {linear} linear-attention layers' parameters do not average "
                f"to a whole number per layer over {spec.num_layers} layers"
            )
        attention = total // spec.num_layers
        state = gdn_state_elements(spec)
    return LayerCounts(
        attention=attention,
        dense_mlp=3 * h * spec.intermediate_size,
        routed_expert=3 * h * (inter_moe if moe else spec.intermediate_size),
        shared_experts=spec.num_shared_experts * 3 * h * shared_width if moe else 0,
        router=h * spec.num_experts if moe else 0,
        num_moe_layers=num_moe_layers,
        num_window_layers=window_layers,
        kv_elements_per_layer=kv_elements,
        pair_flops_per_layer_decode=decode,
        pair_flops_per_layer_prefill=prefill,
        num_linear_layers=linear,
        linear_state_elements=state,
    )


#: GEMM kernels of one attention block as serving engines run it: GQA a fused QKV and the
#: output projection; MLA in its absorbed decode form (vLLM ``MLACommonImpl``, SGLang
#: ``forward_absorb``) the query/latent down-projection (``fused_qkv_a_proj_with_mqa``, or
#: ``q_proj`` and ``kv_a_proj_with_mqa``), ``q_b_proj``, the two batched products with the
#: absorbed ``W_UK`` and ``W_UV`` and ``o_proj``.
ATTENTION_GEMMS = {"gqa": 2, "mla": 5}


def dense_gemm_kernels(spec: Any, counts: LayerCounts) -> int:
    """GEMM kernels one forward launches outside the fused-MoE kernel and the lm_head.

    Per layer the attention block's (:data:`ATTENTION_GEMMS`), then a dense MLP's gate-up and
    down, or a MoE layer's router and, with shared experts, their gate-up and down (the routed
    experts are the fused-MoE kernel's own). A dense GQA model has 4 per layer. Each kernel pays
    the fitted fixed time per GEMM (``Efficiency.gemm_floor_s``).
    """
    attention = ATTENTION_GEMMS.get(spec.attention, 2)
    moe_mlp = 1 + (2 if counts.shared_experts else 0)
    dense_layers = spec.num_layers - counts.num_moe_layers
    return spec.num_layers * attention + 2 * dense_layers + moe_mlp * counts.num_moe_layers
