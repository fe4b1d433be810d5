"""A model given as a Hugging Face ``config.json`` on disk (read locally, never downloaded).

The keys are those of the ``transformers`` configuration classes of each family: Llama/Qwen/
Mistral (``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``),
their MoE variants (``num_local_experts`` Mixtral/gpt-oss, ``num_experts`` Qwen-MoE,
``n_routed_experts`` DeepSeek/GLM, ``num_experts_per_tok``/``experts_per_token``,
``moe_intermediate_size``, ``n_shared_experts``, ``shared_expert_intermediate_size``,
``first_k_dense_replace``, ``interleave_moe_layer_step``), DeepSeek's MLA (``kv_lora_rank``,
``q_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``), gpt-oss's
``sliding_window`` with ``layer_types``, Qwen3-Next's Gated DeltaNet layers (``layer_types``
``linear_attention`` or ``full_attention_interval``, ``linear_num_key_heads``,
``linear_key_head_dim``, ``linear_num_value_heads``, ``linear_value_head_dim``,
``linear_conv_kernel_dim``) and gated attention, and MTP modules (``num_nextn_predict_layers``).
A multimodal config (Llama-4) is read from its ``text_config``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sim.catalogue import ModelSpec
from sim.errors import CatalogueError

#: Keys every config must have (the error names the first missing one).
REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")


def resolve_model(model: str | ModelSpec, base_dir: Path) -> str | ModelSpec:
    """A scenario's ``model``: a config.json path (relative to ``base_dir``) becomes its
    :class:`ModelSpec`; a catalogue name or inline spec is returned as it is.

    Raise CatalogueError as :func:`spec_from_config`.
    """
    if isinstance(model, str) and model.endswith(".json"):
        path = Path(model)
        return spec_from_config(path if path.is_absolute() else base_dir / path)
    return model


def _first(config: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return None


#: Model types whose attention normalises queries and keys (transformers' Qwen3 families).
QK_NORM_TYPES = ("qwen3", "qwen3_moe", "qwen3_next")
#: Keys a config with Gated DeltaNet layers must have (transformers ``Qwen3NextConfig``).
LINEAR_KEYS = (
    "linear_num_key_heads",
    "linear_key_head_dim",
    "linear_num_value_heads",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)


def _linear_attention(c: dict[str, Any], path: Path, layer_types: list[str]) -> dict[str, Any]:
    """Qwen3-Next's hybrid layers: how many are linear, their geometry, the output gate."""
    layers = int(c["num_hidden_layers"])
    if layer_types:
        linear = sum(1 for t in layer_types if t == "linear_attention")
    elif c.get("full_attention_interval"):
        linear = layers - layers // int(c["full_attention_interval"])
    else:
        linear = 0
    gate = bool(c.get("attn_output_gate") or c.get("model_type") == "qwen3_next")
    if not linear:
        return {"attention_output_gate": gate}
    for key in LINEAR_KEYS:
        if c.get(key) is None:
            raise CatalogueError(f"model: {path}: config.json has no field {key!r}")
    return {
        "attention_output_gate": gate,
        "num_linear_attention_layers": linear,
        **{key: c[key] for key in LINEAR_KEYS},
    }


def spec_from_config(path: Path) -> ModelSpec:
    """The :class:`ModelSpec` a ``config.json`` describes.

    Raise CatalogueError naming the file and the missing or bad field.
    """
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CatalogueError(f"model: cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise CatalogueError(f"model: {path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(document, dict):
        raise CatalogueError(f"model: {path}: expected a JSON object")
    c: dict[str, Any] = document.get("text_config") or document
    for key in REQUIRED:
        if c.get(key) is None:
            raise CatalogueError(f"model: {path}: config.json has no field {key!r}")
    heads = int(c["num_attention_heads"])
    experts = _first(c, "num_local_experts", "n_routed_experts", "num_experts") or 1
    moe_width = c.get("moe_intermediate_size")
    dense_width = _first(c, "intermediate_size_mlp", "intermediate_size") or moe_width
    if dense_width is None:
        raise CatalogueError(f"model: {path}: config.json has no field 'intermediate_size'")
    fields: dict[str, Any] = {
        "name": c.get("_name_or_path") or path.parent.name or "config",
        "source": f"Hugging Face config.json at {path}",
        "num_layers": c["num_hidden_layers"],
        "hidden_size": c["hidden_size"],
        "intermediate_size": dense_width,
        "num_heads": heads,
        "num_kv_heads": _first(c, "num_key_value_heads") or heads,
        "head_dim": _first(c, "head_dim") or int(c["hidden_size"]) // heads,
        "vocab_size": c["vocab_size"],
        "tied_embeddings": bool(c.get("tie_word_embeddings", False)),
        "qkv_bias": bool(_first(c, "attention_bias", "qkv_bias") or False),
        "qk_norm": bool(c.get("use_qk_norm") or c.get("model_type") in QK_NORM_TYPES),
        "max_context_tokens": c.get("max_position_embeddings") or 131072,
        "num_mtp_modules": c.get("num_nextn_predict_layers") or 0,
    }
    if experts > 1:
        fields |= {
            "num_experts": experts,
            "experts_per_token": _first(c, "num_experts_per_tok", "experts_per_token") or 1,
            "moe_intermediate_size": moe_width,
            "num_shared_experts": _first(c, "n_shared_experts")
            or (1 if c.get("shared_expert_intermediate_size") else 0),
            "shared_expert_intermediate_size": c.get("shared_expert_intermediate_size"),
            "num_dense_layers": c.get("first_k_dense_replace") or 0,
            "moe_layer_step": _first(c, "interleave_moe_layer_step", "decoder_sparse_step") or 1,
        }
        if c.get("model_type", "").startswith("llama4"):
            fields["num_shared_experts"] = 1
            fields["moe_intermediate_size"] = c.get("intermediate_size")
    if c.get("kv_lora_rank") is not None:
        for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            if c.get(key) is None:
                raise CatalogueError(f"model: {path}: config.json has no field {key!r}")
        fields |= {
            "attention": "mla",
            "kv_lora_rank": c["kv_lora_rank"],
            "q_lora_rank": c.get("q_lora_rank"),
            "qk_nope_head_dim": c["qk_nope_head_dim"],
            "qk_rope_head_dim": c["qk_rope_head_dim"],
            "v_head_dim": c["v_head_dim"],
            "num_kv_heads": 1,
            "head_dim": int(c["kv_lora_rank"]) + int(c["qk_rope_head_dim"]),
        }
    layer_types = c.get("layer_types") or []
    sliding = sum(1 for t in layer_types if t == "sliding_attention")
    if sliding and c.get("sliding_window"):
        fields |= {"sliding_window": c["sliding_window"], "num_sliding_window_layers": sliding}
    fields["attention_sinks"] = c.get("model_type") == "gpt_oss"
    fields |= _linear_attention(c, path, layer_types)
    block = (document.get("quantization_config") or {}).get("weight_block_size")
    if block:
        fields["fp8_weight_block_size"] = int(block[0])
    try:
        return ModelSpec(**fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise CatalogueError(f"model: {path}: {key}: {first['msg']}") from None
