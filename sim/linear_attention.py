"""Gated DeltaNet linear-attention layers (Qwen3-Next): parameters, per-sequence state, its traffic.

Qwen3-Next (Qwen/Qwen3-Next-80B-A3B model card and ``config.json``: ``layer_types`` of three
``linear_attention`` layers to one ``full_attention``, ``full_attention_interval`` 4) replaces
three of every four attention layers with Gated DeltaNet (Yang, Kautz & Hatamizadeh,
arXiv:2412.06464). As ``transformers``' ``Qwen3NextGatedDeltaNet`` builds one such layer with
``n_k`` key heads of ``d_k`` and ``n_v`` value heads of ``d_v``:

* ``in_proj_qkvz``: ``H → 2·n_k·d_k + 2·n_v·d_v`` (queries, keys, values and the output gate);
* ``in_proj_ba``: ``H → 2·n_v`` (the delta rule's β and the decay's α per value head);
* a depthwise causal ``conv1d`` over the ``2·n_k·d_k + n_v·d_v`` q/k/v channels, ``kernel``
  taps each; ``out_proj``: ``n_v·d_v → H``; a gated RMSNorm of ``d_v``; ``A_log`` and
  ``dt_bias`` of ``n_v`` each.

A linear layer keeps no KV cache. Each sequence holds, per layer, the recurrent state of
``n_v × d_v × d_k`` elements and the convolution's last ``kernel − 1`` inputs of every channel
(vLLM ``MambaStateShapeCalculator.gated_delta_net_state_shape``), in the model's dtype unless
``mamba_ssm_cache_dtype`` says otherwise (vLLM ``MambaStateDtypeCalculator``, default
``auto``: bf16 here). Both are split over TP by heads and channels. A decode step reads and
writes each running sequence's state once per linear layer (the fused recurrent delta-rule
kernel loads ``h0`` and stores ``ht``), ``2 × state`` bytes per sequence and step; the
per-token FLOPs of the recurrence (``~6·d_k·d_v`` per value head) are small beside the layer's
projections, which the linear-layer terms already price.
"""

from __future__ import annotations

from typing import Any

from sim.errors import CatalogueError

#: Bytes per state element: vLLM keeps the state in the model's dtype by default (bf16).
STATE_BYTES_PER_ELEMENT = 2.0


def _need(spec: Any, key: str) -> int:
    value = getattr(spec, key)
    if value is None:
        raise CatalogueError(f"model {spec.name}: linear-attention layers need {key}")
    return int(value)


def gdn_shape(spec: Any) -> tuple[int, int, int, int, int]:
    """``(n_k, d_k, n_v, d_v, kernel)`` of a spec's Gated DeltaNet layers.
    Raise CatalogueError naming the model and the missing field."""
    return (
        _need(spec, "linear_num_key_heads"),
        _need(spec, "linear_key_head_dim"),
        _need(spec, "linear_num_value_heads"),
        _need(spec, "linear_value_head_dim"),
        _need(spec, "linear_conv_kernel_dim"),
    )


def gdn_layer_params(spec: Any) -> int:
    """Parameters of one Gated DeltaNet layer's token mixer (module docstring)."""
    h = spec.hidden_size
    n_k, d_k, n_v, d_v, kernel = gdn_shape(spec)
    qkvz = h * (2 * n_k * d_k + 2 * n_v * d_v)
    ba = h * 2 * n_v
    conv = (2 * n_k * d_k + n_v * d_v) * kernel
    out = n_v * d_v * h
    return qkvz + ba + conv + out + d_v + 2 * n_v


def gdn_state_elements(spec: Any) -> int:
    """State elements one sequence keeps per Gated DeltaNet layer: the recurrent
    ``n_v·d_v·d_k`` and the convolution's ``(2·n_k·d_k + n_v·d_v)·(kernel − 1)``."""
    n_k, d_k, n_v, d_v, kernel = gdn_shape(spec)
    return n_v * d_v * d_k + (2 * n_k * d_k + n_v * d_v) * (kernel - 1)


def state_shards(spec: Any, tp: int) -> int:
    """Ranks the state is split over: TP, up to the value heads."""
    return max(1, min(tp, int(spec.linear_num_value_heads or 1)))


def state_reserve_bytes(model: Any, tp: int, dp: int, max_num_seqs: int) -> float:
    """Per-GPU memory the linear-attention states take: one state per sequence slot of the
    group's ``max_num_seqs / dp``, split over :func:`state_shards` (vLLM allocates the state per
    running request, beside the KV pages)."""
    if not model.num_linear_layers:
        return 0.0
    seqs = max_num_seqs / dp
    return float(seqs * model.linear_state_bytes_per_seq / state_shards(model.spec, tp))


def state_s_per_seq(model: Any, bandwidth_bytes_per_s: float, tp: int) -> float:
    """Seconds per running sequence a step spends reading and writing its linear-attention
    state, ``2·state / (shards·BW)`` at the achieved bandwidth ``bandwidth_bytes_per_s`` of one
    GPU; 0 for a model without linear layers."""
    if not model.num_linear_layers:
        return 0.0
    shards = state_shards(model.spec, tp)
    return 2.0 * model.linear_state_bytes_per_seq / (shards * bandwidth_bytes_per_s)
