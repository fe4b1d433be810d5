"""Models given as a Hugging Face config.json: the same sizes as the catalogue entry built from
the same file, and a missing field named with the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from sim.catalogue import get_model
from sim.errors import CatalogueError
from sim.hf_config import spec_from_config
from specsim.cli import app

# The fields of the published config.json files the catalogue entries were written from.
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3",
    "first_k_dense_replace": 3,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 129280,
    "tie_word_embeddings": False,
    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
}
GPT_OSS_20B = {
    "model_type": "gpt_oss",
    "num_hidden_layers": 24,
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "num_local_experts": 32,
    "experts_per_token": 4,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "vocab_size": 201088,
    "attention_bias": True,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 12,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
}

#: Qwen/Qwen3-Next-80B-A3B-Instruct config.json (the keys the sizes depend on).
QWEN3_NEXT = {
    "model_type": "qwen3_next",
    "num_hidden_layers": 48,
    "hidden_size": 2048,
    "intermediate_size": 5120,
    "moe_intermediate_size": 512,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "shared_expert_intermediate_size": 512,
    "decoder_sparse_step": 1,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "vocab_size": 151936,
    "full_attention_interval": 4,
    "linear_num_key_heads": 16,
    "linear_key_head_dim": 128,
    "linear_num_value_heads": 32,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "max_position_embeddings": 262144,
    "tie_word_embeddings": False,
}


def _write(tmp_path: Path, config: dict[str, Any]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize(
    ("config", "name"), [(DEEPSEEK_V3, "deepseek-v3"), (GPT_OSS_20B, "gpt-oss-20b")]
)
def test_a_config_gives_the_catalogue_entry_sizes(
    tmp_path: Path, config: dict[str, Any], name: str
) -> None:
    model = get_model(spec_from_config(_write(tmp_path, config)))
    reference = get_model(name)
    assert model.total_params == reference.total_params
    assert model.active_linear_params == reference.active_linear_params
    assert model.kv_bytes_per_token == reference.kv_bytes_per_token
    assert model.window_kv_bytes_per_token == reference.window_kv_bytes_per_token
    assert model.spec.num_mtp_modules == reference.spec.num_mtp_modules


def test_a_qwen3_next_config_gives_its_hybrid_layers(tmp_path: Path) -> None:
    model = get_model(spec_from_config(_write(tmp_path, QWEN3_NEXT)))
    reference = get_model("qwen3-next-80b-a3b")
    assert model.num_linear_layers == reference.num_linear_layers == 36
    assert model.total_params == reference.total_params
    assert model.kv_bytes_per_token == reference.kv_bytes_per_token
    assert model.linear_state_bytes_per_seq == reference.linear_state_bytes_per_seq
    missing = {k: v for k, v in QWEN3_NEXT.items() if k != "linear_value_head_dim"}
    path = _write(tmp_path, missing)
    with pytest.raises(CatalogueError, match=f"{path}.*'linear_value_head_dim'"):
        spec_from_config(path)


@pytest.mark.parametrize("missing", ["num_hidden_layers", "vocab_size", "qk_rope_head_dim"])
def test_a_missing_field_is_named_with_the_file(tmp_path: Path, missing: str) -> None:
    config = {k: v for k, v in DEEPSEEK_V3.items() if k != missing}
    path = _write(tmp_path, config)
    with pytest.raises(CatalogueError, match=f"{path}.*'{missing}'"):
        spec_from_config(path)


def test_bad_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{\n  "hidden_size": 1,\n  oops\n}')
    with pytest.raises(CatalogueError, match=r"config\.json:3"):
        spec_from_config(path)


def test_cli_runs_a_config_path_and_refuses_an_incomplete_one(tmp_path: Path) -> None:
    config = dict(GPT_OSS_20B)
    _write(tmp_path, config)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        yaml.safe_dump(
            {
                "model": "config.json",
                "precision": {"weights": "mxfp4"},
                "workload": {"num_requests": 4},
            }
        )
    )
    ok = CliRunner().invoke(app, ["run", str(scenario), "--out", str(tmp_path / "ok")])
    assert ok.exit_code == 0, ok.output
    del config["num_attention_heads"]
    _write(tmp_path, config)
    bad = CliRunner().invoke(app, ["run", str(scenario), "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2
    assert "num_attention_heads" in bad.output and "Traceback" not in bad.output


#: meta-llama/Llama-4-Scout-17B-16E-Instruct config.json: its text_config's keys the sizes depend
#: on (no_rope_layers as published: every 4th layer NoPE, i.e. global), with the wrapper's
#: top-level tie_word_embeddings.
SCOUT_TEXT = {
    "model_type": "llama4_text",
    "attention_bias": False,
    "attention_chunk_size": 8192,
    "head_dim": 128,
    "hidden_size": 5120,
    "interleave_moe_layer_step": 1,
    "intermediate_size": 8192,
    "intermediate_size_mlp": 16384,
    "max_position_embeddings": 10485760,
    "moe_layers": list(range(48)),
    "no_rope_layers": [1, 1, 1, 0] * 12,
    "num_attention_heads": 40,
    "num_experts_per_tok": 1,
    "num_hidden_layers": 48,
    "num_key_value_heads": 8,
    "num_local_experts": 16,
    "use_qk_norm": True,
    "vocab_size": 202048,
}
#: meta-llama/Llama-4-Maverick-17B-128E-Instruct config.json text_config: MoE on every other
#: layer (dense layers of intermediate_size_mlp between), 128 experts, no query/key norm, and no
#: no_rope_layers (transformers derives them: every 4th layer NoPE).
MAVERICK_TEXT = {
    **{k: v for k, v in SCOUT_TEXT.items() if k not in ("moe_layers", "no_rope_layers")},
    "interleave_moe_layer_step": 2,
    "moe_layers": list(range(1, 48, 2)),
    "max_position_embeddings": 1048576,
    "num_local_experts": 128,
    "use_qk_norm": False,
}
#: The fields in which a config.json and the catalogue entry of the same checkpoint may differ:
#: what the entry is called and where it was read, not what the model is.
IDENTITY_FIELDS = ("name", "source", "hf_id")


def _llama4(text: dict[str, Any]) -> dict[str, Any]:
    return {"model_type": "llama4", "tie_word_embeddings": False, "text_config": text}


@pytest.mark.parametrize(
    ("text", "name"), [(SCOUT_TEXT, "llama-4-scout"), (MAVERICK_TEXT, "llama-4-maverick")]
)
def test_a_llama4_config_gives_the_catalogue_entry_field_by_field(
    tmp_path: Path, text: dict[str, Any], name: str
) -> None:
    """Every architecture field equal, the chunked-local layers included: 36 of 48 layers attend
    within chunks of attention_chunk_size (3 in 4 are RoPE layers), the 12 NoPE layers globally.
    use_qk_norm is true in Scout's file but its norm (Llama4TextL2Norm) has no weight, so the
    catalogue's qk_norm false (no 2·head_dim parameters a layer) is what the file means."""
    spec = spec_from_config(_write(tmp_path, _llama4(text)))
    reference = get_model(name).spec
    mine, theirs = spec.model_dump(), reference.model_dump()
    differ = {key for key in mine if mine[key] != theirs[key]}
    assert differ <= set(IDENTITY_FIELDS), {k: (mine[k], theirs[k]) for k in differ}
    assert spec.chunked_local_attention and spec.num_sliding_window_layers == 36
    model, catalogue = get_model(spec), get_model(name)
    assert model.kv_bytes_per_token == catalogue.kv_bytes_per_token
    assert model.window_kv_bytes_per_token == catalogue.window_kv_bytes_per_token
    assert model.total_params == catalogue.total_params


@pytest.mark.parametrize(
    "layout",
    [
        {"no_rope_layers": []},  # empty: transformers derives it from no_rope_layer_interval 4
        {"no_rope_layer_interval": 4},
        {"layer_types": (["chunked_attention"] * 3 + ["full_attention"]) * 12},
    ],
)
def test_the_chunked_layers_are_read_as_transformers_derives_them(
    tmp_path: Path, layout: dict[str, Any]
) -> None:
    text = {k: v for k, v in SCOUT_TEXT.items() if k != "no_rope_layers"}
    spec = spec_from_config(_write(tmp_path, _llama4(text | layout)))
    assert (spec.num_sliding_window_layers, spec.sliding_window) == (36, 8192)


def test_a_null_chunk_size_makes_every_layer_global(tmp_path: Path) -> None:
    # transformers types it int | None; vLLM chunks a layer only when it is set.
    spec = spec_from_config(_write(tmp_path, _llama4(SCOUT_TEXT | {"attention_chunk_size": None})))
    assert not spec.chunked_local_attention and spec.num_sliding_window_layers == 0
    # Every layer's KV is then per context token: the catalogue's 12 global layers and 36 chunked.
    full, chunked = get_model(spec), get_model("llama-4-scout")
    assert full.kv_bytes_per_token == chunked.kv_bytes_per_token + chunked.window_kv_bytes_per_token
    assert full.kv_bytes_per_token == 4 * chunked.kv_bytes_per_token


@pytest.mark.parametrize(
    "missing",
    ["attention_chunk_size", "num_local_experts", "num_experts_per_tok", "intermediate_size"],
)
def test_a_llama4_config_missing_a_field_is_named_with_the_file(
    tmp_path: Path, missing: str
) -> None:
    text = {k: v for k, v in SCOUT_TEXT.items() if k != missing}
    path = _write(tmp_path, _llama4(text))
    with pytest.raises(CatalogueError, match=f"{path}.*'{missing}'"):
        spec_from_config(path)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"moe_layers": [0, 5, 9]}, "moe_layers"),
        ({"no_rope_layers": [1, 0]}, "no_rope_layers"),
        ({"intermediate_size_mlp": None}, "intermediate_size_mlp"),
    ],
)
def test_a_llama4_layout_that_cannot_be_modelled_is_named(
    tmp_path: Path, change: dict[str, Any], named: str
) -> None:
    path = _write(tmp_path, _llama4(MAVERICK_TEXT | change))
    with pytest.raises(CatalogueError, match=f"{path}.*{named}"):
        spec_from_config(path)


def test_cli_refuses_a_llama4_config_without_its_chunk_size(tmp_path: Path) -> None:
    text = {k: v for k, v in SCOUT_TEXT.items() if k != "attention_chunk_size"}
    _write(tmp_path, _llama4(text))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({"model": "config.json", "workload": {"num_requests": 4}}))
    bad = CliRunner().invoke(app, ["run", str(scenario), "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2
    assert "attention_chunk_size" in bad.output and "Traceback" not in bad.output
