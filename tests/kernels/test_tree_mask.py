"""A token tree verified with a custom mask (FlashInfer's FA2 template on an H100): the masked
kernel's closed form, where it costs more than the causal kernel and where it cannot, and which
scenarios take it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import kernels
from sim.build import build_simulation
from sim.catalogue import get_gpu, get_model
from sim.efficiency import load_efficiency
from sim.errors import CatalogueError
from sim.kernel_costs import KernelCosts
from sim.scenario import validate_document

LLAMA_8B = get_model("llama-3.1-8b")
H100 = get_gpu("h100-sxm")


def _costs(tree_mask: bool) -> KernelCosts:
    return KernelCosts(LLAMA_8B, H100, 1, load_efficiency("h100-sxm"), tree_mask=tree_mask)


def _verify(batch: float, tokens: float, context: float) -> tuple[float, ...]:
    """A verify step of ``batch`` sequences, ``tokens`` tree tokens each, ``context`` cached
    tokens each: (B, N, KV read, causal pairs Σ t(c + (t+1)/2))."""
    n = batch * tokens
    return batch, n, batch * context, n * (context + (tokens + 1) / 2)


def test_the_masked_layer_is_its_documented_closed_form() -> None:
    # One sequence, 64 tree tokens over 8,192 cached ones: every pair of the 64 x 8,256
    # rectangle computed at 35 % of the H100's 989 TFLOP/s and its mask bit read.
    tree = kernels.tree_mask_attention("h100-sxm")
    prefill = kernels.prefill_attention("h100-sxm")
    pairs = 64 * (8192 + 64)
    expected = (
        prefill.floor_s
        + 64 * 32 * prefill.per_token_head_s
        + 4 * 32 * 128 * pairs / (0.35 * 989.0e12)
        + pairs / 8 / (kernels.decode_attention("h100-sxm").bandwidth * 3.35e12)
    )
    assert tree.layer_s(64, pairs, 32, 128) == pytest.approx(expected, rel=1e-12)
    # Pair for pair the FA2 template computes 0.6665 / 0.35 = 1.9x slower than the measured
    # (FA3) causal kernel: the FlashAttention-3 paper's 1.5-2.0x.
    assert prefill.flops / tree.compute.flops == pytest.approx(1.904, abs=1e-3)


def test_only_the_h100_has_a_published_fa2_utilization() -> None:
    with pytest.raises(CatalogueError, match="H100"):
        kernels.tree_mask_attention("h200")


@settings(max_examples=60, deadline=None)
@given(
    batch=st.integers(1, 256),
    tokens=st.integers(2, 128),
    context=st.integers(0, 32_000),
)
def test_a_tree_never_verifies_faster_than_the_causal_kernel_prices_it(
    batch: int, tokens: int, context: int
) -> None:
    b, n, kv, pairs = _verify(batch, tokens, context)
    masked = float(_costs(True).attention_s(b, n, kv, pairs, True))
    causal = float(_costs(False).attention_s(b, n, kv, pairs, True))
    assert masked >= causal


def test_a_16_token_tree_of_a_gqa_4_target_is_bound_by_its_kv_reads() -> None:
    # Llama-3.1-8B packs 4 query heads per KV head: 16 tree tokens are 64 query rows per KV
    # head, 4·128·64 = 32,768 FLOP per 512 KV bytes (64 FLOP/B), below the FA2 template's
    # 0.35·989e12 / (0.9126·3.35e12) = 113 FLOP/B. The masked kernel then costs what the KV
    # reads cost, at any context: only the mask (a bit per pair per layer, a few bytes per
    # pair per step) is added.
    for batch, context in ((1, 206), (64, 206), (64, 4_096), (128, 16_000)):
        b, n, kv, pairs = _verify(batch, 16, context)
        masked = float(_costs(True).attention_s(b, n, kv, pairs, True))
        causal = float(_costs(False).attention_s(b, n, kv, pairs, True))
        assert masked == pytest.approx(causal, rel=0.01), (batch, context)


def test_a_wide_tree_over_a_long_context_pays_the_fa2_rate() -> None:
    # 64 tree tokens (256 rows per KV head, 256 FLOP/B) are compute-bound on both kernels: the
    # masked one takes about 1.9x the causal one's pair time.
    b, n, kv, pairs = _verify(16, 64, 8_192)
    masked = float(_costs(True).attention_s(b, n, kv, pairs, True))
    causal = float(_costs(False).attention_s(b, n, kv, pairs, True))
    assert 1.7 < masked / causal < 1.95


def test_prefill_steps_and_decodes_keep_the_causal_price() -> None:
    on, off = _costs(True), _costs(False)
    # A prompt of 2,000 tokens (not decode-only), and a plain decode step (one token each).
    for args in ((1, 2_000, 2_000, 2_000 * 2_001 / 2, False), (64, 64, 64 * 500, 64 * 501, True)):
        assert float(on.attention_s(*args)) == float(off.attention_s(*args))


def _document(engine: str, speculation: dict[str, Any]) -> dict[str, Any]:
    return {
        "seed": 1,
        "hardware": {"gpu": "h100-sxm", "num_gpus": 1},
        "model": "llama-3.1-8b",
        "engine": {"preset": engine},
        "speculation": {**speculation, "acceptance": {"alpha": 0.7}},
        "workload": {"num_requests": 2},
    }


@pytest.mark.parametrize(
    ("engine", "speculation", "masked"),
    [
        (
            "sglang-0.4",
            {"method": "eagle2", "tree": {"topk": 4, "depth": 3, "num_draft_tokens": 16}},
            True,
        ),
        ("sglang-0.4", {"method": "eagle2"}, True),  # SGLang's default tree, topk 4
        ("sglang-0.4", {"method": "eagle", "num_speculative_tokens": 3}, False),  # a chain
        ("sglang-0.4", {"method": "eagle", "tree": {"shape": [2, 2, 2]}}, True),
        (
            "sglang-0.4",
            {"method": "eagle2", "tree": {"topk": 1, "depth": 3, "num_draft_tokens": 4}},
            False,
        ),
        (
            "sglang-0.5",
            {"method": "eagle2", "tree": {"topk": 4, "depth": 3, "num_draft_tokens": 16}},
            False,
        ),
    ],
)
def test_which_runs_verify_with_the_masked_kernel(
    engine: str, speculation: dict[str, Any], masked: bool
) -> None:
    document = _document(engine, speculation)
    simulation = build_simulation(
        validate_document(document, "tree"), Path("."), enforce_support=False
    )
    kernel_costs = simulation.core.cost_model._kernels
    assert kernel_costs is not None and kernel_costs.prices_tree_mask is masked
    assert np.isfinite(simulation.core.cost_model.step_time(_shape()))


def _shape() -> Any:
    from sim.cost_model import StepShape

    return StepShape(64, 1024, 1024, 64 * 206, 1024 * (206 + 8.5))
