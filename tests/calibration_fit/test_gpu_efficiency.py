"""The RTX PRO 6000 efficiency entry is what its measured GEMM times give."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
import yaml

from calibration.fit_gpu_efficiency import GPU_NAME, efficiency_entry, fit_rtx_pro_6000
from sim.catalogue import get_gpu

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"


def test_the_catalogue_entry_carries_the_published_server_edition_peaks() -> None:
    gpu = get_gpu(GPU_NAME)
    assert gpu.hbm_bandwidth_bytes_per_s == 1.597e12 and gpu.bf16_dense_flops == 503.8e12
    assert gpu.memory_bytes == 96 * 2**30


@pytest.mark.skipif(not (SHARED / "data").is_dir(), reason="shared data not beside the checkout")
def test_refitting_the_operator_profile_gives_the_shipped_entry() -> None:
    text = resources.files("sim").joinpath("data/hardware_efficiency.yaml").read_text("utf-8")
    shipped = yaml.safe_load(text)[GPU_NAME]
    assert efficiency_entry(fit_rtx_pro_6000(SHARED)) == shipped
