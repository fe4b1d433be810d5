"""The vLLM sweep's printed latencies, transcribed beside its throughputs, obey Little's law.

Every run is a closed loop of ``c`` clients, each sending its next request when the last ends
(tools/sweep_validation_points.py), and every request generates 200 tokens. In steady state the
output throughput is then ``c · 200 / E2E`` with ``E2E = TTFT + 199 · TPOT`` (vllm bench's TPOT
excludes the first token). A run of ten requests per client ramps up and drains: some clients
idle at its ends, so the printed throughput is at most the steady-state one and, with ten
requests a client, not below it by more than the share of a request time lost at each end
(under 7%). A mistyped TTFT, TPOT or throughput breaks the bound.

The benchmark's capture-size what-if rounds vLLM's capture list as vLLM 0.14 does for
speculative decoding; its largest sizes are checked against the rule worked by hand.

Its non-GEMM candidate prices the elementwise operators as bytes over an achieved bandwidth. The
law must explain Vidur's five H100 profiles at once: their slopes differ by 1.9x across shapes
while the bandwidth each implies stays within a few percent of the mean, and it must scale with
the GPU's bandwidth and vanish below the per-layer floor the preset already prices.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.sweep_step_decomposition import (
    MEASURED_TTFT_TPOT_MS,
    VIDUR_NON_GEMM,
    non_gemm_bytes_per_token,
    non_gemm_s,
    spec_rounded_sizes,
    vidur_bandwidth_fractions,
)
from sim.catalogue import get_gpu, get_model
from sim.host_costs import capture_sizes
from tools.sweep_validation_points import (
    CONCURRENCY,
    QWEN_BASELINE,
    QWEN_EAGLE3,
    QWEN_OUTPUT_TOKENS,
)


@pytest.mark.parametrize(("k", "clients"), sorted(MEASURED_TTFT_TPOT_MS))
def test_printed_latencies_and_throughput_obey_littles_law(k: int, clients: int) -> None:
    ttft_ms, tpot_ms = MEASURED_TTFT_TPOT_MS[(k, clients)]
    index = CONCURRENCY.index(clients)
    throughput = QWEN_BASELINE[index] if k == 0 else QWEN_EAGLE3[k][index]
    e2e_s = (ttft_ms + (QWEN_OUTPUT_TOKENS - 1) * tpot_ms) / 1e3
    steady = clients * QWEN_OUTPUT_TOKENS / e2e_s
    assert 0.93 * steady <= throughput <= steady


@pytest.mark.parametrize(
    ("k", "largest"),
    # 512 is a multiple of 2 and 4; otherwise the largest kept is 496 or 480 rounded up.
    [(1, 512), (2, 498), (3, 512), (4, 500), (5, 498), (6, 497)],
)
def test_vllm_rounds_the_capture_sizes_to_multiples_of_k_plus_one(k: int, largest: int) -> None:
    sizes = spec_rounded_sizes(capture_sizes(512), k + 1, 512)
    assert sizes[-1] == largest
    assert all(s % (k + 1) == 0 for s in sizes)
    assert sizes == sorted(set(sizes)) and sizes[0] == k + 1


def test_the_rounding_keeps_one_size_or_refuses_as_vllm_does() -> None:
    assert spec_rounded_sizes([5], 4, 6) == [4]  # 8 is over the largest, 4 still fits
    with pytest.raises(ValueError, match="multiple of 8 within 4"):
        spec_rounded_sizes([1, 2], 8, 4)


def test_non_gemm_bytes_worked_by_hand_for_llama_2_70b() -> None:
    # Two norms 4H each, the residual add 6H, rope 4(n_q + n_kv)d, SiLU-and-mul 6I (bf16).
    hidden, inter, qk = 8192, 28672, (64 + 8) * 128
    assert non_gemm_bytes_per_token(8192, 28672, 72, 128) == 14 * hidden + 4 * qk + 6 * inter
    assert non_gemm_bytes_per_token(8192, 28672, 72, 128, qk_norm=True) == (
        14 * hidden + 8 * qk + 6 * inter
    )


def test_one_bandwidth_explains_every_vidur_profile() -> None:
    fractions = vidur_bandwidth_fractions()
    slopes = [v[0] for v in VIDUR_NON_GEMM.values()]
    mean = float(np.mean(list(fractions.values())))
    assert max(slopes) / min(slopes) > 1.8  # the shapes differ ...
    assert all(abs(f / mean - 1) < 0.06 for f in fractions.values())  # ... the bandwidth does not
    assert 0.0 < mean < 1.0


def test_non_gemm_candidate_vanishes_below_the_floor_and_scales_with_bandwidth() -> None:
    model = get_model("qwen3-32b")
    slow, fast = get_gpu("h100-sxm-94gb"), get_gpu("h100-sxm")
    floor = 2.838e-5
    tokens = np.array([1.0, 64.0, 2000.0, 4000.0])
    on_slow, on_fast = (
        non_gemm_s(model, slow, floor, tokens),
        non_gemm_s(model, fast, floor, tokens),
    )
    assert on_slow[0] == on_fast[0] == 0.0 and on_slow[1] == 0.0
    # Above the floor the time per token is the bandwidth law's, in inverse ratio to bandwidth.
    per_token_slow = (on_slow[3] - on_slow[2]) / 2000.0
    per_token_fast = (on_fast[3] - on_fast[2]) / 2000.0
    ratio = fast.hbm_bandwidth_bytes_per_s / slow.hbm_bandwidth_bytes_per_s
    assert np.isclose(per_token_slow / per_token_fast, ratio)
    spec = model.spec
    bytes_per_token = non_gemm_bytes_per_token(
        spec.hidden_size, spec.intermediate_size, spec.num_heads + spec.num_kv_heads, 128, True
    )
    mean = float(np.mean(list(vidur_bandwidth_fractions().values())))
    expected = spec.num_layers * bytes_per_token / (mean * slow.hbm_bandwidth_bytes_per_s)
    assert np.isclose(per_token_slow, expected)


def test_tensor_parallel_ranks_split_only_the_head_and_mlp_wise_operators() -> None:
    # Every rank normalises and adds the whole hidden state (14·H bytes); rope, the q/k norm
    # and SiLU-and-mul follow the heads and the MLP, split tp ways.
    whole = non_gemm_bytes_per_token(5120, 25600, 72, 128, qk_norm=True)
    replicated = 14 * 5120
    for tp in (2, 4, 8):
        shard = non_gemm_bytes_per_token(5120, 25600, 72, 128, qk_norm=True, tp=tp)
        assert np.isclose(shard - replicated, (whole - replicated) / tp)
