"""Weight formats beyond bf16/fp8: bytes per weight from the formats' block layouts, the tensor
datatype each runs at on each GPU, and a clear refusal where a GPU cannot run one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from sim.catalogue import BF16_BYTES, get_gpu, get_model, gpu_names
from sim.cost_model import StepCostModel, body_peak_flops
from sim.efficiency import load_efficiency
from sim.errors import CatalogueError
from sim.precision import TENSOR_DTYPES, WEIGHT_FORMATS, compute_dtype
from specsim.cli import app

BASE = get_model("llama-3.1-70b")


@pytest.mark.parametrize(
    ("name", "bits"),
    [
        ("bf16", 16.0),
        ("fp8", 8.0),
        ("int8", 8.0),
        # 4-bit weights + one fp16 scale and one 4-bit zero per 128-weight group.
        ("int4-awq", 4.15625),
        ("int4-gptq", 4.15625),
        # OCP MX: 32 FP4 elements share one 8-bit E8M0 scale.
        ("mxfp4", 4.25),
        # NVFP4: 16 FP4 elements share one FP8 E4M3 scale.
        ("nvfp4", 4.5),
        # GGUF: 32 weights share one fp16 scale.
        ("q8_0", 8.5),
        ("q4_0", 4.5),
    ],
)
def test_bits_per_weight_follow_the_block_layouts(name: str, bits: float) -> None:
    assert WEIGHT_FORMATS[name].bits_per_weight == pytest.approx(bits)


@pytest.mark.parametrize("name", sorted(WEIGHT_FORMATS))
def test_weight_bytes_split_into_quantised_layers_and_bf16_embeddings(name: str) -> None:
    model = BASE.with_precision(name, "bf16")
    s = BASE.spec
    unquantised = BASE.embedding_params + BASE.lm_head_params + s.num_layers * 2 * s.hidden_size
    unquantised += s.hidden_size
    expected = (BASE.total_params - unquantised) * WEIGHT_FORMATS[name].bits_per_weight / 8
    assert model.weight_bytes == pytest.approx(expected + unquantised * BF16_BYTES)


def test_a_70b_in_int4_is_about_a_quarter_of_bf16_plus_the_bf16_embeddings() -> None:
    awq = BASE.with_precision("int4-awq", "bf16").weight_bytes
    # 68.5e9 quantised params at 0.52 B = 35.6 GB, plus 2.1e9 embedding/head params at 2 B.
    assert 38e9 < awq < 41e9
    assert awq < 0.3 * BASE.weight_bytes


def test_weight_only_int4_reads_a_quarter_of_the_bytes_but_computes_at_bf16() -> None:
    gpu, eff = get_gpu("h100-sxm"), load_efficiency("h100-sxm")
    bf16 = StepCostModel(BASE, gpu, 4, eff, 0.0)
    awq = StepCostModel(BASE.with_precision("int4-awq", "bf16"), gpu, 4, eff, 0.0)
    one = np.array([1.0])
    # Batch-1 decode is weight-bound: the body's read shrinks by 4.156/16.
    assert awq.linear_s(one, one)[0] < 0.35 * bf16.linear_s(one, one)[0]
    # A compute-bound 8192-token prefill costs the same FLOPs at the same bf16 rate.
    n = np.array([8192.0])
    assert awq.linear_s(n, one)[0] == pytest.approx(bf16.linear_s(n, one)[0], rel=0.02)


def test_mxfp4_runs_weight_only_on_hopper_and_natively_on_blackwell() -> None:
    mx = BASE.with_precision("mxfp4", "bf16")
    assert compute_dtype("mxfp4", get_gpu("h100-sxm")) == "bf16"
    assert body_peak_flops(mx, get_gpu("h100-sxm")) == get_gpu("h100-sxm").bf16_dense_flops
    assert compute_dtype("mxfp4", get_gpu("b200")) == "fp4"
    assert body_peak_flops(mx, get_gpu("b200")) == 9000.0e12
    assert compute_dtype("mxfp4", get_gpu("mi355x")) == "fp4"


@pytest.mark.parametrize(
    ("weights", "gpu"),
    [("nvfp4", "h100-sxm"), ("nvfp4", "mi300x"), ("fp8", "a100-80gb"), ("int8", "rtx-pro-6000")],
)
def test_a_format_the_gpu_cannot_run_is_refused_naming_the_key(weights: str, gpu: str) -> None:
    with pytest.raises(CatalogueError, match=r"precision\.weights: .*" + gpu):
        compute_dtype(weights, get_gpu(gpu))


@given(st.sampled_from(sorted(WEIGHT_FORMATS)), st.sampled_from(gpu_names()))
def test_every_format_on_every_gpu_runs_at_a_datatype_the_gpu_has_or_is_refused(
    weights: str, gpu_name: str
) -> None:
    gpu = get_gpu(gpu_name)
    try:
        dtype = compute_dtype(weights, gpu)
    except CatalogueError as exc:
        assert "precision.weights" in str(exc)
        assert gpu.dense_flops(WEIGHT_FORMATS[weights].compute) is None
        return
    assert dtype in TENSOR_DTYPES
    assert gpu.dense_flops(dtype) is not None
    # A format never computes faster than its own datatype's peak allows.
    assert dtype in (WEIGHT_FORMATS[weights].compute, WEIGHT_FORMATS[weights].fallback)


def test_cli_refuses_nvfp4_on_an_h100_with_exit_code_2(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model": "llama-3.1-8b",
                "precision": {"weights": "nvfp4"},
                "workload": {"num_requests": 4},
            }
        )
    )
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "precision.weights" in result.output and "FP4" in result.output
    assert "Traceback" not in result.output
