"""The fitting arithmetic behind ``tools/fit_kernels.py``: rooflines, bootstraps, monotone tables.

Every fitted kernel model has the form ``t = floor + (t_bw^p + t_fl^p)^(1/p)`` with
``t_bw = bytes / (η_bw · BW)`` and ``t_fl = flops / (η_fl · F)`` (the rounded roofline of
:func:`sim.cost_model.smooth_max`); some kernels drop one bound. The parameters are fitted by least
squares on the log of predicted over measured time (soft-L1 loss, 5 % scale, as
``calibration/operator_fit.py`` does), and their 95 % intervals are percentiles of refits on
bootstrap resamples of whole groups (shapes or configurations), never of single rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import least_squares

from sim.cost_model import smooth_max

FloatArray = NDArray[np.float64]

#: Loss of the fits: residuals beyond ~5 % count linearly, so a few odd shapes cannot steer them.
LOSS_SCALE = 0.05
#: Resamples of each bootstrap; seeds are fixed per fit so the written tables are reproducible.
NUM_BOOTSTRAP = 100
#: Every fitted parameter: optimiser start and bounds (floor in µs keeps the scales alike).
PARAMETERS = {
    "bandwidth": (0.7, 0.01, 1.0),
    "flops": (0.6, 0.01, 1.0),
    "roofline_p": (2.0, 1.0, 30.0),
    "unit_ns": (10.0, 0.0, 1e4),
    "floor_us": (5.0, 0.0, 500.0),
}


@dataclass(frozen=True)
class Roofline:
    """The unit-efficiency times of every row and which parameters the kernel's model uses.

    ``bw_s`` is bytes over the peak bandwidth and ``fl_s`` FLOPs over the peak throughput (either
    may be None when the kernel has no such bound); ``units`` (optional) counts work items that each
    cost a fitted ``unit_ns`` on top of the bounds; ``groups`` labels the rows resampled together.
    """

    bw_s: FloatArray | None
    fl_s: FloatArray | None
    measured_s: FloatArray
    groups: NDArray[np.int64]
    units: FloatArray | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The fitted parameters, in the optimiser's order."""
        names: list[str] = []
        if self.bw_s is not None:
            names.append("bandwidth")
        if self.fl_s is not None:
            names.append("flops")
        if self.bw_s is not None and self.fl_s is not None:
            names.append("roofline_p")
        if self.units is not None:
            names.append("unit_ns")
        return (*names, "floor_us")


def predict(
    model: Roofline, values: dict[str, float], rows: NDArray[np.intp] | None = None
) -> FloatArray:
    """The model's time in seconds of ``rows`` (all rows by default) at parameter ``values``."""
    sel = slice(None) if rows is None else rows
    floor_s = values["floor_us"] * 1e-6
    if model.units is not None:
        floor_s = floor_s + model.units[sel] * values["unit_ns"] * 1e-9
    bw = None if model.bw_s is None else model.bw_s[sel] / values["bandwidth"]
    fl = None if model.fl_s is None else model.fl_s[sel] / values["flops"]
    if bw is not None and fl is not None:
        return floor_s + smooth_max(bw, fl, values["roofline_p"])
    bound = bw if bw is not None else fl
    assert bound is not None
    return floor_s + bound


def _take(model: Roofline, rows: NDArray[np.intp]) -> Roofline:
    def cut(a: FloatArray | None) -> FloatArray | None:
        return None if a is None else a[rows]

    return Roofline(
        cut(model.bw_s),
        cut(model.fl_s),
        model.measured_s[rows],
        model.groups[rows],
        cut(model.units),
    )


def _jacobian(model: Roofline, names: tuple[str, ...], x: FloatArray) -> FloatArray:
    """d log(predicted) / d parameter, analytically (the fits run thousands of times)."""
    v = dict(zip(names, x, strict=True))
    pred = predict(model, v)
    cols: dict[str, FloatArray] = {"floor_us": np.full_like(pred, 1e-6)}
    if model.units is not None:
        cols["unit_ns"] = model.units * 1e-9
    a = None if model.bw_s is None else model.bw_s / v["bandwidth"]
    b = None if model.fl_s is None else model.fl_s / v["flops"]
    if a is not None and b is not None:
        p = v["roofline_p"]
        total = smooth_max(a, b, p)
        cols["bandwidth"] = -((a / total) ** (p - 1.0)) * a / v["bandwidth"]
        cols["flops"] = -((b / total) ** (p - 1.0)) * b / v["flops"]
        high = np.maximum(np.maximum(a, b), 1e-300)
        xa, xb = a / high, b / high
        with np.errstate(divide="ignore", invalid="ignore"):
            xlog = np.where(xa > 0, xa**p * np.log(xa), 0.0) + np.where(
                xb > 0, xb**p * np.log(xb), 0.0
            )
        s = xa**p + xb**p
        cols["roofline_p"] = total * (xlog / (p * s) - np.log(s) / p**2)
    elif a is not None:
        cols["bandwidth"] = -a / v["bandwidth"]
    elif b is not None:
        cols["flops"] = -b / v["flops"]
    return np.stack([cols[n] / pred for n in names], axis=1)


def fit(
    model: Roofline, rows: NDArray[np.intp] | None = None, start: dict[str, float] | None = None
) -> dict[str, float]:
    """Least-squares parameters of ``model`` on ``rows`` (all rows by default), from ``start``."""
    names = model.names
    x0 = np.array([PARAMETERS[n][0] if start is None else start[n] for n in names])
    lower = np.array([PARAMETERS[n][1] for n in names])
    upper = np.array([PARAMETERS[n][2] for n in names])
    sub = model if rows is None else _take(model, rows)
    log_measured = np.log(sub.measured_s)

    def residuals(x: FloatArray) -> FloatArray:
        return np.log(predict(sub, dict(zip(names, x, strict=True)))) - log_measured

    result = least_squares(
        residuals,
        x0,
        jac=lambda x: _jacobian(sub, names, x),
        bounds=(lower, upper),
        loss="soft_l1",
        f_scale=LOSS_SCALE,
        x_scale="jac",
    )
    return dict(zip(names, (float(v) for v in result.x), strict=True))


def bootstrap(
    model: Roofline, seed: int, start: dict[str, float], num: int = NUM_BOOTSTRAP
) -> dict[str, tuple[float, float]]:
    """95 % percentile intervals of each parameter over ``num`` resamples of whole groups.

    Refits start from ``start`` (the full fit): the same optimum, a fraction of the iterations.
    """
    rng = np.random.default_rng(seed)
    labels = np.unique(model.groups)
    members = {g: np.flatnonzero(model.groups == g) for g in labels}
    draws: dict[str, list[float]] = {n: [] for n in model.names}
    for _ in range(num):
        picked = rng.choice(labels, size=labels.size, replace=True)
        rows = np.concatenate([members[g] for g in picked])
        for name, value in fit(model, rows, start).items():
            draws[name].append(value)
    return {
        n: (float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))) for n, v in draws.items()
    }


@dataclass(frozen=True)
class Agreement:
    """Relative error ``predicted/measured − 1`` of some rows: count, mean, mean |.|, p90 |.|."""

    num_rows: int
    mean: float
    mean_abs: float
    p90_abs: float


def agreement(predicted_s: FloatArray, measured_s: FloatArray) -> Agreement:
    """Summarise the relative errors of ``predicted_s`` against ``measured_s``."""
    err = predicted_s / measured_s - 1.0
    return Agreement(
        int(err.size),
        float(err.mean()),
        float(np.abs(err).mean()),
        float(np.percentile(np.abs(err), 90)),
    )


def held_out_predictions(
    model: Roofline, folds: NDArray[np.int64], start: dict[str, float]
) -> FloatArray:
    """Each row predicted by a fit on every other fold (``folds`` labels the held-out units)."""
    out = np.empty_like(model.measured_s)
    for fold in np.unique(folds):
        test = np.flatnonzero(folds == fold)
        train = np.flatnonzero(folds != fold)
        out[test] = predict(model, fit(model, train, start), test)
    return out


def isotonic(values: Sequence[float]) -> FloatArray:
    """The non-decreasing sequence nearest ``values`` in least squares (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, count]
    for v in values:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, c2 = blocks.pop()
            m1, c1 = blocks.pop()
            blocks.append([(m1 * c1 + m2 * c2) / (c1 + c2), c1 + c2])
    return np.concatenate([np.full(int(c), m) for m, c in blocks])


@cache
def balanced_routing(num_tokens: int, num_experts: int, topk: int, ep: int) -> tuple[int, int]:
    """Distinct local experts and local (token, expert) slots of the collector's balanced routing.

    AIConfigurator's ``balanced_logits`` (collector/helper.py, ai-dynamo/aiconfigurator 095f58a)
    sends token t's i-th choice to ``(t + i·s) mod E`` with ``s = ceil(E/k)`` when ``T ≥ s``, else
    to ``floor((t·s/T + i·s) mod E)``: a deterministic spread that touches ``min(E, T·k)`` experts,
    not a random draw. Rank 0 of expert parallelism holds experts ``[0, E/ep)``.
    """
    stride = -(-num_experts // topk)
    t = np.arange(num_tokens, dtype=np.float64)[:, None]
    i = np.arange(topk, dtype=np.float64)[None, :]
    if num_tokens >= stride:
        chosen = np.mod(t + i * stride, num_experts)
    else:
        chosen = np.floor(np.mod(t * stride / num_tokens + i * stride, num_experts))
    local = chosen[chosen < num_experts // ep]
    return int(np.unique(local).size), int(local.size)


def sig(value: float, digits: int = 4) -> float:
    """``value`` rounded to ``digits`` significant digits (how the written files store numbers)."""
    return float(f"{value:.{digits}g}")


@dataclass(frozen=True)
class FittedKernel:
    """One fitted kernel model: its rounded parameters and intervals, and its predictions.

    ``values`` are in the optimiser's units (µs, ns), rounded as written; ``predicted_s`` are those
    rounded values' predictions of every row, ``held_out_s`` each row's prediction by a fit on the
    other folds.
    """

    model: Roofline
    values: dict[str, float]
    ci95: dict[str, tuple[float, float]]
    predicted_s: FloatArray
    held_out_s: FloatArray


def fit_kernel(model: Roofline, folds: NDArray[np.int64], seed: int) -> FittedKernel:
    """Fit ``model``, bootstrap its intervals over its groups, and hold out each of ``folds``."""
    full = fit(model)
    values = {k: sig(v) for k, v in full.items()}
    ci = {k: (sig(lo), sig(hi)) for k, (lo, hi) in bootstrap(model, seed, full).items()}
    # The interval is of the refits; a rounded estimate on its edge stays inside it.
    ci = {k: (min(lo, values[k]), max(hi, values[k])) for k, (lo, hi) in ci.items()}
    held_out = held_out_predictions(model, folds, full)
    return FittedKernel(model, values, ci, predict(model, values), held_out)


def written(
    fitted: FittedKernel, names: dict[str, str]
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Parameters and intervals in SI units under their written ``names`` (µs, ns converted)."""
    scale = {"floor_us": 1e-6, "unit_ns": 1e-9}
    params = {names[k]: sig(v * scale.get(k, 1.0)) for k, v in fitted.values.items()}
    ci = {
        names[k]: [sig(lo * scale.get(k, 1.0)), sig(hi * scale.get(k, 1.0))]
        for k, (lo, hi) in fitted.ci95.items()
    }
    return params, ci


def agreement_fields(fitted: FittedKernel) -> dict[str, float]:
    """In-sample and held-out mean and 90th-percentile |relative error|, as written."""
    a = agreement(fitted.predicted_s, fitted.model.measured_s)
    h = agreement(fitted.held_out_s, fitted.model.measured_s)
    return {
        "in_sample_mean_abs": round(a.mean_abs, 4),
        "in_sample_p90_abs": round(a.p90_abs, 4),
        "held_out_mean_abs": round(h.mean_abs, 4),
        "held_out_p90_abs": round(h.p90_abs, 4),
    }
