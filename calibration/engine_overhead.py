"""Calibrate each engine preset's fixed per-step overhead from its batch-1 measurement.

At batch 1 a decode step computes one token, so the step time is
``T_fixed + T_host + T_linear(1) + T_attention(n) + T_sample(1)`` with every term but ``T_fixed``
given by the physics (``sim.cost_model``), the fitted hardware efficiencies and the engine's host
terms per layer and per sequence (``sim/data/host_costs.yaml``, fitted under load by
``calibration/host_cost_fit.py``). The measured time per
output token at batch 1 (vLLM V1: 7.07 ms, vLLM issue #20780; vLLM V0: 13 ms, vLLM blog
2024-09-05; SGLang: 1/158.34 s, EAGLE-3 paper Table 4) is that step time, so ``T_fixed`` is their
difference. Every preset in ``sim/data/engine_presets.yaml`` is calibrated on its own
``calibration`` entry. The context length ``n`` of the
measurement is not published: MT-bench single-turn prompts with their outputs average a few
hundred tokens, and ``context_tokens`` in the preset file records the value used; its effect is
tiny (the KV of 400 tokens of Llama-3.1-8B is 52 MB, 0.02 ms at H100 bandwidth).

``python -m calibration.engine_overhead`` prints the calibration; ``--write`` updates
``sim/data/engine_presets.yaml`` in place (only the ``step_overhead_s`` values).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import replace
from importlib import resources
from pathlib import Path

from sim.catalogue import get_gpu, get_model
from sim.cost_model import StepCostModel, StepShape
from sim.efficiency import load_efficiency
from sim.engine.presets import EnginePreset, get_preset, preset_names
from sim.gemm_grid import grid_source
from sim.host_costs import HostCosts, load_host_profile

#: Every preset (aliases are not presets and are not calibrated on their own).
PRESETS = preset_names()


def modeled_step_without_overhead_s(
    preset: EnginePreset, bandwidth: float | None = None, host: HostCosts | None = None
) -> float:
    """The physics part of the calibration step (everything but the fixed per-step overhead):
    the operator classes and the engine's host terms per layer and per sequence
    (``sim/data/host_costs.yaml``, or ``host`` when given).

    ``bandwidth`` replaces the fitted bandwidth efficiency (to propagate its interval).
    """
    costs = host if host is not None else load_host_profile(preset.name).costs
    target = preset.calibration["target"]
    model = get_model(target["model"])
    gpu = get_gpu(target["gpu"])
    tp = int(target["num_gpus"])
    batch = int(target["batch_size"])
    context = int(target["context_tokens"])
    efficiency = load_efficiency(gpu.name)
    if bandwidth is not None:
        efficiency = replace(efficiency, bandwidth=bandwidth)
    cost = StepCostModel(model, gpu, tp, efficiency, 0.0, costs.per_sequence_overhead_s, host=costs)
    shape = StepShape(
        num_seqs=batch,
        num_tokens=batch,
        num_logit_tokens=batch,
        kv_read_tokens=batch * (context + 1),
        attention_pairs=batch * (context + 1),
    )
    return float(cost.step_time(shape))


def calibrated_overhead_s(name: str) -> float:
    """The fixed per-step overhead that makes preset ``name`` reproduce its measurement, or 0 when
    its other terms already exceed it (the overhead cannot be negative; the report says so)."""
    preset = get_preset(name)
    residual = float(preset.calibration["measured_tpot_s"]) - modeled_step_without_overhead_s(
        preset
    )
    return max(residual, 0.0)


def overhead_interval_s(name: str) -> tuple[float, float]:
    """The overhead's 95% interval, propagated from the bandwidth efficiency's interval or, on a
    GPU whose measured GEMM grid prices the linear layers, from the grid's 95th-percentile
    error against the measurements it leaves out (``sim/gemm_grid.py``).

    The measurement's own spread is not published, so this is the physics side's uncertainty only.
    """
    preset = get_preset(name)
    gpu = preset.calibration["target"]["gpu"]
    measured = float(preset.calibration["measured_tpot_s"])
    source = grid_source(gpu)
    if source is not None and "bf16_off_grid_p95_abs_error" in source:
        physics = modeled_step_without_overhead_s(preset)
        band = float(source["bf16_off_grid_p95_abs_error"]) * _linear_s(preset)
        return measured - physics - band, measured - physics + band
    lo_bw, hi_bw = _bandwidth_interval(gpu)
    # A higher bandwidth makes the physics faster, leaving more time to the overhead.
    return (
        measured - modeled_step_without_overhead_s(preset, lo_bw),
        measured - modeled_step_without_overhead_s(preset, hi_bw),
    )


def _linear_s(preset: EnginePreset) -> float:
    """The linear layers' share of the calibration step."""
    target = preset.calibration["target"]
    model, gpu = get_model(target["model"]), get_gpu(target["gpu"])
    costs = load_host_profile(preset.name).costs
    cost = StepCostModel(
        model, gpu, int(target["num_gpus"]), load_efficiency(gpu.name), 0.0, host=costs
    )
    batch = float(target["batch_size"])
    return float(cost.breakdown(StepShape(batch, batch, batch, batch, batch))["linear_s"])


def _bandwidth_interval(gpu: str) -> tuple[float, float]:
    import yaml

    text = resources.files("sim").joinpath("data/hardware_efficiency.yaml").read_text("utf-8")
    lo, hi = yaml.safe_load(text)[gpu]["ci95"]["bandwidth"]
    return float(lo), float(hi)


def rounded(value_s: float) -> float:
    """Overheads are shipped to 0.1 microsecond."""
    return round(value_s, 7)


def report() -> str:
    """A table of the calibration of every preset."""
    lines = ["preset      measured TPOT  physics part  step_overhead_s [95% interval]      source"]
    for name in PRESETS:
        preset = get_preset(name)
        physics = modeled_step_without_overhead_s(preset)
        measured = float(preset.calibration["measured_tpot_s"])
        lo, hi = overhead_interval_s(name)
        bound = " (at its bound 0: the other terms exceed the point)" if physics > measured else ""
        lines.append(
            f"{name:<11} {measured * 1e3:10.3f} ms  {physics * 1e3:9.3f} ms  "
            f"{rounded(max(measured - physics, 0.0)) * 1e3:7.4f} ms "
            f"[{max(lo, 0.0) * 1e3:.3f}, {max(hi, 0.0) * 1e3:.3f}]{bound}  "
            f"{preset.calibration['source']}"
        )
    return "\n".join(lines)


def write_presets(path: Path) -> None:
    """Rewrite the ``step_overhead_s`` line of each preset in ``path`` with its calibration."""
    text = path.read_text(encoding="utf-8")
    for name in PRESETS:
        value = rounded(calibrated_overhead_s(name))
        pattern = re.compile(
            rf"(^  {re.escape(name)}:\n(?:    .*\n)*?    step_overhead_s: )[^\n]*", re.M
        )
        text, count = pattern.subn(rf"\g<1>{value}", text)
        if count != 1:
            raise ValueError(f"{path}: no step_overhead_s line under preset {name}")
    path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="update sim/data/engine_presets.yaml")
    args = parser.parse_args(argv)
    print(report())
    if args.write:
        path = Path(str(resources.files("sim").joinpath("data/engine_presets.yaml")))
        write_presets(path)
        print(f"updated {path}")


if __name__ == "__main__":
    main()
