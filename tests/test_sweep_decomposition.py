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
"""

from __future__ import annotations

import pytest

from benchmarks.sweep_step_decomposition import (
    MEASURED_TTFT_TPOT_MS,
    spec_rounded_sizes,
)
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
