"""The batch-1 calibration points of the serving-node issue, through the whole simulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from calibration.engine_overhead import PRESETS, calibrated_overhead_s, rounded
from sim.engine.presets import get_preset
from sim.run import run_scenario
from sim.scenario import validate_document


def batch1_scenario(preset: str) -> dict:
    """One client at a time, MT-bench-like lengths, no speculation, Llama-3.1-8B on one H100."""
    return {
        "name": f"bs1-{preset}",
        "hardware": {"gpu": "h100-sxm", "num_gpus": 1},
        "model": "llama-3.1-8b",
        "engine": {"preset": preset},
        "workload": {
            "num_requests": 20,
            "arrival": {"process": "closed_loop", "concurrency": 1},
            "prompt_tokens": {"distribution": "fixed", "value": 150},
            "output_tokens": {"distribution": "fixed", "value": 512},
        },
    }


@pytest.mark.parametrize("preset", PRESETS)
def test_shipped_overheads_are_the_current_calibration(preset: str) -> None:
    assert get_preset(preset).step_overhead_s == rounded(calibrated_overhead_s(preset))


def test_vllm_v1_batch1_tpot_within_5_percent_of_7_07_ms() -> None:
    scenario = validate_document(batch1_scenario("vllm-v1"), "test")
    summary = run_scenario(scenario, Path.cwd()).summary
    assert summary.tpot_ms.mean == pytest.approx(7.07, rel=0.05)


def test_sglang_batch1_output_rate_between_150_and_166_tok_s() -> None:
    # The point is SGLang 0.4.4's (EAGLE-3 paper Table 4): the sglang-0.4 preset is fitted on it.
    scenario = validate_document(batch1_scenario("sglang-0.4"), "test")
    summary = run_scenario(scenario, Path.cwd()).summary
    tokens_per_s = 1e3 / summary.tpot_ms.mean
    assert 150.0 <= tokens_per_s <= 166.0
