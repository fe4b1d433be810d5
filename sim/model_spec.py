"""A decoder-only model's architecture (:class:`ModelSpec`, as in its ``config.json``) and the
sizes the cost model needs from it (:class:`Model`: parameter counts, bytes read per step, KV
bytes per token), with the standard decoder-only formulas stated where they are computed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from sim.architecture import LayerCounts, dense_gemm_kernels, layer_counts
from sim.errors import CatalogueError
from sim.linear_attention import STATE_BYTES_PER_ELEMENT
from sim.precision import KV_FORMAT_BYTES, WEIGHT_FORMATS, kv_bytes_per_element, weight_format

#: bf16 weights and KV cache: 2 bytes per element.
BF16_BYTES = 2


class ModelSpec(BaseModel):
    """A decoder-only transformer's architecture, as in its ``config.json``.

    Used both for catalogue entries and for models given inline in a scenario.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    tied_embeddings: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False
    num_experts: int = Field(default=1, gt=0)
    experts_per_token: int = Field(default=1, gt=0)
    max_context_tokens: int = Field(default=131072, gt=0)
    #: Multi-token-prediction modules shipped with the checkpoint (DeepSeek-V3 style); 0 = none.
    num_mtp_modules: int = Field(default=0, ge=0)
    # Mixture of experts beyond Mixtral (sim/architecture.py): routed expert width, shared
    # experts, leading dense layers, and the MoE layer interleave.
    moe_intermediate_size: int | None = Field(default=None, gt=0)
    num_shared_experts: int = Field(default=0, ge=0)
    shared_expert_intermediate_size: int | None = Field(default=None, gt=0)
    num_dense_layers: int = Field(default=0, ge=0)
    moe_layer_step: int = Field(default=1, ge=1)
    # Attention kind: grouped-query (default) or DeepSeek's multi-head latent attention.
    attention: Literal["gqa", "mla"] = "gqa"
    q_lora_rank: int | None = Field(default=None, gt=0)
    kv_lora_rank: int | None = Field(default=None, gt=0)
    qk_nope_head_dim: int | None = Field(default=None, gt=0)
    qk_rope_head_dim: int | None = Field(default=None, gt=0)
    v_head_dim: int | None = Field(default=None, gt=0)
    # Sliding-window layers (gpt-oss) and learned attention sinks.
    sliding_window: int | None = Field(default=None, gt=0)
    num_sliding_window_layers: int = Field(default=0, ge=0)
    attention_sinks: bool = False
    #: The window layers attend within fixed chunks of ``sliding_window`` tokens (Llama 4
    #: ``attention_chunk_size``), not a sliding window; vLLM then keeps their KV like a full
    #: layer's (sim/build.py).
    chunked_local_attention: bool = False
    #: Gated attention (Qwen3-Next ``attn_output_gate``): q_proj also yields a sigmoid output gate.
    attention_output_gate: bool = False
    # Gated DeltaNet linear-attention layers (Qwen3-Next; sim/linear_attention.py): how many, and
    # their key/value heads, head sizes and causal-convolution width.
    num_linear_attention_layers: int = Field(default=0, ge=0)
    linear_num_key_heads: int | None = Field(default=None, gt=0)
    linear_key_head_dim: int | None = Field(default=None, gt=0)
    linear_num_value_heads: int | None = Field(default=None, gt=0)
    linear_value_head_dim: int | None = Field(default=None, gt=0)
    linear_conv_kernel_dim: int | None = Field(default=None, gt=1)
    #: FP8 checkpoints scaled per square block of this size (config.json ``weight_block_size``).
    fp8_weight_block_size: int | None = Field(default=None, gt=0)
    #: The Hugging Face repository id the architecture comes from (name resolution).
    hf_id: str | None = None
    name: str = "inline"
    source: str = "given inline in the scenario"


@dataclass(frozen=True)
class Model:
    """A model's architecture and the sizes derived from it.

    ``weight_precision`` is that of the linear layers of the decoder (``fp8``: an FP8 checkpoint,
    whose embedding, lm_head and norms stay bf16 as vLLM's ``Fp8LinearMethod`` leaves them);
    ``kv_cache_precision`` that of the KV cache (vLLM ``--kv-cache-dtype``).
    """

    spec: ModelSpec
    name: str
    weight_precision: str = "bf16"
    kv_cache_precision: str = "bf16"
    # Derived sizes, filled in by ``from_spec``.
    attention_params_per_layer: int = field(default=0)
    expert_params_per_layer: int = field(default=0)
    norm_params_per_layer: int = field(default=0)
    embedding_params: int = field(default=0)
    lm_head_params: int = field(default=0)
    layers: LayerCounts | None = field(default=None)

    @staticmethod
    def from_spec(spec: ModelSpec, name: str) -> Model:
        """Derive parameter counts with the standard decoder formulas (:mod:`sim.architecture`).

        per layer: attention (GQA ``H·nh·hd + 2·H·nkv·hd + nh·hd·H`` + biases, or MLA), norms
        ``2·H``, and either a dense MLP ``3·H·I`` or, on MoE layers, the router ``H·E``, the shared
        experts and ``E`` routed experts of ``3·H·I_moe``; embedding ``V·H``; an untied lm_head
        another ``V·H``. ``expert_params_per_layer`` is the routed expert (the dense MLP for a
        dense model). Checked against published totals in tests.
        Raise CatalogueError if the head or expert geometry is inconsistent.
        """
        if spec.num_heads % spec.num_kv_heads != 0:
            raise CatalogueError(
                f"model {name}: num_heads {spec.num_heads} is not a multiple of "
                f"num_kv_heads {spec.num_kv_heads}"
            )
        if spec.experts_per_token > spec.num_experts:
            raise CatalogueError(
                f"model {name}: experts_per_token {spec.experts_per_token} > "
                f"num_experts {spec.num_experts}"
            )
        counts = layer_counts(spec, name)
        h = spec.hidden_size
        return Model(
            spec=spec,
            name=name,
            attention_params_per_layer=counts.attention,
            expert_params_per_layer=counts.routed_expert,
            norm_params_per_layer=2 * h,
            embedding_params=spec.vocab_size * h,
            lm_head_params=0 if spec.tied_embeddings else spec.vocab_size * h,
            layers=counts,
        )

    @property
    def counts(self) -> LayerCounts:
        """The per-layer counts ``from_spec`` derived."""
        if self.layers is None:
            raise ValueError(f"model {self.name} was not built by Model.from_spec")
        return self.layers

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a routed mixture of experts (0 for a dense model)."""
        return self.counts.num_moe_layers

    @property
    def num_dense_mlp_layers(self) -> int:
        """Layers with a dense MLP."""
        return self.spec.num_layers - self.num_moe_layers

    @property
    def dense_gemm_kernels(self) -> int:
        """GEMM kernels per forward outside the fused-MoE kernel and the lm_head
        (:func:`sim.architecture.dense_gemm_kernels`)."""
        return dense_gemm_kernels(self.spec, self.counts)

    @property
    def moe_always_on_params_per_layer(self) -> int:
        """Router and shared experts of one MoE layer: every token passes through them."""
        return self.counts.router + self.counts.shared_experts

    def with_precision(self, weights: str, kv_cache: str) -> Model:
        """This model with its linear layers stored in ``weights`` and its KV cache in
        ``kv_cache`` (:mod:`sim.precision`). Raise CatalogueError if either is unknown."""
        weight_format(weights)
        kv_bytes_per_element(kv_cache)
        return replace(self, weight_precision=weights, kv_cache_precision=kv_cache)

    @property
    def weight_bytes_per_param(self) -> float:
        """Bytes per parameter of the decoder's linear layers."""
        return WEIGHT_FORMATS[self.weight_precision].bytes_per_weight

    @property
    def linear_weight_bytes_read(self) -> float:
        """Bytes of dense linear weights one forward reads: the decoder's linear layers at their
        precision (MoE experts excluded), the lm_head and norms in bf16."""
        head = self.spec.vocab_size * self.spec.hidden_size
        body = self.dense_linear_params - head
        return float(body * self.weight_bytes_per_param + head * BF16_BYTES)

    @property
    def expert_bytes_per_layer(self) -> float:
        """Bytes of one routed expert of one layer at the weights' precision."""
        return float(self.expert_params_per_layer * self.weight_bytes_per_param)

    # --- sizes -------------------------------------------------------------------------------
    @property
    def total_params(self) -> int:
        """All parameters, every expert and the embedding table included."""
        s, c = self.spec, self.counts
        per_layer = self.attention_params_per_layer + self.norm_params_per_layer
        moe = self.moe_always_on_params_per_layer + s.num_experts * self.expert_params_per_layer
        return (
            s.num_layers * per_layer
            + self.num_dense_mlp_layers * c.dense_mlp
            + self.num_moe_layers * moe
            + self.embedding_params
            + self.lm_head_params
            + s.hidden_size
        )

    @property
    def weight_bytes(self) -> float:
        """Bytes of all weights at their precision: what must fit in GPU memory (embedding,
        lm_head and norms in bf16)."""
        s = self.spec
        unquantised = (
            self.embedding_params
            + self.lm_head_params
            + s.num_layers * self.norm_params_per_layer
            + s.hidden_size
        )
        quantised = self.total_params - unquantised
        return float(quantised * self.weight_bytes_per_param + unquantised * BF16_BYTES)

    @property
    def lm_head_bytes(self) -> float:
        """Bytes of the output projection read every forward (the embedding table when tied)."""
        return float(self.spec.vocab_size * self.spec.hidden_size * BF16_BYTES)

    @property
    def dense_linear_params(self) -> int:
        """Parameters of the linear layers that every token passes through (routed experts
        excluded; routers and shared experts included).

        The embedding lookup is a gather, not a matmul, so it is excluded; the lm_head is included.
        """
        s = self.spec
        per_layer = self.attention_params_per_layer + self.norm_params_per_layer
        return (
            s.num_layers * per_layer
            + self.num_dense_mlp_layers * self.counts.dense_mlp
            + self.num_moe_layers * self.moe_always_on_params_per_layer
            + s.vocab_size * s.hidden_size
            + s.hidden_size
        )

    @property
    def active_linear_params(self) -> int:
        """Linear-layer parameters one token multiplies by: dense part plus its routed experts."""
        routed = self.num_moe_layers * self.spec.experts_per_token * self.expert_params_per_layer
        return self.dense_linear_params + routed

    def expected_experts_touched(self, num_tokens: Any) -> Any:
        """Expected distinct experts per layer read by a step of ``num_tokens`` tokens.

        With top-k routing spread uniformly over E experts, an expert is missed by one token with
        probability 1 − k/E, so E·(1 − (1 − k/E)^N) experts are read (a uniform-routing
        approximation; real routers are skewed, which lowers this).
        """
        s = self.spec
        n = np.asarray(num_tokens, dtype=np.float64)
        if s.num_experts == 1:
            return np.ones_like(n)
        miss = 1.0 - s.experts_per_token / s.num_experts
        return s.num_experts * (1.0 - miss**n)

    @property
    def num_full_attention_layers(self) -> int:
        """Layers that attend to (and cache) the whole context."""
        return self.spec.num_layers - self.counts.num_window_layers - self.num_linear_layers

    @property
    def num_linear_layers(self) -> int:
        """Linear-attention (Gated DeltaNet) layers: a fixed state per sequence, no KV."""
        return self.counts.num_linear_layers

    @property
    def linear_state_bytes_per_seq(self) -> float:
        """Bytes of linear-attention state one sequence keeps over all such layers, unsplit
        (:mod:`sim.linear_attention`)."""
        return float(
            self.num_linear_layers * self.counts.linear_state_elements * STATE_BYTES_PER_ELEMENT
        )

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes per context token over the full-attention layers: per layer
        ``2·n_kv·d_h`` elements (K and V; MLA one latent row of ``kv_lora + d_rope``) at the
        cache's precision. Sliding-window layers are in :attr:`window_kv_bytes_per_token`."""
        element = KV_FORMAT_BYTES[self.kv_cache_precision]
        return float(self.num_full_attention_layers * self.counts.kv_elements_per_layer * element)

    @property
    def window_kv_bytes_per_token(self) -> float:
        """KV bytes per token over the sliding-window layers (each keeps ``sliding_window``)."""
        element = KV_FORMAT_BYTES[self.kv_cache_precision]
        return float(self.counts.num_window_layers * self.counts.kv_elements_per_layer * element)

    @property
    def attention_flops_per_pair(self) -> float:
        """FLOPs of attention per (query token, attended key) pair over the full-attention
        layers in decode: 4·L·n_h·d_h for GQA (QK^T and PV, 2·d_h each; docs/cost-model.md), the
        absorbed form for MLA (:mod:`sim.architecture`)."""
        per_layer = self.counts.pair_flops_per_layer_decode
        return float(self.num_full_attention_layers * per_layer)

    @property
    def prefill_attention_flops_per_pair(self) -> float:
        """As :attr:`attention_flops_per_pair` for prefill (MLA materialises K and V)."""
        return float(self.num_full_attention_layers * self.counts.pair_flops_per_layer_prefill)
