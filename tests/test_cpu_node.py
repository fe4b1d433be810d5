"""A CPU socket as the serving device (sim/cpu_node.py): the DRAM bandwidth law, the published
llama.cpp points it is calibrated and checked on, and the refusals of what a CPU node cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from calibration.fit_cpu_efficiency import cpu_points, fit, with_cpu_entries
from sim.catalogue import get_gpu, get_model
from sim.cpu_node import dram_bandwidth_bytes_per_s, host_costs_on
from sim.host_costs import load_host_profile
from specsim.catalogue_command import catalogue_rows
from specsim.cli import app
from tests.test_llamacpp_preset import batch1_tpot_ms


def _tpot_ms(cpu: str, model: str, weights: str, output_tokens: int) -> float:
    return batch1_tpot_ms(weights, model, cpu, output_tokens)


def test_dram_bandwidth_is_channels_times_rate_times_eight_bytes() -> None:
    # AMD quotes 460.8 GB/s for the 12 DDR5-4800 channels of an EPYC 9004 socket; two channels
    # of DDR4-3600 are the 57.6 GB/s of a desktop Ryzen.
    assert dram_bandwidth_bytes_per_s(12, 4800) == pytest.approx(460.8e9)
    assert get_gpu("epyc-9554").hbm_bandwidth_bytes_per_s == pytest.approx(460.8e9)
    assert get_gpu("ryzen9-5950x").hbm_bandwidth_bytes_per_s == pytest.approx(57.6e9)
    with pytest.raises(ValueError, match="channels"):
        dram_bandwidth_bytes_per_s(0, 4800)


def test_cpu_entries_have_no_fp8_or_fp4_and_scale_with_cores() -> None:
    epyc, laptop = get_gpu("epyc-9554"), get_gpu("ryzen9-7940hs")
    assert epyc.is_cpu and epyc.dense_flops("fp8") is None and epyc.dense_flops("fp4") is None
    # Same Zen 4 core: the peaks differ by cores x base clock (64 x 3.1 GHz vs 8 x 4.0 GHz).
    assert epyc.bf16_dense_flops / laptop.bf16_dense_flops == pytest.approx(64 * 3.1 / (8 * 4.0))


def test_phi4_and_mistral7b_have_their_published_sizes() -> None:
    # llama-bench reports 14.66 B parameters for Phi-4; llamafile-bench 13.49 GiB for Mistral-7B
    # in BF16 (7.24 B parameters x 2 bytes).
    assert get_model("phi-4").total_params == pytest.approx(14.66e9, rel=1e-3)
    assert get_model("mistral-7b").total_params * 2 / 2**30 == pytest.approx(13.49, rel=1e-3)


def test_the_calibration_point_is_reproduced_end_to_end() -> None:
    # The bandwidth fraction is solved on this row with the cost model alone; the full run (its
    # scheduler, host terms and memory plan on a CPU node) must land on the same time.
    calibration, _ = cpu_points()
    tpot = _tpot_ms(
        calibration.gpu, calibration.model, calibration.precision, calibration.output_tokens or 0
    )
    assert tpot == pytest.approx(calibration.measured, rel=0.005)


@pytest.mark.parametrize("index", range(3))
def test_out_of_sample_cpu_points_within_fifteen_percent(index: int) -> None:
    # Nothing is fitted on these rows (another GGUF format on the same EPYC, another CPU).
    point = cpu_points()[1][index]
    tpot = _tpot_ms(point.gpu, point.model, point.precision, point.output_tokens or 0)
    assert tpot == pytest.approx(point.measured, rel=0.15), point.point_id


def test_decode_time_beyond_the_fixed_part_scales_with_the_bytes_read() -> None:
    # Memory-bound decode: (TPOT - step overhead) is the weights' bytes over the achieved
    # bandwidth, so Q8_0 over Q4_0 is their bits per weight, 8.5 / 4.5, but for the bf16 lm_head
    # and the KV and sampling passes, which both read alike.
    from sim.engine.presets import get_preset

    fixed_ms = get_preset("llamacpp").step_overhead_s * 1e3
    q8, q4 = (_tpot_ms("epyc-9554", "phi-4", w, 64) - fixed_ms for w in ("q8_0", "q4_0"))
    model = get_model("phi-4")
    q8_bytes = model.with_precision("q8_0", "bf16").linear_weight_bytes_read
    q4_bytes = model.with_precision("q4_0", "bf16").linear_weight_bytes_read
    assert q8 / q4 == pytest.approx(q8_bytes / q4_bytes, rel=0.01)


def test_no_cuda_graphs_or_launches_on_a_cpu_node() -> None:
    host = load_host_profile("llamacpp").costs
    on_cpu = host_costs_on(get_gpu("epyc-9554"), host)
    assert on_cpu.cuda_graph_max_tokens == 0 and on_cpu.eager_launch_s_per_layer == 0.0
    assert host_costs_on(get_gpu("rtx-4090"), host) == host


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["hardware.num_gpus=2"], "hardware.num_gpus: 2, but epyc-9554 is a CPU"),
        (["hardware.tensor_parallel=2"], "hardware.tensor_parallel: 2, but epyc-9554 is a CPU"),
        (["engine.preset=vllm-v1"], "engine.preset: vllm-v1 runs on GPUs"),
        (["precision.weights=fp8"], "precision.weights: llama.cpp has no CPU kernels for fp8"),
        (
            ["speculation.method=eagle3", "speculation.acceptance.alpha=0.7"],
            "speculation.method: llama.cpp server does not support 'eagle3'",
        ),
    ],
)
def test_what_a_cpu_node_cannot_run_is_refused_naming_the_key(
    sets: list[str], message: str, tmp_path: Path
) -> None:
    args = ["run", "--set", "model=phi-4", "--set", "hardware.gpu=epyc-9554"]
    args += ["--set", "engine.preset=llamacpp"]
    for item in sets:
        args += ["--set", item]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_the_catalogue_lists_the_cpus_with_their_sources() -> None:
    rows = {row["name"]: row for row in catalogue_rows()["gpus"]}
    for cpu in ("epyc-9554", "epyc-9654", "epyc-9374f", "ryzen9-5950x", "ryzen9-7940hs"):
        assert rows[cpu]["kind"] == "cpu" and "DDR" in rows[cpu]["source"]


def test_writing_the_cpu_entries_keeps_the_gpu_entries_byte_for_byte() -> None:
    shipped = Path("sim/data/hardware_efficiency.yaml").read_text("utf-8")
    rewritten = with_cpu_entries(shipped, *fit())
    assert rewritten == shipped
    gpu_part = shipped.split("# CPU nodes")[0]
    assert with_cpu_entries(gpu_part, *fit()) == shipped


@pytest.mark.parametrize("cpu", ["epyc-9554", "epyc-9654", "epyc-9374f", "ryzen9-5950x"])
def test_cpu_efficiency_entries_are_the_fit_with_its_spread(cpu: str) -> None:
    # No operator profile of a CPU: the sharp roofline and no per-GEMM floor; the bandwidth
    # fraction lies within the spread of what each published CPU row implies on its own.
    import yaml

    from sim.efficiency import load_efficiency

    efficiency = load_efficiency(cpu)
    assert efficiency.roofline_p == float("inf") and efficiency.gemm_floor_s == 0.0
    assert (efficiency.bandwidth, efficiency.flops) == fit()
    entry = yaml.safe_load(Path("sim/data/hardware_efficiency.yaml").read_text("utf-8"))[cpu]
    low, high = entry["spread"]["bandwidth"]
    assert low <= efficiency.bandwidth <= high
