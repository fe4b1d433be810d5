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
