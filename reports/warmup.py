"""Where a run's warm-up ends: the MSER-5 truncation point of the number of requests in system.

A node starts empty, so its first seconds serve a batch that is still filling; counting them
makes a stable rate look as if the node fell behind. The fixed share a probe drops first
(:data:`reports.probes.PROBE_TRIM_FRACTIONS`) is a floor; the end of the warm-up is found from the
data with MSER-5 (White, "An effective truncation heuristic for bias reduction in simulation
output", *Simulation* 69(6), 1997; recommended by Hoad, Robinson & Davies, *JORS* 61, 2010):

* the time average of the number of requests in the system, ``N(t)``, is taken over
  :data:`NUM_BINS` equal bins of the run up to the end of its window, and averaged five bins at a
  time into ``K`` = :data:`NUM_BINS` / 5 values ``Z_1 … Z_K``;
* the truncation point is the ``d`` minimising ``Σ_{j>d} (Z_j − Z̄_d)² / (K − d)²`` (the squared
  standard error of the mean of what is kept), for ``d`` from 0 to ``K − 5``;
* the truncation point used is the minimum over ``d ≤ K/2`` (Hoad, Robinson & Davies keep at
  least half of the run). A global minimum past the middle is reported (``steady`` false) but
  decides nothing: MSER-5 is known to pick spurious minima among the last few batches, where the
  statistic rests on five or six values (White, Cobb & Spratt, *WSC* 2000, restrict the search
  to the first half for this reason). On a 20,000-request run of the default scenario (eagle3,
  28.5 req/s, seed 1) it put the warm-up's end at 0.875 of the run, while the served share
  (101%) and the waiting-time trend (below 0) showed the node stable: counting that as "no
  steady state" left a stable rate undecided however long it ran. Whether
  the node keeps up is decided on the window directly (served share, waiting-time trend:
  :mod:`reports.stability`); an overloaded node fails those.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

NUM_BINS = 200
BINS_PER_BATCH = 5


def time_average_in_system(
    arrival_at_s: NDArray[np.float64],
    finished_at_s: NDArray[np.float64],
    edges: NDArray[np.float64],
) -> NDArray[np.float64]:
    """The time average of the number of requests in the system (arrived, not finished) over
    each bin ``[edges[i], edges[i+1])``; unfinished requests stay in the system. Raise ValueError
    if ``edges`` is not strictly increasing."""
    widths = np.diff(edges)
    if len(widths) == 0 or not (widths > 0).all():
        raise ValueError("bin edges must be strictly increasing")
    finish = finished_at_s[~np.isnan(finished_at_s)]
    times = np.concatenate([arrival_at_s, finish])
    steps = np.concatenate([np.ones(len(arrival_at_s)), -np.ones(len(finish))])
    order = np.argsort(times, kind="stable")
    times, count = times[order], np.cumsum(steps[order])
    # ∫N dt is piecewise linear between events, so interpolating it at the edges is exact.
    area = np.concatenate([[0.0], np.cumsum(count[:-1] * np.diff(times))])
    at_edges = np.interp(edges, times, area, left=0.0, right=area[-1]) + np.where(
        edges > times[-1], (edges - times[-1]) * count[-1], 0.0
    )
    return np.asarray(np.diff(at_edges) / widths, dtype=np.float64)


@dataclass(frozen=True)
class Truncation:
    """The end of the warm-up (searched in the first half), and whether MSER-5's unrestricted
    minimum also lies there (``steady``)."""

    end_at_s: float
    steady: bool
    fraction: float  # truncation point as a share of the run up to the window's end


def mser5(
    arrival_at_s: NDArray[np.float64], finished_at_s: NDArray[np.float64], end_at_s: float
) -> Truncation:
    """The MSER-5 truncation point of ``N(t)`` over ``[first arrival, end_at_s)``.

    Raise ValueError if ``end_at_s`` is not after the first arrival.
    """
    start = float(arrival_at_s.min())
    if not end_at_s > start:
        raise ValueError(f"the window end {end_at_s} is not after the first arrival {start}")
    edges = np.linspace(start, end_at_s, NUM_BINS + 1)
    z = time_average_in_system(arrival_at_s, finished_at_s, edges)
    z = z.reshape(-1, BINS_PER_BATCH).mean(axis=1)
    k = len(z)
    scores = []
    for d in range(k - 4):
        kept = z[d:]
        scores.append(float(((kept - kept.mean()) ** 2).sum()) / (k - d) ** 2)
    d_best = int(np.argmin(scores))
    d_used = int(np.argmin(scores[: k // 2 + 1]))
    fraction = d_used / k
    return Truncation(start + fraction * (end_at_s - start), d_best <= k // 2, fraction)
