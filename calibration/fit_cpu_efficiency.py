"""The achieved DRAM bandwidth of llama.cpp on a CPU node, fitted on one published point.

Token generation at batch 1 reads every weight once per token, so on a CPU socket the step is
``T = T_fixed + bytes / (η_bw · channels · MT/s · 8)`` plus the small KV and sampling passes
(:mod:`sim.cost_model`, :mod:`sim.cpu_node`). ``T_fixed`` is the llama.cpp preset's calibrated
per-step host time (its llama-server loop; ``sim/data/engine_presets.yaml``), carried over from
the GPU calibration (an assumption: the same loop, sampling and graph build). ``η_bw`` is the one
free number: solved so the modelled step equals the calibration point's measured time per token.

The matmul throughput fraction ``η_fl`` (it prices prompt processing only) is the measured
prompt-processing rate over the SIMD peak: llamafile-bench ``pp256`` of Mistral-7B BF16 on a
Ryzen 9 7940HS, 102.51 tokens/s, i.e. ``2 · 6.98e9`` FLOPs per token (the decoder's linear
layers; the lm_head runs for the last token only) at 1.431 TFLOP/s of the 8 cores × 4.0 GHz × 64
bf16 FLOP/cycle = 2.048 TFLOP/s: 0.699.

Every CPU in the catalogue carries both fractions over (a stated rule, no CPU but the
calibration's is fitted); ``roofline_p`` is the sharp maximum and there is no per-GEMM floor
(no operator profile of a CPU exists here). ``python -m calibration.fit_cpu_efficiency``
prints the fit and its out-of-sample rows; ``--write`` updates the CPU entries of
``sim/data/hardware_efficiency.yaml``.
"""

from __future__ import annotations

import argparse

import yaml

from calibration.hardware_efficiency import shipped_path
from sim.catalogue import get_gpu, get_model, gpu_names
from sim.cost_model import Efficiency, StepCostModel, StepShape
from sim.cpu_node import host_costs_on
from sim.engine.presets import get_preset
from sim.errors import CalibrationError
from sim.host_costs import load_host_profile
from sim.validation.points import ValidationPoint, load_points

#: The llama.cpp preset the CPU runs are priced with.
PRESET = "llamacpp"


#: The validation rows of CPU nodes (tools/cpu_validation_points.py writes them).
SOURCE_GROUP = "cpu-llamacpp"
#: The ``fitted_by`` tag of the calibration row.
FIT = "cpu_efficiency"


def cpu_points() -> tuple[ValidationPoint, tuple[ValidationPoint, ...]]:
    """The calibration row and the out-of-sample rows of CPU nodes.

    Raise CalibrationError if the validation table has not exactly one calibration row.
    """
    rows = [p for p in load_points() if p.source_group == SOURCE_GROUP]
    fitted = [p for p in rows if p.fitted_by == FIT]
    if len(fitted) != 1:
        raise CalibrationError(
            f"{SOURCE_GROUP}: expected one row fitted by {FIT}, got {len(fitted)}"
        )
    return fitted[0], tuple(p for p in rows if p.fitted_by != FIT)


#: The measured prompt-processing point the matmul fraction comes from (module docstring).
PP_TOKENS_PER_S, PP_CPU, PP_MODEL = 102.51, "ryzen9-7940hs", "mistral-7b"
PP_SOURCE = (
    "mozilla-ai/llamafile issue #441, llamafile-bench 0.8.6 on a Ryzen 9 7940HS: "
    "mistral-7b-instruct-v0.2.BF16 pp256 102.51 t/s"
)


def flops_fraction() -> float:
    """The achieved fraction of the SIMD bf16 peak in prompt processing (module docstring)."""
    model = get_model(PP_MODEL)
    lm_head = model.spec.vocab_size * model.spec.hidden_size
    flops_per_token = 2.0 * (model.dense_linear_params - lm_head)
    return flops_per_token * PP_TOKENS_PER_S / get_gpu(PP_CPU).bf16_dense_flops


def modeled_tpot_s(point: ValidationPoint, bandwidth: float, flops: float) -> float:
    """The modelled batch-1 decode step of ``point`` at bandwidth fraction ``bandwidth``."""
    gpu = get_gpu(point.gpu)
    model = get_model(point.model).with_precision(point.precision, "bf16")
    preset = get_preset(PRESET)
    host = host_costs_on(gpu, load_host_profile(PRESET).costs)
    cost = StepCostModel(
        model,
        gpu,
        1,
        Efficiency(bandwidth, flops),
        preset.step_overhead_s,
        host.per_sequence_overhead_s,
        host=host,
        measured_linear=False,
    )
    # tg<n> generates n tokens from an empty context: the mean context is n/2.
    context = (point.output_tokens or 0) / 2
    shape = StepShape(1, 1, 1, context, context + 1)
    return float(cost.step_time(shape))


def fit_bandwidth(point: ValidationPoint, flops: float) -> float:
    """The bandwidth fraction at which the modelled step equals ``point``'s measured one
    (bisection: the step time falls monotonically as the fraction grows).

    Raise ValueError if no fraction in (0, 1] reproduces it.
    """
    low, high = 1e-3, 1.0
    measured_s = point.measured / 1e3
    if modeled_tpot_s(point, high, flops) > measured_s:
        raise ValueError(f"{point.point_id}: slower than measured even at full bandwidth")
    for _ in range(60):
        mid = 0.5 * (low + high)
        if modeled_tpot_s(point, mid, flops) > measured_s:
            low = mid
        else:
            high = mid
    return 0.5 * (low + high)


def bandwidth_spread(flops: float) -> tuple[float, float]:
    """The lowest and highest bandwidth fraction the published rows imply, each solved on its
    own: the error bar of a fraction fitted on one of them."""
    calibration, out_of_sample = cpu_points()
    implied = [fit_bandwidth(p, flops) for p in (calibration, *out_of_sample)]
    return round(min(implied), 3), round(max(implied), 3)


def fit() -> tuple[float, float]:
    """``(η_bw, η_fl)`` of the CPU node, rounded as shipped (3 decimals)."""
    flops = round(flops_fraction(), 3)
    return round(fit_bandwidth(cpu_points()[0], flops), 3), flops


def report() -> str:
    """The fit and every point's modelled and measured time per token."""
    bandwidth, flops = fit()
    calibration, out_of_sample = cpu_points()
    low, high = bandwidth_spread(flops)
    lines = [
        f"CPU node: bandwidth fraction {bandwidth} (fitted on {calibration.point_id}; "
        f"{low}-{high} as each row implies it), "
        f"flops fraction {flops} ({PP_CPU} pp256, {PP_TOKENS_PER_S} t/s)",
        f"{'row':32} {'kind':13} {'measured ms':>12} {'modelled ms':>12} {'error':>8}",
    ]
    for kind, points in (("fitted", (calibration,)), ("out-of-sample", out_of_sample)):
        for point in points:
            modelled_ms = modeled_tpot_s(point, bandwidth, flops) * 1e3
            error = modelled_ms / point.measured - 1.0
            lines.append(
                f"{point.point_id:32} {kind:13} {point.measured:12.2f} {modelled_ms:12.2f} "
                f"{error:+8.1%}"
            )
    return "\n".join(lines)


def efficiency_entries(bandwidth: float, flops: float) -> dict[str, dict[str, object]]:
    """The shipped entry of every catalogue CPU."""
    calibration = cpu_points()[0]
    low, high = bandwidth_spread(flops)
    entries: dict[str, dict[str, object]] = {}
    for name in gpu_names():
        if not get_gpu(name).is_cpu:
            continue
        entries[name] = {
            "bandwidth": bandwidth,
            "flops": flops,
            "roofline_p": float("inf"),
            "gemm_floor_s": 0.0,
            "spread": {"bandwidth": [low, high]},
            "method": (
                f"bandwidth solved so the modelled batch-1 step equals {calibration.point_id} "
                f"({calibration.gpu}, {calibration.model} {calibration.precision}, "
                f"{calibration.measured} ms per token); flops the measured {PP_CPU} pp256 rate "
                "over its SIMD peak; carried to every CPU (ASSUMPTION); spread: the bandwidth "
                "fraction each published CPU row implies on its own (no 95% interval from one "
                "point); calibration/fit_cpu_efficiency.py"
            ),
            "source": [calibration.source, PP_SOURCE],
        }
    return entries


#: The comment that opens the CPU block of the shipped file.
CPU_MARKER = "# CPU nodes: written by `python -m calibration.fit_cpu_efficiency --write`"


def with_cpu_entries(text: str, bandwidth: float, flops: float) -> str:
    """``text`` (the shipped YAML) with its CPU block replaced by the current entries; the GPU
    entries above it are kept byte for byte."""
    entries = efficiency_entries(bandwidth, flops)
    lines = text.splitlines(keepends=True)
    cut = len(lines)
    for i, line in enumerate(lines):
        if line.startswith(CPU_MARKER) or any(line.startswith(f"{n}:") for n in entries):
            cut = i
            break
    head = "".join(lines[:cut])
    block = yaml.safe_dump(entries, sort_keys=False, width=100)
    return f"{head}{CPU_MARKER}\n{block}"


def main(argv: list[str] | None = None) -> int:
    """Print the fit; with ``--write`` update the CPU entries of the shipped efficiency file."""
    parser = argparse.ArgumentParser(prog="python -m calibration.fit_cpu_efficiency")
    parser.add_argument("--write", action="store_true", help="update hardware_efficiency.yaml")
    args = parser.parse_args(argv)
    print(report())
    if args.write:
        target = shipped_path()
        target.write_text(with_cpu_entries(target.read_text("utf-8"), *fit()), "utf-8")
        print(f"\nwrote {target.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
