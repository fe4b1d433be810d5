"""Which step-cost parameters a set of measurements identifies, and their intervals.

:func:`select_identifiable` admits parameters in table order (the CPU overheads, least known a
priori, first; the GPU efficiencies, fitted to operator timings, last): a parameter stays free only
if, together with those already free, the residual Jacobian's columns normalised to unit length
have condition number at most :data:`MAX_CONDITION` (two columns at an angle below about 4° are one
direction to the data) and every free parameter's 95 % half-width ``1.96·sqrt((JᵀJ)⁻¹)`` is at
most :data:`MAX_RELATIVE_HALF_WIDTH` of ``max(|shipped value|, scale)``. :func:`parameter_intervals`
turns the Jacobian at a solution into 95 % intervals that always contain the estimate, and says
which parameters ended on a bound.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from calibration.parameters import FitParameter

Z95 = 1.959964
MAX_CONDITION = 30.0
#: A parameter is identified when its 95 % half-width is at most this fraction of its magnitude.
MAX_RELATIVE_HALF_WIDTH = 0.5
#: A value within this fraction of its range from a bound has ended on that bound.
BOUND_TOLERANCE = 1e-3


def select_identifiable(
    parameters: Sequence[FitParameter], jac: np.ndarray, shipped: dict[str, float]
) -> tuple[list[FitParameter], dict[str, str], float | None]:
    """Admit parameters in table order while the data still identify them.

    ``jac`` holds one column per parameter of d(residual)/d(value / scale). Returns the free
    parameters, the fixed ones with the reason, and the condition number of the free set's
    unit-normalised Jacobian (None when nothing is free). Never raises.
    """
    free: list[int] = []
    fixed: dict[str, str] = {}
    condition: float | None = None
    for k, p in enumerate(parameters):
        column = jac[:, k]
        if not np.any(column):
            fixed[p.name] = "no reported statistic moves when it changes"
            continue
        trial = [*free, k]
        sub = jac[:, trial]
        unit = sub / np.linalg.norm(sub, axis=0)
        singular = np.linalg.svd(unit, compute_uv=False)
        cond = float(singular[0] / singular[-1]) if singular[-1] > 0 else float("inf")
        if len(trial) > sub.shape[0] or cond > MAX_CONDITION:
            partners = ", ".join(parameters[j].name for j in free)
            fixed[p.name] = (
                f"the data cannot separate it from {partners} (Jacobian condition {cond:.3g} "
                f"> {MAX_CONDITION:g})"
            )
            continue
        cov = np.linalg.pinv(sub.T @ sub)
        half = Z95 * np.sqrt(np.clip(np.diag(cov), 0.0, None))
        widths = {parameters[j].name: half[n] * parameters[j].scale for n, j in enumerate(trial)}
        too_wide = [
            name
            for name, width in widths.items()
            if width
            > MAX_RELATIVE_HALF_WIDTH
            * max(abs(shipped[name]), next(q.scale for q in parameters if q.name == name))
        ]
        if too_wide:
            fixed[p.name] = (
                f"with it free, the 95% interval of {', '.join(too_wide)} would be wider than "
                f"half the value itself (its own half-width {widths[p.name]:.3g} {p.unit})"
            )
            continue
        free.append(k)
        condition = cond
    return [parameters[k] for k in free], fixed, condition


def parameter_intervals(
    free: Sequence[FitParameter],
    best: dict[str, float],
    residuals: np.ndarray,
    jac: np.ndarray,
    scales: dict[str, float],
) -> tuple[dict[str, tuple[float, float]], list[str]]:
    """95 % intervals of the free parameters and the bound warnings.

    Each interval is ``x ± 1.96·sd`` from ``(JᵀJ)⁻¹·max(1, χ²/dof)``, clipped to the bounds and
    widened to contain ``x``, so it always holds its estimate; a degenerate Jacobian gives the whole
    range. Never raises.
    """
    dof = residuals.size - len(free)
    chi2 = float(np.sum(residuals**2))
    inflation = max(1.0, chi2 / dof) if dof > 0 else 1.0
    cov = np.linalg.pinv(jac.T @ jac) * inflation
    half = Z95 * np.sqrt(np.clip(np.diag(cov), 0.0, None)) if len(free) else np.zeros(0)
    ci95: dict[str, tuple[float, float]] = {}
    warnings: list[str] = []
    for k, p in enumerate(free):
        x = best[p.name]
        informed = np.isfinite(half[k]) and float(np.sum(jac[:, k] ** 2)) > 0
        width = float(half[k]) * scales[p.name] if informed else p.upper - p.lower
        low, high = max(p.lower, x - width), min(p.upper, x + width)
        ci95[p.name] = (min(low, x), max(high, x))
        tolerance = BOUND_TOLERANCE * (p.upper - p.lower)
        for side, bound in (("lower", p.lower), ("upper", p.upper)):
            if abs(x - bound) <= tolerance:
                warnings.append(
                    f"{p.name} ended on its {side} bound {bound:g} {p.unit}: the data ask for a "
                    "value the model does not allow, so the cost model misses something here"
                )
    return ci95, warnings
