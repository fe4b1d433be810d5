"""What ``python -m calibration.operator_fit`` prints and writes: the fit with its intervals,
in-sample and out-of-sample range-error tables and the sensitivity runs, as the documentation
quotes them (the fit itself: :mod:`calibration.operator_fit`)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import yaml

from calibration.hardware_efficiency import (
    FIELDS,
    FIT_GPU,
    SEPARATELY_FITTED,
    default_shared,
    efficiency_yaml,
    rounded,
    shipped_path,
)
from calibration.operator_fit import (
    BOOTSTRAP_SEED,
    LOSS,
    LOSS_SCALE,
    NUM_BOOTSTRAP,
    TOKEN_RANGES,
    OperatorFit,
    RangeError,
    check_profiles,
    fit_efficiency,
    load_llmservingsim,
    range_errors,
    run_fit,
)
from sim.catalogue import get_gpu
from sim.cost_model import Efficiency


def format_table(rows: list[RangeError]) -> str:
    """A Markdown table of range errors (mean signed, mean and worst absolute, in percent)."""
    lines = [
        "| profile | tokens | points | mean error | mean abs error | worst abs error |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.label} | {r.first_tokens}-{r.last_tokens} | {r.num_points} | {100 * r.mean:+.1f} % "
        f"| {100 * r.mean_abs:.1f} % | {100 * r.max_abs:.1f} % |"
        for r in rows
    ]
    return "\n".join(lines)


def format_range_means(rows: list[RangeError]) -> str:
    """A compact Markdown table of mean absolute error, a row per profile, a column per range."""
    lines = [
        "| profile | " + " | ".join(f"{a}-{b}" for a, b in TOKEN_RANGES) + " |",
        "|---|" + "---|" * len(TOKEN_RANGES),
    ]
    by_label: dict[str, dict[int, float]] = {}
    for r in rows:
        by_label.setdefault(r.label, {})[r.first_tokens] = r.mean_abs
    for label, errs in by_label.items():
        cells = [f"{100 * errs[a]:.1f} %" if a in errs else "-" for a, _ in TOKEN_RANGES]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def show(field: str, value: float) -> str:
    """One field's value as the report prints it (the floor in µs)."""
    return f"{value * 1e6:.2f} us" if field == "gemm_floor_s" else f"{value:.4f}"


def describe(eff: Efficiency) -> str:
    """The four fields on one line."""
    return ", ".join(f"{f} {show(f, getattr(eff, f))}" for f in FIELDS)


def fit_method() -> str:
    """How the shipped H100 SXM values are made, as the YAML states it."""
    return (
        f"joint least squares of bandwidth, flops, roofline_p and gemm_floor_s on the relative "
        f"error of StepCostModel.linear_s(N, N), {LOSS} loss (scale {LOSS_SCALE}), 1/N weights, "
        f"N = 1..2048; {NUM_BOOTSTRAP}-resample bootstrap over N (seed {BOOTSTRAP_SEED}); rounded"
    )


def report(shared: Path) -> tuple[OperatorFit, str]:
    """Fit, check and sensitivity runs, rendered as the Markdown the documentation quotes.

    Raise CalibrationError if a profile cannot be read or a fit fails.
    """
    gpu = get_gpu(FIT_GPU)
    fit = run_fit(shared)
    shipped = rounded(fit.efficiency)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    unfused = fit_efficiency(load_llmservingsim(shared, "Llama-3.1-8B", 1, False), gpu, rng, 0)
    uniform = fit_efficiency(fit.profile, gpu, rng, 0, weighted=False)
    sharp = fit_efficiency(fit.profile, gpu, rng, 0, sharp=True).efficiency
    profiles = [fit.profile, *check_profiles(shared)]
    out = [
        f"Fit ({fit.profile.label}, {FIT_GPU}, {fit.profile.num_tokens.size} points, "
        f"{LOSS} loss scale {LOSS_SCALE}, 1/N weights, {NUM_BOOTSTRAP} bootstrap resamples, "
        f"seed {BOOTSTRAP_SEED}):",
        "",
    ]
    out += [
        f"- {f} {show(f, getattr(fit.efficiency, f))} (95 % CI {show(f, lo)} to {show(f, hi)})"
        for f, (lo, hi) in fit.ci95.items()
    ]
    out += [
        f"- sensitivity: unfused q/k/v and gate/up summed as measured: "
        f"{describe(unfused.efficiency)}; unweighted points: {describe(uniform.efficiency)}",
        "",
        f"In-sample agreement (shipped values: {describe(shipped)}):",
        "",
        format_table(range_errors(fit.profile, shipped, gpu)),
        "",
        "Out-of-sample agreement (not fitted):",
        "",
        format_table([r for p in profiles[1:] for r in range_errors(p, shipped, gpu)]),
        "",
        f"For comparison, the sharp maximum without floor (p = inf, t_0 = 0) fitted the same way: "
        f"bandwidth {sharp.bandwidth:.4f}, flops {sharp.flops:.4f}; mean abs error per range:",
        "",
        format_range_means([r for p in profiles for r in range_errors(p, sharp, gpu)]),
    ]
    return fit, "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Print the fit and agreement tables; with ``--write`` regenerate the shipped YAML.

    Raise CalibrationError if the profiles cannot be read.
    """
    parser = argparse.ArgumentParser(prog="python -m calibration.operator_fit")
    parser.add_argument(
        "--shared", type=Path, default=default_shared(), help="../shared by default"
    )
    parser.add_argument("--write", action="store_true", help="regenerate the shipped YAML")
    args = parser.parse_args(argv)
    fit, text = report(args.shared)
    print(text)
    if args.write:
        target = shipped_path()
        shipped = yaml.safe_load(target.read_text("utf-8"))
        separate = {gpu: shipped[gpu] for gpu in SEPARATELY_FITTED if gpu in shipped}
        target.write_text(
            efficiency_yaml(fit.efficiency, fit.ci95, fit_method(), separate), "utf-8"
        )
        print(f"\nwrote {target.name}")
    return 0
