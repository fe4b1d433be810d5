"""Does one run at one request rate hold? Stability and the SLO, each with a confidence interval.

A run is judged on its steady window (:func:`sim.metrics.measurement_window`: warm-up and drain
excluded), starting no earlier than the end of its warm-up as MSER-5 finds it in the run's
first half (:mod:`reports.warmup`; ``warmup_share`` is that point as a share of the run). It
**holds** when all of these are shown at 95% confidence (the one-sided bounds of the 90%
intervals of :mod:`reports.intervals`):

1. *Served ≈ offered.* The node serves at least ``1 − δ`` of the offered rate, δ =
   :data:`MAX_OVERLOAD` (3%). What it leaves unserved accumulates in the system: the served
   share is ``1 − ΔN / (λ·Δt)``, with ``ΔN`` the growth of the number of requests in the system
   across the window (:func:`served_share`) and λ the arrivals in the window over its length.
2. *No growing backlog.* The waiting time (first scheduled − arrival) of the measured requests
   shows no upward trend: the slope of waiting time against arrival time, over batch means.
   When arrivals outpace service by a share ε, each request waits for the backlog ahead of it,
   ``W(t) ≈ Q(t)/μ``, so ``dW/dt = (λ − μ)/μ ≈ ε``: the slope is the overload itself. Any
   overload, however small, eventually breaks a latency SLO, so the check fails as soon as the
   slope is shown above :data:`MIN_TREND` (1 ms of waiting per second of arrivals, a floor that
   keeps numerical dust from counting as a trend); it holds when the slope's upper bound is at
   most δ and its lower bound at most :data:`MIN_TREND`.
3. *The SLO.* A percentile term ``p_q ≤ X`` is the statement ``P(latency > X) ≤ 1 − q``: it is
   decided on the share of samples above ``X`` (Clopper–Pearson on the effective sample size):
   its upper bound within ``1 − q`` is the percentile's upper confidence bound within ``X``, its
   lower bound above ``1 − q`` the percentile's lower bound above ``X`` (the order-statistic
   interval and the binomial one are the same statement). The percentile's order-statistic
   interval is reported beside it, and its value is the summary's (linear interpolation). A
   mean term is decided on its t interval, a goodput target on the share of requests within
   their per-request SLO.

It **fails** when any one of them is shown on the wrong side at 95% confidence, and is
**undecided** otherwise: the probe is then too short to tell, and the caller runs a longer one.
ITL terms are judged on the engine steps inside the window, each step weighted by the sequences
whose gap it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from reports.goodput import GoodputTarget
from reports.intervals import (
    CONFIDENCE,
    NUM_BATCHES,
    Interval,
    mean_interval,
    proportion_interval,
    quantile_interval,
    trend,
)
from reports.slo import SloTerm
from reports.warmup import mser5, time_average_in_system
from sim.metrics import goodput, measurement_window, weighted_percentiles

#: Largest tolerated overload δ: the served share must be at least 1 − δ, and the waiting-time
#: slope's upper bound at most δ seconds per second of arrivals.
MAX_OVERLOAD = 0.03
#: A waiting-time slope shown above this (s per s) is a growing backlog.
MIN_TREND = 1e-3
#: The fewest measured requests a verdict is taken on (each batch mean averages at least 10).
MIN_MEASURED = 10 * NUM_BATCHES
#: Bins over which the number of requests in the system is averaged for the served share.
SHARE_BINS = 200

HOLDS, FAILS, UNDECIDED = "holds", "fails", "undecided"
Target = SloTerm | GoodputTarget


@dataclass(frozen=True)
class Check:
    """One criterion: its name, its estimate with interval, the limit, and the verdict."""

    name: str
    estimate: Interval
    limit: str
    verdict: str
    share_above: Interval | None = None  # percentile terms: the share of samples above the bound
    point: str = HOLDS  # the verdict of the point estimate alone

    def as_dict(self) -> dict[str, Any]:
        out = {"name": self.name, **self.estimate.as_dict(), "limit": self.limit,
               "verdict": self.verdict}  # fmt: skip
        if self.share_above is not None:
            share = self.share_above.as_dict()
            out.update({f"share_above_{key}": value for key, value in share.items()})
        return out


def _upper_bounded(name: str, estimate: Interval, bound: float, strict: bool = False) -> Check:
    """``estimate <= bound`` (``<`` when strict): holds if its interval is below, fails if above."""
    below = estimate.high < bound if strict else estimate.high <= bound
    above = estimate.low >= bound if strict else estimate.low > bound
    verdict = HOLDS if below else FAILS if above else UNDECIDED
    point = estimate.value < bound if strict else estimate.value <= bound
    limit = f"{'<' if strict else '<='} {bound:g}"
    return Check(name, estimate, limit, verdict, point=HOLDS if point else FAILS)


def _backlog_check(slope: Interval) -> Check:
    """No growing backlog: fails if the slope is shown above MIN_TREND, holds if its interval
    lies below both MAX_OVERLOAD (upper end) and MIN_TREND (lower end)."""
    if slope.low > MIN_TREND:
        verdict = FAILS
    elif slope.high <= MAX_OVERLOAD:
        verdict = HOLDS
    else:
        verdict = UNDECIDED
    limit = f"low <= {MIN_TREND:g}, high <= {MAX_OVERLOAD:g}"
    point = HOLDS if slope.value <= MIN_TREND else FAILS
    return Check("waiting_time_slope", slope, limit, verdict, point=point)


def _lower_bounded(name: str, estimate: Interval, bound: float) -> Check:
    verdict = HOLDS if estimate.low >= bound else FAILS if estimate.high < bound else UNDECIDED
    point = HOLDS if estimate.value >= bound else FAILS
    return Check(name, estimate, f">= {bound:g}", verdict, point=point)


def served_share(
    arrival_at_s: NDArray[np.float64],
    finished_at_s: NDArray[np.float64],
    start: float,
    end: float,
    offered_rate_req_s: float,
) -> Interval:
    """The share of the offered rate the node served over ``[start, end)``, with its interval.

    The backlog's growth is the difference ``D`` between the time averages of ``N(t)`` over the
    window's last and first tenths, whose centres are 0.9 of the window apart; the share is
    ``1 − D / (λ · 0.9 T)``. Its variance is bounded by that of ``N(t)`` itself: for a
    stationary ``N`` with non-negative autocorrelation, ``Var D ≤ 2 Var N``, estimated over
    :data:`SHARE_BINS` bins of the window. The interval is the normal one at the module's
    confidence. Raise ValueError if the window is empty or nothing was offered.
    """
    if not end > start or not offered_rate_req_s > 0:
        raise ValueError(f"empty window [{start}, {end}] or no offered load")
    edges = np.linspace(start, end, SHARE_BINS + 1)
    averages = time_average_in_system(arrival_at_s, finished_at_s, edges)
    tenth = SHARE_BINS // 10
    deficit = float(averages[-tenth:].mean() - averages[:tenth].mean())
    scale = offered_rate_req_s * 0.9 * (end - start)
    half = float(stats.norm.ppf(0.5 + CONFIDENCE / 2)) * float(
        np.sqrt(2.0 * np.var(averages, ddof=1))
    )
    share = 1.0 - deficit / scale
    return Interval(share, share - half / scale, share + half / scale)


def judge_run(
    requests: dict[str, NDArray[Any]],
    steps: dict[str, NDArray[Any]],
    targets: list[Target],
    trim_fractions: tuple[float, float],
) -> dict[str, Any]:
    """The verdict on one run: ``holds``, ``fails`` or ``undecided``, with every check, and the
    run's ``point_verdict``: the same criteria read from point figures on the fixed steady window.

    A run whose steady window holds fewer than :data:`MIN_MEASURED` requests is undecided (too
    short). The point verdict is read on the fixed window (the trim fractions alone, not
    MSER-5's later start): it is what a user reading the run's steady-window summary sees.
    Raise ValueError if a trim fraction is outside [0, 0.5).
    """
    arrival, finish = requests["arrival_at_s"], requests["finished_at_s"]
    window = measurement_window(arrival, finish, 0, trim_fractions)
    warmup = mser5(arrival, finish, window.end_at_s)
    start, end = max(window.start_at_s, warmup.end_at_s), window.end_at_s
    measured = np.flatnonzero(window.measured & (arrival >= start))
    fixed = _window_checks(requests, steps, targets, window.measured, window.start_at_s, end)
    point = _point_verdict(fixed)
    if len(measured) < MIN_MEASURED:
        count = Interval(len(measured), len(measured), len(measured))
        too_few = Check("num_measured", count, f">= {MIN_MEASURED}", UNDECIDED)
        return {"verdict": UNDECIDED, "stability": UNDECIDED, "point_verdict": point,
                "offered_rate_req_s": None, "served_rate_req_s": None,
                "num_measured": len(measured), "window_s": [start, end],
                "checks": [too_few.as_dict()]}  # fmt: skip
    checks = _window_checks(requests, steps, targets, window.measured, start, end)
    stable = [c.verdict for c in checks[:2]]
    verdicts = {c.verdict for c in checks}
    verdict = FAILS if FAILS in verdicts else UNDECIDED if UNDECIDED in verdicts else HOLDS
    duration = end - start
    return {
        "verdict": verdict,
        "stability": FAILS if FAILS in stable else UNDECIDED if UNDECIDED in stable else HOLDS,
        "point_verdict": point,
        "offered_rate_req_s": float(((arrival >= start) & (arrival < end)).sum()) / duration,
        "served_rate_req_s": float(((finish >= start) & (finish < end)).sum()) / duration,
        "num_measured": len(measured),
        "window_s": [start, end],
        "warmup_share": warmup.fraction,
        "checks": [c.as_dict() for c in checks],
    }


def _window_checks(
    requests: dict[str, NDArray[Any]],
    steps: dict[str, NDArray[Any]],
    targets: list[Target],
    in_window: NDArray[np.bool_],
    start: float,
    end: float,
) -> list[Check]:
    """Every check on the requests of ``in_window`` that arrived in ``[start, end)``: served
    share, backlog, then one per target. Empty when too few requests are measured there."""
    arrival, finish = requests["arrival_at_s"], requests["finished_at_s"]
    measured = np.flatnonzero(in_window & (arrival >= start))
    if len(measured) < MIN_MEASURED or not end > start:
        return []
    measured = measured[np.argsort(arrival[measured], kind="stable")]
    offered = float(((arrival >= start) & (arrival < end)).sum()) / (end - start)
    share = served_share(arrival, finish, start, end, offered)
    waiting = requests["scheduled_at_s"][measured] - arrival[measured]
    return [
        _lower_bounded("served_fraction", share, 1.0 - MAX_OVERLOAD),
        _backlog_check(trend(arrival[measured], waiting)),
        *(_target_check(t, requests, steps, measured, start, end) for t in targets),
    ]


def _point_verdict(checks: list[Check]) -> str:
    """Holds when every check's point estimate meets its limit, fails otherwise; undecided
    when there are no checks (too few requests). The backlog's point slope must stay at most
    MIN_TREND, a percentile term's point value (the summary's) at most its bound."""
    if not checks:
        return UNDECIDED
    return HOLDS if all(c.point == HOLDS for c in checks) else FAILS


def _target_check(
    target: Target,
    requests: dict[str, NDArray[Any]],
    steps: dict[str, NDArray[Any]],
    measured: NDArray[np.int64],
    start: float,
    end: float,
) -> Check:
    arrival = requests["arrival_at_s"][measured]
    ttft = requests["first_token_at_s"][measured] - arrival
    e2e = requests["finished_at_s"][measured] - arrival
    out = requests["output_tokens"][measured]
    tpot = np.where(out > 1, (e2e - ttft) / np.maximum(out - 1, 1), 0.0)
    if isinstance(target, GoodputTarget):
        bad = (~goodput(ttft, tpot, e2e, target.bounds_ms)).astype(np.float64)
        interval = proportion_interval(bad, np.ones(len(bad)))
        good = Interval(1 - interval.value, 1 - interval.high, 1 - interval.low)
        return _lower_bounded(target.key, good, target.min_fraction)
    if target.metric == "itl":
        in_window = (steps["start_at_s"] >= start) & (steps["start_at_s"] < end)
        values = steps["duration_s"][in_window]
        weights = steps["num_regular_itl"][in_window].astype(np.float64)
    else:
        by_metric = {"ttft": ttft, "tpot": tpot[out > 1], "e2e_latency": e2e}
        values = by_metric[target.metric]
        weights = np.ones(len(values))
    values_ms = np.asarray(values, dtype=np.float64) * 1e3
    if target.stat == "mean":
        estimate = mean_interval(values_ms, weights)
        return _upper_bounded(target.key, estimate, target.bound_ms, target.strict)
    # p_q <= bound  ⟺  P(X > bound) <= 1 − q: decided on the share above the bound, the
    # quantile's own interval is reported beside it.
    q = int(target.stat[1:]) / 100.0
    above = values_ms >= target.bound_ms if target.strict else values_ms > target.bound_ms
    share = proportion_interval(above.astype(np.float64), weights)
    decided = _upper_bounded("share_above", share, 1.0 - q, target.strict)
    ranks = quantile_interval(values_ms, weights, q)
    # The value a run's summary reports: linear interpolation between order statistics.
    (value,) = weighted_percentiles(values_ms, weights.astype(np.int64), (round(100 * q),))
    estimate = Interval(value, ranks.low, ranks.high)
    limit = f"{'<' if target.strict else '<='} {target.bound_ms:g}"
    point = value < target.bound_ms if target.strict else value <= target.bound_ms
    return Check(target.key, estimate, limit, decided.verdict, share, HOLDS if point else FAILS)
