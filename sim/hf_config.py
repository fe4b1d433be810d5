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
A multimodal config (Llama-4) is read from its ``text_config``, with the wrapper's own keys
(``tie_word_embeddings``, ``quantization_config``) read from the top level.

Llama-4 (``model_type`` ``llama4``/``llama4_text``) is read as transformers' ``Llama4TextConfig``
defines its keys (``models/llama4/configuration_llama4.py``): every layer whose ``no_rope_layers``
entry is 1 (by default all but every ``no_rope_layer_interval``-th, 4) attends within chunks of
``attention_chunk_size`` tokens (``layer_types`` ``chunked_attention``), the others (NoPE) attend
globally; the MoE layers are every ``interleave_moe_layer_step``-th (``moe_layers``), each with
``num_local_experts`` routed experts and one shared expert of ``intermediate_size``, the other
layers a dense MLP of ``intermediate_size_mlp``; its ``use_qk_norm`` is a weightless L2 norm
(``Llama4TextL2Norm``), so it adds no parameters.
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


#: Keys a Llama-4 config must have. transformers' ``Llama4TextConfig`` gives each a default, but
#: each sets the model's size or its KV, so none is assumed (``attention_chunk_size: null`` is
#: given: every layer attends globally).
LLAMA4_KEYS = ("num_local_experts", "num_experts_per_tok", "intermediate_size")


def _is_llama4(document: dict[str, Any], c: dict[str, Any]) -> bool:
    return any(str(d.get("model_type") or "").startswith("llama4") for d in (document, c))


def _layer_list(c: dict[str, Any], path: Path, key: str, layers: int) -> list[Any] | None:
    """``c[key]`` as a list of one entry per layer; None when absent or empty (transformers then
    derives it). Raise CatalogueError if it is not one entry per layer."""
    value = c.get(key)
    if not value:
        return None
    if not isinstance(value, list) or len(value) != layers:
        raise CatalogueError(
            f"model: {path}: {key}: expected one entry per layer ({layers}), got {value!r}"
        )
    return value


def _llama4_moe_step(c: dict[str, Any], path: Path, layers: int) -> int:
    """The MoE interleave: ``interleave_moe_layer_step``, checked against ``moe_layers`` when
    both are given (transformers: ``moe_layers`` defaults to every step-th layer, 0-based
    ``range(step - 1, layers, step)``, which is what :mod:`sim.architecture` counts)."""
    given = c.get("interleave_moe_layer_step")
    moe_layers: list[Any] = c.get("moe_layers") or []
    if not isinstance(moe_layers, list) or not all(isinstance(i, int) for i in moe_layers):
        raise CatalogueError(f"model: {path}: moe_layers: expected a list of layer indices")
    if given is None and not moe_layers:
        raise CatalogueError(f"model: {path}: config.json has no field 'interleave_moe_layer_step'")
    step = int(given) if given is not None else moe_layers[0] + 1
    if step < 1:
        raise CatalogueError(f"model: {path}: interleave_moe_layer_step: must be >= 1, got {step}")
    if moe_layers and moe_layers != list(range(step - 1, layers, step)):
        raise CatalogueError(
            f"model: {path}: moe_layers: only every interleave_moe_layer_step-th layer "
            f"({step}) as a MoE layer is modelled, got {moe_layers!r}"
        )
    return step


def _llama4(c: dict[str, Any], path: Path) -> dict[str, Any]:
    """The fields of a Llama-4 text config (module docstring) that the generic reading gets
    wrong or leaves out: the chunked-local layers, the MoE interleave and widths, the shared
    expert, and the weightless query/key norm."""
    for key in LLAMA4_KEYS:
        if c.get(key) is None:
            raise CatalogueError(f"model: {path}: config.json has no field {key!r}")
    if "attention_chunk_size" not in c:
        raise CatalogueError(f"model: {path}: config.json has no field 'attention_chunk_size'")
    layers = int(c["num_hidden_layers"])
    step = _llama4_moe_step(c, path, layers)
    dense_width = c.get("intermediate_size_mlp")
    if dense_width is None and step > 1:
        raise CatalogueError(f"model: {path}: config.json has no field 'intermediate_size_mlp'")
    fields: dict[str, Any] = {
        "num_experts": c["num_local_experts"],
        "experts_per_token": c["num_experts_per_tok"],
        "moe_intermediate_size": c["intermediate_size"],
        # Llama4TextMoe: one shared expert, a Llama4TextMLP of intermediate_size.
        "num_shared_experts": 1,
        "shared_expert_intermediate_size": None,
        "num_dense_layers": 0,
        "moe_layer_step": step,
        # No dense layer when every layer is MoE (Scout): the width is then read by nothing.
        "intermediate_size": dense_width or c["intermediate_size"],
        # Llama4TextL2Norm has no weight: the query/key norm adds no parameters.
        "qk_norm": False,
    }
    # Which layers attend within chunks: layer_types if given, else the RoPE layers of
    # no_rope_layers (1 = RoPE), else every layer but each no_rope_layer_interval-th.
    layer_types = _layer_list(c, path, "layer_types", layers)
    no_rope = _layer_list(c, path, "no_rope_layers", layers)
    if layer_types is not None:
        chunked = sum(1 for t in layer_types if t == "chunked_attention")
    elif no_rope is not None:
        if any(flag not in (0, 1) for flag in no_rope):
            raise CatalogueError(f"model: {path}: no_rope_layers: entries must be 0 or 1")
        chunked = sum(no_rope)
    else:
        interval = int(c.get("no_rope_layer_interval") or 4)
        chunked = sum(1 for i in range(layers) if (i + 1) % interval != 0)
    chunk = c["attention_chunk_size"]
    if chunk is not None and chunked:
        fields |= {
            "sliding_window": chunk,
            "num_sliding_window_layers": chunked,
            "chunked_local_attention": True,
        }
    return fields


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
        # A multimodal wrapper (Llama4Config) holds tie_word_embeddings at its top level.
        "tied_embeddings": bool(
            c["tie_word_embeddings"]
            if c.get("tie_word_embeddings") is not None
            else document.get("tie_word_embeddings", False)
        ),
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
    if _is_llama4(document, c):
        fields |= _llama4(c, path)
    block = (document.get("quantization_config") or {}).get("weight_block_size")
    if block:
        fields["fp8_weight_block_size"] = int(block[0])
    try:
        return ModelSpec(**fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise CatalogueError(f"model: {path}: {key}: {first['msg']}") from None
