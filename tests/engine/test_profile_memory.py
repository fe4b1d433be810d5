"""vLLM V1's KV sizing by profile run (sim/engine/memory.py, ``kv_sizing: vllm-v1-profile``).

The rule is read from vLLM 0.14.0 (gpu_worker.py ``determine_available_memory``, the sampler and
rejection sampler the profile run calls) and PyTorch's CUDA sort; nothing in it is fitted. The
checks against logged pools use the startup lines of the vLLM concurrency sweep behind
docs/validation.md (tomasruizt/vllm-scripts @ d94d714: "Model loading took", "Available KV cache
memory", "GPU KV cache size"), transcribed here with their rounding.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.catalogue import get_gpu, get_model, gpu_names
from sim.drafting.eagle3 import eagle3_networks
from sim.engine.memory import (
    GIB,
    SEGMENTED_SORT_MIN_ROWS,
    forward_activation_bytes,
    plan_memory,
    profile_peak_bytes,
    sampler_profile_peak_bytes,
    sort_bytes_per_element,
)
from sim.engine.presets import get_preset

QWEN = get_model("qwen3-32b")
H100_94 = get_gpu("h100-sxm-94gb")
V1 = get_preset("vllm-v1-async")


def _plan(head: bool, **overrides: object) -> object:
    extra_w = extra_kv = 0.0
    if head:
        first, _ = eagle3_networks(QWEN, own_embedding=True)
        extra_w, extra_kv = first.resident_bytes, first.kv_bytes_per_token
    args: dict[str, object] = {
        "gpu_memory_utilization": 0.9,
        "block_size": 16,
        "max_num_batched_tokens": 8192,
        "max_num_seqs": 1024,
        "reserved_bytes": V1.reserved_memory_bytes,
        "extra_weight_bytes": extra_w,
        "extra_kv_bytes_per_token": extra_kv,
        "kv_sizing": "vllm-v1-profile",
        "speculative": head,
    }
    args.update(overrides)
    return plan_memory(QWEN, H100_94, 1, **args)  # type: ignore[arg-type]


def test_the_v1_preset_read_at_0_14_sizes_its_pool_by_the_profile_rule() -> None:
    assert V1.kv_sizing == "vllm-v1-profile"
    # 0.8-0.13: the profile run's sampler took FlashInfer's path by default in 0.10.1.
    assert get_preset("vllm-v1").kv_sizing == "budget"
    assert get_preset("sglang-0.5").kv_sizing == "budget"
    assert get_preset("vllm-v0").kv_sizing == "budget"


def test_sort_scratch_follows_pytorchs_three_paths() -> None:
    """Outputs (fp32 values + int64 indices) plus the path's scratch (SortStable.cu)."""
    assert sort_bytes_per_element(SEGMENTED_SORT_MIN_ROWS) == 12 + 8 + 12
    assert sort_bytes_per_element(4096) == sort_bytes_per_element(SEGMENTED_SORT_MIN_ROWS)
    assert sort_bytes_per_element(SEGMENTED_SORT_MIN_ROWS - 1) == 12 + 16 + 4 + 12
    assert sort_bytes_per_element(1) == 12 + 12 + 8


def test_sampler_peak_per_logit_from_the_source_walk() -> None:
    """38 bytes a logit for the plain sampler and 50 with a drafter, from 128 rows on."""
    rows, vocab = 1024, 151_936
    assert sampler_profile_peak_bytes(rows, vocab, False) == 38.0 * rows * vocab
    assert sampler_profile_peak_bytes(rows, vocab, True) == 50.0 * rows * vocab


def test_the_drafter_adds_twelve_bytes_a_logit_as_the_tp2_logs_show() -> None:
    """A published check that nothing was fitted to: the sweep's Llama-3.3-70B runs at TP 2 on
    two 80 GB GPUs (max_num_seqs 256, vocabulary 128,256) log 65.74 GiB of weights and 4.03 GiB
    of KV without speculation, 67.35 and 2.05 with EAGLE-3, 66.91 and 2.50 with a Llama-3.2-1B
    draft (online-throughput/*/tp-results-*/*-serve.log): what neither weights nor KV explain
    grows by 0.37 and 0.36 GiB with a drafter, whatever the drafter. The rule's difference is
    12 x 256 x 128,256 bytes = 0.367 GiB; four figures rounded to 0.01 GiB leave +-0.02."""
    rule = (
        sampler_profile_peak_bytes(256, 128_256, True)
        - sampler_profile_peak_bytes(256, 128_256, False)
    ) / GIB
    for weights, kv in ((67.35, 2.05), (66.91, 2.50)):
        logged = (65.74 + 4.03) - (weights + kv)
        # Same requested memory on both runs: the non-KV growth is the weights-and-KV gap.
        assert rule == pytest.approx(logged, abs=0.02)


def test_the_94gb_pool_without_speculation_is_the_logged_one_within_its_inputs() -> None:
    """Logged: 69,232 tokens. The two unread inputs bound the error: the reported memory of the
    part (93.10 +- 0.1 GiB, carried from the H100 NVL: +-0.09 GiB requested) and the non-torch
    reserve (0.17 +- 0.1 GiB), 0.19 GiB in all = 777 tokens of 256 KiB."""
    plan = _plan(False)
    tolerance = (0.9 * 0.1 + 0.1) * GIB / plan.kv_bytes_per_token
    assert abs(plan.num_kv_tokens - 69_232) <= tolerance


def test_requested_memory_is_the_ceiling_of_the_reported_total() -> None:
    plan = _plan(False)
    assert plan.usable_bytes == math.ceil(0.9 * H100_94.reported_memory_bytes)
    assert plan.usable_bytes < 0.9 * H100_94.memory_bytes


def test_the_forward_binds_only_when_the_sampler_is_small() -> None:
    """max_num_seqs 10 (a logged run): the 8,192-token forward outweighs 10 rows of logits."""
    small = profile_peak_bytes(QWEN, 1, 8192, 10, False)
    assert small == forward_activation_bytes(QWEN, 1, 8192)
    large = profile_peak_bytes(QWEN, 1, 8192, 1024, False)
    assert large > forward_activation_bytes(QWEN, 1, 8192)


@given(
    rows=st.integers(min_value=1, max_value=4096),
    extra=st.integers(min_value=1, max_value=4096),
    speculative=st.booleans(),
)
def test_the_profile_peak_never_falls_as_rows_grow(
    rows: int, extra: int, speculative: bool
) -> None:
    low = profile_peak_bytes(QWEN, 1, 8192, rows, speculative)
    high = profile_peak_bytes(QWEN, 1, 8192, rows + extra, speculative)
    # Fewer sort-scratch bytes a logit above 128 rows, but never fewer bytes in all.
    assert high >= low or rows + extra >= SEGMENTED_SORT_MIN_ROWS > rows


@given(rows=st.integers(min_value=1, max_value=8192), speculative=st.booleans())
def test_rows_are_capped_by_the_token_budget(rows: int, speculative: bool) -> None:
    """The profile run makes min(max_num_seqs, max_num_batched_tokens) dummy requests."""
    capped = profile_peak_bytes(QWEN, 1, 512, max(rows, 512), speculative)
    assert capped == profile_peak_bytes(QWEN, 1, 512, 512, speculative)


def test_a_drafter_costs_the_pool_its_weights_kv_and_the_rejection_sampler() -> None:
    base, spec = _plan(False), _plan(True)
    first, _ = eagle3_networks(QWEN, own_embedding=True)
    rejection = 12.0 * 1024 * QWEN.spec.vocab_size
    assert base.kv_budget_bytes - spec.kv_budget_bytes == pytest.approx(
        first.resident_bytes + rejection
    )
    assert spec.kv_bytes_per_token == base.kv_bytes_per_token + first.kv_bytes_per_token


def test_the_budget_rule_is_unchanged() -> None:
    plan = _plan(False, kv_sizing="budget", reserved_bytes=float(GIB))
    assert plan.usable_bytes == 0.9 * H100_94.memory_bytes
    assert plan.num_kv_tokens == 83_504


def test_an_unknown_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown kv_sizing"):
        _plan(False, kv_sizing="guess")


def test_a_reported_total_is_what_the_driver_keeps_back_from_the_capacity() -> None:
    # The driver reserves part of the device for itself, so what it reports is positive and at
    # most the published capacity (79.19 of 80 GiB on the H100); a shipped figure above it would
    # grow every pool sized from it.
    reported = [get_gpu(n) for n in gpu_names() if get_gpu(n).reported_memory_bytes is not None]
    assert reported
    for gpu in reported:
        assert gpu.reported_memory_bytes is not None
        assert 0 < gpu.reported_memory_bytes <= gpu.memory_bytes, gpu.name
