"""Fit the linear-layer term of the step cost model to measured H100 operator timings.

The cost model prices a forward's linear layers as the p-norm
``(t_bw^p + t_fl^p)^(1/p) + G·t_0`` of the memory bound ``t_bw = w_bytes/(TP·η_bw·BW)`` and the
compute bound ``t_fl = 2·P·N/(TP·η_fl·F)``, plus a fixed ``t_0`` for each of the ``G = 4·L + 1``
GEMM kernels (:meth:`sim.cost_model.StepCostModel.linear_s`). All four of ``η_bw, η_fl, p, t_0``
are fitted jointly, through ``linear_s`` itself, to the per-operator latencies LLMServingSim
measured for Llama-3.1-8B on one H100 SXM (summed over one forward: 32 layers of projections plus
the lm_head), then checked, without refitting, against the same profiler's Llama-3.1-8B at TP2 and
Llama-3.1-70B at TP4 and against Vidur's H100 profiles of Llama-2-7B and Llama-2-70B. Run
``python -m calibration.operator_fit [--shared PATH] [--write]``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy.optimize import least_squares

from calibration.hardware_efficiency import (
    FIELDS,
    FIT_GPU,
)
from sim.catalogue import GPU, Model, get_gpu, get_model
from sim.cost_model import Efficiency, StepCostModel, gemms_per_forward
from sim.errors import CalibrationError

FloatArray = NDArray[np.float64]

LLMSERVINGSIM_DIR = Path("data/gpu-profiles/llmservingsim/profiler/v0/perf_models/H100/meta-llama")
VIDUR_DIR = Path("data/gpu-profiles/vidur/profiling/compute/h100/meta-llama")
#: Token ranges of the agreement table: decode, speculative verify, near the ridge, prefill.
TOKEN_RANGES = ((1, 16), (17, 128), (129, 512), (513, 2048))
#: soft-L1 loss, 5 % scale: residuals beyond ~5 % (the ridge corner, see docs) count linearly.
LOSS: Literal["soft_l1"] = "soft_l1"
LOSS_SCALE = 0.05
BOOTSTRAP_SEED, NUM_BOOTSTRAP = 20250, 200
#: Optimiser start and bounds of (η_bw, η_fl, p, t_0 in µs; µs keeps the four on one scale).
X0 = (0.8, 0.8, 2.0, 2.0)
LOWER, UPPER = (0.05, 0.05, 1.0, 0.0), (1.0, 1.0, 50.0, 20.0)
UNFUSED_OPS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
VIDUR_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")


@dataclass(frozen=True)
class ForwardProfile:
    """Measured linear-layer time of one whole forward, one entry per profiled token count.

    ``includes_lm_head`` says whether ``measured_s`` holds the lm_head over all ``num_tokens``
    (LLMServingSim) or only the transformer body (Vidur profiles no lm_head).
    """

    label: str
    model: Model
    tp: int
    num_tokens: FloatArray
    measured_s: FloatArray
    includes_lm_head: bool


@dataclass(frozen=True)
class RangeError:
    """Relative error ``predicted/measured − 1`` of one profile over one token range."""

    label: str
    first_tokens: int
    last_tokens: int
    num_points: int
    mean: float
    mean_abs: float
    max_abs: float


@dataclass(frozen=True)
class OperatorFit:
    """The fitted efficiency, a bootstrap 95 % interval per field, and the profile fitted.

    ``ci95`` is keyed by the :class:`Efficiency` field names.
    """

    efficiency: Efficiency
    ci95: dict[str, tuple[float, float]]
    profile: ForwardProfile


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except (OSError, pd.errors.ParserError) as exc:
        raise CalibrationError(f"{path}: cannot read operator profile ({exc})") from None


def load_llmservingsim(shared: Path, model_dir: str, tp: int, fused: bool = True) -> ForwardProfile:
    """Sum one forward's linear operators from an LLMServingSim ``layers.csv`` (ns per layer).

    The profiler times q/k/v and gate/up as separate GEMMs; vLLM and SGLang run one fused QKV and
    one fused gate-up GEMM. With ``fused`` (the default) the fused QKV is taken to run at the
    throughput q_proj achieved, ``t_qkv = t_q·(n_h + 2·n_kv)/n_h`` (k and v alone are small,
    launch-bound GEMMs that fusion removes), and gate-up as ``t_gate + t_up`` (two GEMMs of equal,
    already large shape). ``fused=False`` sums the seven GEMMs as measured.
    Raise CalibrationError if the file is missing or lacks an operator.
    """
    path = shared / LLMSERVINGSIM_DIR / model_dir / f"tp{tp}" / "layers.csv"
    table = _read_csv(path)
    wide = table.pivot_table(index="input", columns="layer_name", values="latency(ns)") * 1e-9
    missing = sorted(set((*UNFUSED_OPS, "lm_head")) - set(wide.columns))
    if missing:
        raise CalibrationError(f"{path}: operators {missing} not profiled")
    model = get_model(model_dir.lower())
    spec = model.spec
    if fused:
        qkv_scale = (spec.num_heads + 2 * spec.num_kv_heads) / spec.num_heads
        rest = wide[["o_proj", "gate_proj", "up_proj", "down_proj"]].sum(axis=1)
        per_layer = qkv_scale * wide["q_proj"] + rest
    else:
        per_layer = wide[list(UNFUSED_OPS)].sum(axis=1)
    total = spec.num_layers * per_layer + wide["lm_head"]
    label = f"LLMServingSim {model_dir} TP{tp}" + ("" if fused else " (unfused)")
    n, measured_s = wide.index.to_numpy(np.float64), total.to_numpy(np.float64)
    return ForwardProfile(label, model, tp, n, measured_s, includes_lm_head=True)


def load_vidur(
    shared: Path, model_dir: str, model_name: str, tp: int, max_tokens: int = 2048
) -> ForwardProfile:
    """Sum one forward's body GEMMs (fused QKV, O, fused gate-up, down; ms medians) from Vidur.

    Raise CalibrationError if the file is missing or has no rows at ``tp``.
    """
    path = shared / VIDUR_DIR / model_dir / "mlp.csv"
    table = _read_csv(path)
    rows = table[(table["num_tensor_parallel_workers"] == tp) & (table["num_tokens"] <= max_tokens)]
    if rows.empty:
        raise CalibrationError(f"{path}: no rows with num_tensor_parallel_workers == {tp}")
    rows = rows.sort_values("num_tokens")
    model = get_model(model_name)
    per_layer_ms = rows[[f"time_stats.{op}.median" for op in VIDUR_OPS]].sum(axis=1)
    n = rows["num_tokens"].to_numpy(np.float64)
    measured_s = model.spec.num_layers * per_layer_ms.to_numpy(np.float64) * 1e-3
    return ForwardProfile(f"Vidur {model_dir} TP{tp}", model, tp, n, measured_s, False)


def predict_s(profile: ForwardProfile, efficiency: Efficiency, gpu: GPU) -> FloatArray:
    """The cost model's linear-layer time for each of the profile's token counts.

    With the lm_head profiled over every token this is ``linear_s(N, N)`` itself. A body-only
    profile is priced from the same call: both bounds are proportional to the parameters ``P``
    (``t_bw ∝ P``, ``t_fl ∝ P·N`` for a dense layer), so their p-norm is homogeneous of degree one
    in ``P`` and the body's roofline is ``linear_s``'s roofline times the body's share
    ``L·(attention + 3·H·I) / dense_linear_params``; the floor keeps the body's ``4·L`` GEMMs.
    """
    n = profile.num_tokens
    model = StepCostModel(profile.model, gpu, profile.tp, efficiency, step_overhead_s=0.0)
    whole = model.linear_s(n, n)
    if profile.includes_lm_head:
        return whole
    m = profile.model
    num_gemms = gemms_per_forward(m)
    floor_s = efficiency.gemm_floor_s
    body_params = m.spec.num_layers * (m.attention_params_per_layer + m.expert_params_per_layer)
    return (whole - num_gemms * floor_s) * body_params / m.dense_linear_params + (
        num_gemms - 1
    ) * floor_s


def efficiency_of(x: FloatArray, sharp: bool = False) -> Efficiency:
    """The :class:`Efficiency` an optimiser vector ``(η_bw, η_fl[, p, t_0 in µs])`` stands for.

    With ``sharp`` only the two fractions are free: the sharp maximum and no per-GEMM floor.
    Raise ValueError if a value is outside the Efficiency's domain.
    """
    if sharp:
        return Efficiency(float(x[0]), float(x[1]))
    return Efficiency(float(x[0]), float(x[1]), float(x[2]), float(x[3]) * 1e-6)


def _octave_weights(num_tokens: FloatArray) -> FloatArray:
    # The profile samples every N in 1..2048, so unweighted the prefill range 513-2048 would carry
    # 75 % of the fit. Weight w ∝ 1/N gives each octave of N equal weight (decode sizes matter as
    # much as prefill); residuals are multiplied by sqrt(w), normalised to mean square 1.
    w = 1.0 / num_tokens
    return np.sqrt(w / w.mean())


def _solve(
    profile: ForwardProfile,
    gpu: GPU,
    index: NDArray[np.intp],
    x0: FloatArray,
    weighted: bool,
    sharp: bool,
) -> FloatArray:
    sub = replace(
        profile, num_tokens=profile.num_tokens[index], measured_s=profile.measured_s[index]
    )
    scale = _octave_weights(sub.num_tokens) if weighted else np.ones_like(sub.num_tokens)

    def residuals(x: FloatArray) -> FloatArray:
        predicted = predict_s(sub, efficiency_of(x, sharp), gpu)
        return scale * (predicted / sub.measured_s - 1.0)

    free = 2 if sharp else 4
    result = least_squares(
        residuals, x0[:free], bounds=(LOWER[:free], UPPER[:free]), loss=LOSS, f_scale=LOSS_SCALE
    )
    if not result.success:
        raise CalibrationError(f"{profile.label}: efficiency fit failed ({result.message})")
    return np.asarray(result.x, dtype=np.float64)


def fit_efficiency(
    profile: ForwardProfile,
    gpu: GPU,
    rng: np.random.Generator,
    num_bootstrap: int = NUM_BOOTSTRAP,
    weighted: bool = True,
    sharp: bool = False,
) -> OperatorFit:
    """Fit ``η_bw, η_fl, p, t_0`` jointly to ``profile`` on relative error, with bootstrap 95 % CIs.

    With ``sharp`` only ``η_bw, η_fl`` are fitted under the sharp maximum and no floor (the shape
    the model had before the rounded roofline; kept for comparison). The bootstrap resamples the
    profiled token counts with replacement and refits; its percentile interval measures how much
    the fit depends on which points were measured, not how far the model's shape is from the data
    (the agreement tables show that).
    Raise CalibrationError if the optimiser does not converge.
    """
    every = np.arange(profile.num_tokens.size)
    best = _solve(profile, gpu, every, np.array(X0), weighted, sharp)
    resamples = (rng.integers(0, every.size, every.size) for _ in range(num_bootstrap))
    runs = [_solve(profile, gpu, index, best, weighted, sharp) for index in resamples]
    draws = np.array(runs).reshape(-1, best.size)
    lo, hi = np.percentile(draws, [2.5, 97.5], axis=0) if num_bootstrap else (best, best)
    low, high = efficiency_of(lo, sharp), efficiency_of(hi, sharp)
    return OperatorFit(
        efficiency=efficiency_of(best, sharp),
        ci95={f: (float(getattr(low, f)), float(getattr(high, f))) for f in FIELDS},
        profile=profile,
    )


def range_errors(profile: ForwardProfile, efficiency: Efficiency, gpu: GPU) -> list[RangeError]:
    """The relative error of the cost model against ``profile`` in each of :data:`TOKEN_RANGES`."""
    error = predict_s(profile, efficiency, gpu) / profile.measured_s - 1.0
    rows = []
    for first, last in TOKEN_RANGES:
        part = error[(profile.num_tokens >= first) & (profile.num_tokens <= last)]
        if part.size:
            mean, abs_part = float(part.mean()), np.abs(part)
            row = (int(part.size), mean, float(abs_part.mean()), float(abs_part.max()))
            rows.append(RangeError(profile.label, first, last, *row))
    return rows


def fit_profile(shared: Path) -> ForwardProfile:
    """The profile the shipped efficiencies are fitted to: Llama-3.1-8B, one H100, fused GEMMs."""
    return load_llmservingsim(shared, "Llama-3.1-8B", tp=1)


def check_profiles(shared: Path) -> list[ForwardProfile]:
    """The out-of-sample profiles: other TP degrees and models, from both profilers."""
    profiles = [
        load_llmservingsim(shared, "Llama-3.1-8B", tp=2),
        load_llmservingsim(shared, "Llama-3.1-70B", tp=4),
    ]
    for model_dir, name in (("Llama-2-7b-hf", "llama-2-7b"), ("Llama-2-70b-hf", "llama-2-70b")):
        profiles.extend(load_vidur(shared, model_dir, name, tp) for tp in (1, 2, 4, 8))
    return profiles


def run_fit(shared: Path, num_bootstrap: int = NUM_BOOTSTRAP) -> OperatorFit:
    """Fit the shipped H100 SXM efficiencies with the fixed bootstrap seed."""
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    return fit_efficiency(fit_profile(shared), get_gpu(FIT_GPU), rng, num_bootstrap)


if __name__ == "__main__":
    from calibration.operator_fit_report import main

    raise SystemExit(main())
