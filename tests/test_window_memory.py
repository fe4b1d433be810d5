"""Sliding-window KV sizing: SGLang's hybrid pool (a window pool of ``ratio`` x the full pool's
tokens, sgl-project/sglang pool_configurator.py HybridSWAPoolConfigurator) against vLLM's fixed
reserve per sequence slot, checked by hand on gpt-oss-120b (MXFP4) on one H100."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.build import _window_pool_seq_limit
from sim.catalogue import get_gpu, get_model
from sim.engine import presets as presets_module
from sim.engine.memory import GIB, plan_memory, window_pool_max_seqs
from sim.engine.presets import get_preset
from sim.errors import CatalogueError, ScenarioError
from sim.parallel import Layout, window_kv_reserve_bytes
from sim.run import build_simulation
from sim.scenario import validate_document

GPT_OSS = get_model("gpt-oss-120b").with_precision("mxfp4", "bf16")
H100 = get_gpu("h100-sxm")
SGLANG = get_preset("sglang-0.5")

# gpt-oss-120b config.json: 36 layers alternating sliding (window 128) and full attention,
# 8 KV heads of 64; a bf16 cache keeps K and V: 2 x 8 x 64 x 2 bytes = 2,048 B per layer-token.
LAYER_TOKEN_BYTES = 2 * 8 * 64 * 2
FULL_BYTES = 18 * LAYER_TOKEN_BYTES  # 36,864 B
WINDOW_BYTES = 18 * LAYER_TOKEN_BYTES  # 36,864 B
RATIO = 0.8  # sgl-project/sglang server_args.py: swa_full_tokens_ratio = 0.8
LLAMA_PLAN = plan_memory(get_model("llama-3.1-8b"), H100, 1, 0.9, 1, 8192, 256, float(GIB))


def _scenario(preset: str, **extra: Any) -> Any:
    document = {
        "model": "gpt-oss-120b",
        "precision": {"weights": "mxfp4"},
        "hardware": {"gpu": "h100-sxm", "num_gpus": 1},
        "engine": {"preset": preset},
        "workload": {"num_requests": 8},
        **extra,
    }
    return validate_document(document, "test")


def test_sglang_preset_carries_the_published_ratio() -> None:
    assert SGLANG.swa_full_tokens_ratio == RATIO
    # vLLM keeps its own rule (a reserve per sequence slot): no ratio.
    assert get_preset("vllm-v1").swa_full_tokens_ratio is None


def test_gpt_oss_120b_on_one_h100_under_sglang_by_hand() -> None:
    """The budget arithmetic with the source's numbers: each full-pool token costs the 18 full
    layers' 36,864 B plus 0.8 x the 18 window layers' 36,864 B = 66,355.2 B; the window pool holds
    0.8 x the full pool's tokens; nothing is reserved per sequence slot."""
    assert GPT_OSS.kv_bytes_per_token == FULL_BYTES
    assert GPT_OSS.window_kv_bytes_per_token == WINDOW_BYTES
    sim = build_simulation(_scenario("sglang-0.5"), Path.cwd())
    plan = sim.memory
    per_token = FULL_BYTES + RATIO * WINDOW_BYTES
    assert plan.kv_bytes_per_token == pytest.approx(66355.2)
    assert plan.kv_bytes_per_token == pytest.approx(per_token)
    usable = 0.88 * 80 * GIB  # mem_fraction_static 0.88 of an 80 GiB H100
    assert plan.usable_bytes == pytest.approx(usable)
    # Only the engine's own 1 GiB is reserved: no 2,048 x 128-token window reserve.
    assert plan.reserved_bytes == SGLANG.reserved_memory_bytes == GIB
    budget = usable - plan.weight_bytes - plan.activation_bytes - GIB
    assert plan.kv_budget_bytes == pytest.approx(budget)
    assert plan.num_blocks == int(budget // per_token)
    assert plan.window_kv_tokens == int(plan.num_kv_tokens * RATIO)
    # ~8.1 GiB of KV: some 131,700 full-pool tokens, ~105,300 in the window pool.
    assert 125_000 < plan.num_kv_tokens < 140_000


def test_the_old_reserve_is_what_refused_the_rows() -> None:
    """vLLM's rule, applied to the SGLang preset's 2,048 slots, reserves 2,048 x 128 x 36,864 B
    = 9.0 GiB: more than the ~8.1 GiB left, hence the refusal the hybrid pool removes."""
    reserve = window_kv_reserve_bytes(GPT_OSS, Layout(1), SGLANG.max_num_seqs)
    assert reserve == 2048 * 128 * WINDOW_BYTES
    assert reserve / GIB == pytest.approx(9.0)
    sim = build_simulation(_scenario("sglang-0.5"), Path.cwd())
    assert sim.memory.kv_budget_bytes < reserve


def test_vllm_keeps_its_window_reserve() -> None:
    sim = build_simulation(
        _scenario("vllm-v1", hardware={"gpu": "h100-sxm", "num_gpus": 2}), Path.cwd()
    )
    engine = sim.engine
    reserve = window_kv_reserve_bytes(GPT_OSS, Layout(2), engine.max_num_seqs)
    assert sim.memory.reserved_bytes == engine.reserved_memory_bytes + reserve
    assert sim.memory.window_kv_tokens == 0
    assert sim.core.scheduler.config.max_num_seqs == engine.max_num_seqs


def test_a_model_without_windows_keeps_a_bit_equal_plan() -> None:
    model = get_model("llama-3.1-8b")
    args = (model, H100, 1, 0.88, 1, 8192, 2048, float(GIB))
    assert model.window_kv_bytes_per_token == 0.0
    assert plan_memory(*args, window_pool_ratio=RATIO) == plan_memory(*args)
    document = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"}}
    sim = build_simulation(
        validate_document({**document, "engine": {"preset": "sglang-0.5"}}, "t"), Path.cwd()
    )
    engine = sim.engine
    assert sim.memory == plan_memory(
        model,
        H100,
        1,
        engine.gpu_memory_utilization,
        engine.block_size,
        engine.max_num_batched_tokens,
        engine.max_num_seqs,
        engine.reserved_memory_bytes,
    )
    assert sim.core.scheduler.config.max_num_seqs == engine.max_num_seqs


def test_window_pool_bounds_the_running_sequences() -> None:
    """Without speculation each running sequence keeps its 128-token window, the step's token and
    a page: (window tokens - one 8,192-token prefill chunk) // 130 sequences at most."""
    sim = build_simulation(_scenario("sglang-0.5"), Path.cwd())
    plan = sim.memory
    expected = (plan.window_kv_tokens - 8192) // (128 + 1 + 1)
    assert window_pool_max_seqs(plan, 128, 8192, 0) == expected
    assert sim.core.scheduler.config.max_num_seqs == min(SGLANG.max_num_seqs, expected)
    # Hundreds of sequences: the rows' batches (1-64) never meet this bound.
    assert 700 < expected < 800


@given(
    tokens=st.integers(0, 10**6),
    window=st.integers(1, 8192),
    chunk=st.integers(1, 16384),
    lookahead=st.integers(0, 16),
)
def test_window_pool_bound_fits_the_pool(
    tokens: int, window: int, chunk: int, lookahead: int
) -> None:
    plan = replace(LLAMA_PLAN, window_kv_tokens=tokens)
    limit = window_pool_max_seqs(plan, window, chunk, lookahead)
    if tokens == 0:
        assert limit is None
        return
    assert limit is not None
    per_seq = window + 1 + lookahead + 1
    if tokens < per_seq:
        assert limit == 0  # not one window fits: SGLang refuses to start
        return
    # At least one sequence; beyond one, the bound's sequences and a whole chunk fit and one more
    # sequence would not.
    assert limit >= 1
    if limit > 1:
        assert limit * per_seq + chunk <= tokens < (limit + 1) * per_seq + chunk


def test_refusals_still_name_the_key() -> None:
    too_little = {"preset": "sglang-0.5", "gpu_memory_utilization": 0.75}
    with pytest.raises(CatalogueError, match=r"^engine\.gpu_memory_utilization: gpt-oss-120b"):
        build_simulation(_scenario("sglang-0.5", engine=too_little), Path.cwd())
    # A window pool smaller than one window (130 tokens here) is refused with the key to change.
    tiny = replace(LLAMA_PLAN, window_kv_tokens=100)
    with pytest.raises(
        CatalogueError, match=r"^engine\.gpu_memory_utilization: the sliding-window"
    ):
        _window_pool_seq_limit(GPT_OSS, tiny, SGLANG, 0)


def test_a_bad_preset_ratio_is_refused_by_key() -> None:
    for value in (0, 1.5, -0.2, "0.8", True):
        entry = {"swa_full_tokens_ratio": value, "swa_full_tokens_ratio_source": "x"}
        with pytest.raises(ScenarioError, match=r"presets\.p\.swa_full_tokens_ratio: expected"):
            presets_module._window_ratio("p", entry)
    with pytest.raises(ScenarioError, match=r"swa_full_tokens_ratio_source: missing"):
        presets_module._window_ratio("p", {"swa_full_tokens_ratio": 0.5})
