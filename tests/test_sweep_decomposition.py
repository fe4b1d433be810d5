"""The vLLM sweep's printed latencies, transcribed beside its throughputs, obey Little's law.

Every run is a closed loop of ``c`` clients, each sending its next request when the last ends
(tools/sweep_validation_points.py), and every request generates 200 tokens. In steady state the
output throughput is then ``c · 200 / E2E`` with ``E2E = TTFT + 199 · TPOT`` (vllm bench's TPOT
excludes the first token). A run of ten requests per client ramps up and drains: some clients
idle at its ends, so the printed throughput is at most the steady-state one and, with ten
requests a client, not below it by more than the share of a request time lost at each end
(under 7%). A mistyped TTFT, TPOT or throughput breaks the bound.
"""

from __future__ import annotations

import pytest

from benchmarks.sweep_step_decomposition import MEASURED_TTFT_TPOT_MS
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
