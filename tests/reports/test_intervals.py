"""Batch-means intervals: exact on exact data, honest coverage on independent samples."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reports.intervals import (
    CONFIDENCE,
    batch_slices,
    proportion_interval,
    quantile_interval,
    slope_interval,
    trend,
    variance_inflation,
)


@given(st.integers(20, 5000), st.integers(2, 20))
def test_batches_cover_every_sample_once_in_order(n: int, num_batches: int) -> None:
    slices = batch_slices(n, num_batches)
    covered = np.concatenate([np.arange(n)[s] for s in slices])
    assert (covered == np.arange(n)).all() and len(slices) == num_batches
    sizes = [s.stop - s.start for s in slices]
    assert max(sizes) - min(sizes) <= 1


@settings(deadline=None)
@given(st.floats(-5, 5), st.floats(-100, 100))
def test_an_exact_line_has_its_slope_and_no_width(slope: float, intercept: float) -> None:
    x = np.linspace(0.0, 10.0, 12)
    got = slope_interval(x, intercept + slope * x)
    assert got.value == pytest.approx(slope, abs=1e-9)
    assert got.high - got.low == pytest.approx(0.0, abs=1e-6)


def test_a_trend_is_found_in_a_ramp_and_not_in_noise() -> None:
    rng = np.random.default_rng(1)
    times = np.sort(rng.uniform(0, 100, 4000))
    noise = rng.exponential(1.0, 4000)
    flat, ramp = trend(times, noise), trend(times, noise + 0.05 * times)
    assert flat.low <= 0.0 <= flat.high
    assert ramp.low > 0.03 and ramp.low <= 0.05 <= ramp.high


def test_a_slowly_wandering_stationary_series_shows_no_trend() -> None:
    # AR(1) with phi = 0.995 (correlation time ~400 samples, 20 batches of 100): stationary, so
    # a 95% one-sided "upward trend shown" must come up in at most ~5% of replicates. The t
    # interval on batch means alone (lag-1 widening capped) shows one in about 10%; the
    # worst-case-correlation bound keeps it under 5% (300 replicates: one s.e. 1.3%).
    rng = np.random.default_rng(3)
    times = np.arange(2000, dtype=float)
    shown = 0
    for _ in range(300):
        shocks = rng.normal(size=7000)
        series = np.empty(7000)
        series[0] = shocks[0]
        for i in range(1, 7000):
            series[i] = 0.995 * series[i - 1] + shocks[i]
        shown += trend(times, series[5000:]).low > 0
    assert shown / 300 <= 0.05


def _coverage(sampler, truth: float, interval) -> float:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(300):
        got = interval(sampler(rng))
        hits += got.low <= truth <= got.high
    return hits / 300


def test_the_quantile_interval_covers_the_true_quantile_of_independent_samples() -> None:
    # Exponential(1): the 0.9 quantile is ln 10. Distribution-free intervals cover at least
    # their confidence; 300 replicates put a 0.90 coverage within ±0.03 (one s.e. 0.017).
    coverage = _coverage(
        lambda rng: rng.exponential(1.0, 1000),
        float(np.log(10.0)),
        lambda x: quantile_interval(x, np.ones(len(x)), 0.9),
    )
    assert coverage >= CONFIDENCE - 0.04


def test_the_proportion_interval_covers_the_true_share() -> None:
    coverage = _coverage(
        lambda rng: (rng.uniform(size=2000) < 0.02).astype(float),
        0.02,
        lambda x: proportion_interval(x, np.ones(len(x))),
    )
    assert coverage >= CONFIDENCE - 0.04


def test_clustered_exceedances_widen_the_interval() -> None:
    rng = np.random.default_rng(3)
    spread = (rng.uniform(size=2000) < 0.05).astype(float)
    clustered = np.zeros(2000)
    clustered[:100] = 1.0  # the same share, all in one burst
    ones = np.ones(2000)
    assert variance_inflation(spread, ones) < 3.0
    assert variance_inflation(clustered, ones) > 10.0
    narrow, wide = proportion_interval(spread, ones), proportion_interval(clustered, ones)
    assert wide.high - wide.low > 2 * (narrow.high - narrow.low)


def test_no_sample_above_a_bound_bounds_the_share_by_clopper_pearson() -> None:
    got = proportion_interval(np.zeros(1000), np.ones(1000))
    # k = 0: upper bound 1 − (α/2)^(1/n) with α/2 = 0.05.
    assert got.value == 0.0 and got.high == pytest.approx(1 - 0.05 ** (1 / 1000), rel=1e-6)


def test_too_few_samples_for_the_batches_is_an_error() -> None:
    with pytest.raises(ValueError, match="batches"):
        batch_slices(5, 20)
