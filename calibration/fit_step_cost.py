"""Fit the engine's fixed step overheads to per-step timings (vLLM ``Iteration(...)`` lines).

vLLM 0.14+ with ``--enable-logging-iteration-details`` logs each step's batch composition and wall
time. Each step is priced by the cost model without its fixed part — linear layers, sampling and
all-reduce for ``N = context tokens + generation tokens`` tokens and one logit row per generation
token and per context request — and the remainder is regressed on the scheduled sequences:
``elapsed − T_model = s + b·B`` (the model's ``T_fixed``), by robust least squares (soft-L1,
scale 1 ms). Attention is left out because the line gives no context lengths; its time is absorbed
into ``s`` and ``b``. The 95 % interval is from the Gauss–Newton covariance ``σ²(JᵀJ)⁻¹``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from sim.artifacts.schema import StepTable
from sim.catalogue import get_gpu, get_model
from sim.cost_model import StepCostModel
from sim.efficiency import load_efficiency
from sim.errors import CalibrationError

MIN_STEPS = 5
Z95 = 1.959964


@dataclass(frozen=True)
class StepFit:
    """Fitted overheads (seconds), their 95 % intervals, residual spread and steps used."""

    values: dict[str, float]
    ci95: dict[str, tuple[float, float]]
    residual_rms_s: float
    num_steps: int
    method: str


def model_time_s(steps: StepTable, gpu: str, model: str, tp: int) -> np.ndarray:
    """The cost model's time of each step without the fixed engine overhead."""
    cost = StepCostModel(get_model(model), get_gpu(gpu), tp, load_efficiency(gpu), 0.0, 0.0)
    tokens = steps.num_context_tokens + steps.num_generation_tokens
    logits = steps.num_generation_tokens + steps.num_context_requests
    return cost.linear_s(tokens, logits) + cost.sampling_s(logits) + cost.allreduce_s(tokens)


def fit_steps(steps: StepTable, gpu: str, model: str, tp: int) -> StepFit:
    """Fit ``s`` and ``b`` to the non-dummy steps of ``steps``.

    Raise CalibrationError if fewer than :data:`MIN_STEPS` real steps carry an elapsed time.
    """
    keep = ~steps.is_dummy.astype(bool) & np.isfinite(steps.elapsed_s)
    if int(keep.sum()) < MIN_STEPS:
        raise CalibrationError(
            f"per-step fit needs at least {MIN_STEPS} timed steps, found {int(keep.sum())}"
        )
    remainder = (steps.elapsed_s - model_time_s(steps, gpu, model, tp))[keep]
    num_seqs = (steps.num_context_requests + steps.num_generation_requests)[keep].astype(float)

    def residuals(x_ms: np.ndarray) -> np.ndarray:
        return (x_ms[0] + x_ms[1] * num_seqs) * 1e-3 - remainder

    start, bounds = np.array([1.0, 0.01]), ([0.0, 0.0], [np.inf, np.inf])
    result = least_squares(residuals, start, bounds=bounds, loss="soft_l1", f_scale=1e-3)
    dof = max(1, remainder.size - 2)
    sigma2 = float(np.sum(result.fun**2) / dof)
    jac = np.asarray(result.jac)
    cov = sigma2 * np.linalg.pinv(jac.T @ jac)
    se = np.sqrt(np.clip(np.diag(cov), 0.0, None)) * 1e-3
    x = np.asarray(result.x) * 1e-3
    names = ("step_overhead_s", "per_sequence_overhead_s")
    return StepFit(
        values={n: float(x[i]) for i, n in enumerate(names)},
        ci95={
            n: (float(max(0.0, x[i] - Z95 * se[i])), float(x[i] + Z95 * se[i]))
            for i, n in enumerate(names)
        },
        residual_rms_s=float(np.sqrt(np.mean(result.fun**2))),
        num_steps=int(remainder.size),
        method=(
            "robust least squares (soft_l1, 1 ms) of step elapsed time minus the cost model's "
            "linear, sampling and all-reduce time on s + b x scheduled sequences; attention "
            "absorbed (no context lengths in the log); 95% interval from the covariance"
        ),
    )
