"""Confidence intervals for autocorrelated simulation output: batch means, slopes, quantiles.

Latencies of consecutive requests in a queue are correlated, so intervals that assume independent
samples are too narrow. Every interval here uses the method of batch means (Law, *Simulation
Modeling and Analysis*, 5th ed., §9.5.3): the samples, in time order, are cut into
:data:`NUM_BATCHES` consecutive batches whose means are close to independent once a batch is long
against the correlation time, and the spread of those means gives the variance.

* A **trend** is the least-squares slope of the batch means against the batches' mean times, with
  a Student t interval on ``B − 2`` degrees of freedom, widened to at least the worst case that
  any correlation allows: the slope is ``Σ c_i y_i`` with ``Σ c_i = 0``, and since
  ``|Cov(y_i, y_j)| ≤ σ²`` its variance is at most ``(σ Σ|c_i|)²``, ``σ`` being the spread of the
  batch means about the line. Near saturation a queue's waiting time wanders for longer than a
  batch, so batch means of a stable queue can show a "trend" the t interval would take for
  growth; this bound does not shrink with the number of batches, only with the span.
* A **mean** gets a t interval on ``B − 1`` degrees of freedom.
* A **quantile** gets the distribution-free order-statistic interval (Hahn & Meeker, *Statistical
  Intervals*, 2nd ed., §5.2): ranks ``l, u`` with ``P(l ≤ Binomial(n, q) < u) ≥ 1 − α``, computed
  for an effective sample size ``n / c``, where ``c ≥ 1`` is the batch-means variance of the
  share of samples at or below the estimate over its binomial variance. ``c = 1`` gives the
  classical interval for independent samples; correlation only widens it.
* A **proportion** gets the Clopper–Pearson interval on the same effective sample size.

Batch means of a queue near saturation stay correlated when a batch is shorter than the time
the queue takes to forget a burst; the variance from batch means is then widened by their lag-1
correlation ρ as for an AR(1) series, ``(1 + ρ)/(1 − ρ)`` (ρ floored at 0 and capped at
:data:`MAX_LAG1_CORRELATION`), for slopes and shares alike.

All intervals are two-sided at :data:`CONFIDENCE` (90%), so each side is a one-sided 95% bound:
a decision "below the bound" or "above the bound" is taken at 95% confidence.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import stats

NUM_BATCHES = 20
CONFIDENCE = 0.90
#: Cap on the lag-1 correlation used to widen an interval (a factor of at most 19 in variance).
MAX_LAG1_CORRELATION = 0.9

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class Interval:
    """A point estimate and its two-sided interval (``low`` may be -inf, ``high`` inf)."""

    value: float
    low: float
    high: float

    def as_dict(self) -> dict[str, float | None]:
        def finite(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {"value": finite(self.value), "low": finite(self.low), "high": finite(self.high)}


def batch_slices(num_samples: int, num_batches: int = NUM_BATCHES) -> list[slice]:
    """``num_batches`` consecutive slices of near-equal length covering ``range(num_samples)``.

    Raise ValueError if there are fewer samples than batches.
    """
    if num_samples < num_batches:
        raise ValueError(f"{num_samples} samples cannot make {num_batches} batches")
    edges = np.linspace(0, num_samples, num_batches + 1).round().astype(int)
    return [slice(int(a), int(b)) for a, b in itertools.pairwise(edges)]


def ar1_inflation(series: FloatArray) -> float:
    """``(1 + ρ) / (1 − ρ)`` for the lag-1 correlation ρ of ``series`` (floored at 0, capped)."""
    centred = series - series.mean()
    denominator = float((centred * centred).sum())
    if len(series) < 3 or not denominator > 0:
        return 1.0
    rho = float((centred[1:] * centred[:-1]).sum()) / denominator
    rho = min(max(rho, 0.0), MAX_LAG1_CORRELATION)
    return (1.0 + rho) / (1.0 - rho)


def slope_interval(x: FloatArray, y: FloatArray) -> Interval:
    """Least-squares slope of ``y`` on ``x`` with its t interval (``len(x) − 2`` dof).

    Raise ValueError if there are fewer than three points or ``x`` does not vary.
    """
    n = len(x)
    if n < 3:
        raise ValueError(f"a slope interval needs at least 3 points, got {n}")
    dx = x - x.mean()
    sxx = float((dx * dx).sum())
    if not sxx > 0:
        raise ValueError("a slope needs x values that vary")
    slope = float((dx * (y - y.mean())).sum() / sxx)
    residual = y - y.mean() - slope * dx
    se = math.sqrt(float((residual * residual).sum()) / (n - 2) / sxx * ar1_inflation(residual))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 2)) * se
    return Interval(slope, slope - half, slope + half)


def trend(times: FloatArray, values: FloatArray) -> Interval:
    """Slope of ``values`` against ``times`` (samples in time order) over batch means: the t
    interval of :func:`slope_interval`, or the worst-case-correlation one if that is wider.

    Raise ValueError if there are fewer samples than batches.
    """
    slices = batch_slices(len(times))
    x = np.array([times[s].mean() for s in slices])
    y = np.array([values[s].mean() for s in slices])
    fitted = slope_interval(x, y)
    dx = x - x.mean()
    weights = dx / float((dx * dx).sum())  # slope = Σ weights_i · y_i
    residual = y - y.mean() - fitted.value * dx
    spread = math.sqrt(float((residual * residual).sum()) / (len(y) - 2))
    worst = float(stats.norm.ppf(0.5 + CONFIDENCE / 2)) * spread * float(np.abs(weights).sum())
    half = max(fitted.high - fitted.value, worst)
    return Interval(fitted.value, fitted.value - half, fitted.value + half)


def mean_interval(values: FloatArray, weights: FloatArray) -> Interval:
    """Weighted mean of ``values`` (in time order) with its batch-means t interval.

    Raise ValueError if there are fewer samples than batches.
    """
    slices = batch_slices(len(values))
    means = np.array([_weighted_mean(values[s], weights[s]) for s in slices])
    total = _weighted_mean(values, weights)
    spread = math.sqrt(float(np.var(means, ddof=1)) / len(means))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, len(means) - 1)) * spread
    return Interval(total, total - half, total + half)


def _weighted_mean(values: FloatArray, weights: FloatArray) -> float:
    total = float(weights.sum())
    return float((values * weights).sum() / total) if total > 0 else math.nan


def variance_inflation(indicator: FloatArray, weights: FloatArray) -> float:
    """How much correlation inflates the variance of a share: batch-means / binomial, at least 1.

    ``indicator`` (0/1, in time order) marks the samples counted in the share.
    """
    slices = batch_slices(len(indicator))
    total = float(weights.sum())
    share = _weighted_mean(indicator, weights)
    binomial = share * (1.0 - share) / total
    if not binomial > 0:
        return 1.0
    means = np.array([_weighted_mean(indicator[s], weights[s]) for s in slices])
    sizes = np.array([float(weights[s].sum()) for s in slices])
    # Var of the overall share from the batch means: s² / B, times mean(size²) / mean(size)²
    # for batches of unequal weight (1 when they are equal).
    unequal = float((sizes**2).mean() / sizes.mean() ** 2)
    # Batches shorter than the correlation time leave the batch means correlated; their lag-1
    # correlation widens the variance as for an AR(1) series, as for the slope.
    batch_var = float(np.var(means, ddof=1)) / len(means) * unequal * ar1_inflation(means)
    return max(1.0, batch_var / binomial)


def quantile_interval(values: FloatArray, weights: FloatArray, q: float) -> Interval:
    """The ``q`` quantile (0 < q < 1) of a weighted sample in time order, with its interval.

    The point value is the smallest value whose cumulative weight reaches ``q`` of the total; the
    interval's ends are the values at the quantile levels ``l / n_eff`` and ``u / n_eff``.
    Raise ValueError if ``q`` is outside (0, 1) or there are fewer samples than batches.
    """
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile level must be in (0, 1), got {q}")
    order = np.argsort(values, kind="stable")
    sorted_values, cum = values[order], np.cumsum(weights[order])
    total = float(cum[-1])

    def at(level: float) -> float:
        if level <= 0.0:
            return -math.inf
        if level > 1.0:
            return math.inf
        index = int(np.searchsorted(cum, level * total - 1e-9 * total, side="left"))
        return float(sorted_values[min(index, len(sorted_values) - 1)])

    point = at(q)
    inflation = variance_inflation((values <= point).astype(np.float64), weights)
    n_eff = max(1, int(total / inflation))
    alpha = 1.0 - CONFIDENCE
    low_rank = float(stats.binom.ppf(alpha / 2, n_eff, q))  # l: P(B < l) <= alpha/2
    high_rank = float(stats.binom.ppf(1.0 - alpha / 2, n_eff, q)) + 1.0
    return Interval(point, at(low_rank / n_eff), at(high_rank / n_eff))


def proportion_interval(indicator: FloatArray, weights: FloatArray) -> Interval:
    """The weighted share of ``indicator`` (0/1, in time order) with a Clopper–Pearson interval
    on the effective sample size. Raise ValueError if there are fewer samples than batches.
    """
    total = float(weights.sum())
    share = _weighted_mean(indicator, weights)
    n_eff = max(1, int(total / variance_inflation(indicator, weights)))
    k = share * n_eff
    alpha = 1.0 - CONFIDENCE
    low = 0.0 if k <= 0 else float(stats.beta.ppf(alpha / 2, k, n_eff - k + 1))
    high = 1.0 if k >= n_eff else float(stats.beta.ppf(1 - alpha / 2, k + 1, n_eff - k))
    return Interval(share, low, high)
