"""Engine presets by version: names and aliases, where each preset's drafting data come from,
and bad names refused with the list of good ones."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sim.drafting import SUPPORT, check_support
from sim.drafting.overheads import load_draft_overheads, overheads_document
from sim.engine.presets import (
    _methods,
    aliases,
    canonical_name,
    get_preset,
    known_names,
    preset_names,
)
from sim.errors import ScenarioError
from sim.scenario import validate_document
from specsim.cli import app

VERSIONED = ("vllm-v0", "vllm-v1", "sglang-0.4", "sglang-0.5")


def test_the_versioned_presets_exist() -> None:
    assert set(VERSIONED) <= set(preset_names())


def test_short_names_stand_for_the_newest_preset_of_each_engine() -> None:
    assert canonical_name("sglang") == "sglang-0.5"
    assert canonical_name("vllm") == "vllm-v1"
    assert get_preset("sglang") is get_preset("sglang-0.5")
    # vllm-v1 stays a preset in its own right, so scenarios written with it keep their meaning.
    assert canonical_name("vllm-v1") == "vllm-v1"


def test_every_alias_names_a_preset_and_no_alias_shadows_one() -> None:
    for alias, target in aliases().items():
        assert target in preset_names()
        assert alias not in preset_names()


def test_an_unknown_preset_lists_every_known_name() -> None:
    with pytest.raises(ScenarioError) as raised:
        get_preset("vllm-v9")
    message = str(raised.value)
    assert "engine.preset" in message and "'vllm-v9'" in message
    for name in known_names():
        assert name in message


def test_a_scenario_with_an_unknown_preset_names_the_key() -> None:
    with pytest.raises(ScenarioError, match=r"engine\.preset.*sglang-0\.5"):
        validate_document({"engine": {"preset": "tgi"}}, "test")


def test_cli_refuses_an_unknown_preset_with_exit_code_2(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"engine": {"preset": "sglang-9"}}), encoding="utf-8")
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "engine.preset" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_states_its_sources_and_its_drafting_rule(name: str) -> None:
    preset = get_preset(name)
    assert preset.calibration["source"]
    assert preset.versions
    assert preset.draft_overheads_from in overheads_document()["presets"]
    assert preset.draft_support_from in SUPPORT


@pytest.mark.parametrize("name", preset_names())
def test_draft_overheads_are_the_named_entry(name: str) -> None:
    source = get_preset(name).draft_overheads_from
    entry = overheads_document()["presets"][source]["eagle3"]
    assert load_draft_overheads(name, "eagle3").per_forward_s == entry.get("per_forward_s", 0.0)


def test_an_alias_and_its_preset_have_the_same_drafting_support() -> None:
    short = validate_document(
        {"engine": {"preset": "sglang"}, "speculation": {"method": "eagle2"}}, "t"
    )
    full = validate_document(
        {"engine": {"preset": "sglang-0.5"}, "speculation": {"method": "eagle2"}}, "t"
    )
    assert check_support(short) == check_support(full) == "supported"


def test_vllm_v0_ships_its_own_scheduling_defaults() -> None:
    v0, v1 = get_preset("vllm-v0"), get_preset("vllm-v1")
    assert not v0.chunked_prefill and v1.chunked_prefill
    assert v0.step_overhead_s > v1.step_overhead_s  # the V0 CPU loop the V1 rewrite removed


def test_vllm_v0_runs_only_the_chain_methods_it_shipped() -> None:
    eagle = validate_document(
        {"engine": {"preset": "vllm-v0"}, "speculation": {"method": "eagle"}}, "t"
    )
    assert check_support(eagle) == "supported"
    eagle3 = validate_document(
        {"engine": {"preset": "vllm-v0"}, "speculation": {"method": "eagle3"}}, "t"
    )
    with pytest.raises(ScenarioError, match=r"speculation\.method: vLLM V0"):
        check_support(eagle3)


def test_only_the_async_vllm_preset_schedules_one_step_ahead() -> None:
    # vLLM made async scheduling the default in 0.14.0 (the vllm-v1-async preset); vllm-v1 is
    # 0.8-0.13, synchronous. Every preset states where its value comes from.
    document = yaml.safe_load(
        (Path(__file__).parents[1] / "sim" / "data" / "engine_presets.yaml").read_text()
    )
    for name in preset_names():
        assert document["presets"][name]["async_scheduling_source"]
    assert [n for n in preset_names() if get_preset(n).async_scheduling] == ["vllm-v1-async"]


def test_only_vllm_v1_keeps_an_eagle3_heads_own_embedding() -> None:
    # vLLM V1's EAGLE proposer keeps a draft embedding that differs from the target's; SGLang
    # sets the target's; V0 and llama.cpp run no EAGLE-3. Every preset states its source.
    document = yaml.safe_load(
        (Path(__file__).parents[1] / "sim" / "data" / "engine_presets.yaml").read_text()
    )
    for name in preset_names():
        assert document["presets"][name]["draft_keeps_own_embedding_source"]
    keeps = [n for n in preset_names() if get_preset(n).draft_keeps_own_embedding]
    assert keeps == ["vllm-v1", "vllm-v1-async"]


def test_async_scheduling_follows_the_method_and_the_scenario() -> None:
    from sim.node_settings import resolve_engine

    def resolved(**engine: object) -> bool:
        speculation = engine.pop("speculation", {"method": "none"})
        doc = {"engine": {"preset": "vllm-v1-async", **engine}, "speculation": speculation}
        return resolve_engine(validate_document(doc, "t")).async_scheduling

    assert resolved()
    assert resolved(speculation={"method": "eagle3", "num_speculative_tokens": 3})
    # vLLM PR #31998: async scheduling stays off for draft models, n-gram, Medusa, lookahead.
    assert not resolved(speculation={"method": "ngram", "num_speculative_tokens": 3})
    assert not resolved(async_scheduling=False)
    doc = {"engine": {"preset": "vllm-v1", "async_scheduling": True}}
    assert resolve_engine(validate_document(doc, "t")).async_scheduling


def test_tree_kernel_rules_are_sourced_preset_fields() -> None:
    # Whether a tree is verified with a custom mask and drafted with per-node prefix reads is
    # stated per preset with its source; SGLang 0.4 is the engine whose tree path was read
    # doing both (FlashInfer's custom-mask kernel, generate_draft_decode_kv_indices).
    document = yaml.safe_load(
        (Path(__file__).parents[1] / "sim" / "data" / "engine_presets.yaml").read_text()
    )
    for name in preset_names():
        assert document["presets"][name]["tree_verify_custom_mask_source"]
        assert document["presets"][name]["tree_draft_per_node_prefix_reads_source"]
    masked = [n for n in preset_names() if get_preset(n).tree_verify_custom_mask]
    per_node = [n for n in preset_names() if get_preset(n).tree_draft_per_node_prefix_reads]
    assert masked == per_node == ["sglang-0.4"]


def test_kv_reserve_rules_are_sourced_preset_fields() -> None:
    # Which drafters hold vLLM V1's lookahead slots and whether chunked-local layers keep their
    # KV like full layers are stated per preset with their sources: the vLLM V1 presets reserve
    # for the EAGLE family (and draft models from 0.14), and only vLLM keeps chunked layers full.
    document = yaml.safe_load(
        (Path(__file__).parents[1] / "sim" / "data" / "engine_presets.yaml").read_text()
    )
    for name in preset_names():
        assert document["presets"][name]["lookahead_slot_methods_source"]
        assert document["presets"][name]["chunked_local_as_full_attention_source"]
        assert document["presets"][name]["hidden_state_drafter_drops_last_cached_block_source"]
    reserving = {n: get_preset(n).lookahead_slot_methods for n in preset_names()}
    assert {n for n, methods in reserving.items() if methods} == {"vllm-v1", "vllm-v1-async"}
    assert "draft_model" in reserving["vllm-v1-async"]
    assert "draft_model" not in reserving["vllm-v1"]
    full = [n for n in preset_names() if get_preset(n).chunked_local_as_full_attention]
    assert full == ["vllm-v0", "vllm-v1", "vllm-v1-async"]
    dropping = [
        n for n in preset_names() if get_preset(n).hidden_state_drafter_drops_last_cached_block
    ]
    assert dropping == ["vllm-v1", "vllm-v1-async"]


def test_a_preset_entry_naming_an_unknown_drafter_is_refused() -> None:
    with pytest.raises(ScenarioError, match=r"presets\.x\.lookahead_slot_methods"):
        _methods("x", {"lookahead_slot_methods": ["eagle", "warp-drive"]}, "lookahead_slot_methods")
