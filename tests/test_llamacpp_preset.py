"""The llama.cpp preset on a GPU: its batch-1 calibration point and an 8-bit GGUF point it was not
calibrated on (ggml-org/llama.cpp PR #4766, llama-bench on one RTX 4090, codellama-7b)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.errors import ScenarioError
from sim.run import build_simulation, run_scenario
from sim.scenario import validate_document


def batch1_tpot_ms(
    weights: str, model: str = "llama-2-7b", device: str = "rtx-4090", output_tokens: int = 128
) -> float:
    """Mean TPOT of llama-bench's tg<output_tokens> on the llama.cpp preset: one client, a
    one-token prompt (generation from an empty context)."""
    document = {
        "model": model,
        "hardware": {"gpu": device, "num_gpus": 1},
        "engine": {"preset": "llamacpp"},
        "precision": {"weights": weights},
        "workload": {
            "num_requests": 2,
            "arrival": {"process": "closed_loop", "concurrency": 1},
            "prompt_tokens": {"distribution": "fixed", "value": 1},
            "output_tokens": {"distribution": "fixed", "value": output_tokens},
        },
    }
    return float(run_scenario(validate_document(document, "t"), Path.cwd()).summary.tpot_ms.mean)


def test_f16_is_the_calibration_point() -> None:
    # tg128 F16: 61.03 t/s, the point the step overhead is calibrated on.
    assert batch1_tpot_ms("bf16") == pytest.approx(1e3 / 61.03, rel=0.01)


def test_q8_0_out_of_sample_within_fifteen_percent() -> None:
    # tg128 Q8_0: 98.13 t/s, not used by any fit; 8.5 bits per weight read per token.
    assert batch1_tpot_ms("q8_0") == pytest.approx(1e3 / 98.13, rel=0.15)


def test_llama_server_drafts_only_with_a_draft_model() -> None:
    document = {
        "engine": {"preset": "llamacpp"},
        "speculation": {"method": "eagle3", "acceptance": {"alpha": 0.7}},
        "workload": {"num_requests": 2},
    }
    with pytest.raises(ScenarioError, match=r"speculation\.method: llama\.cpp"):
        build_simulation(validate_document(document, "t"), Path.cwd())
