"""Arrival processes and length distributions against their analytic moments.

Sample moments are compared with the analytic ones within four standard errors, estimated from the
sample itself; the seeds are fixed, so the tests are deterministic. Each check is shown to reject a
plausible wrong generator or formula, so that it can fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.workload import (
    EmpiricalLengths,
    FixedLengths,
    GammaArrivals,
    LognormalLengths,
    PoissonArrivals,
    ReplayedArrivals,
    UniformLengths,
)

NUM_SAMPLES = 200_000
NUM_STANDARD_ERRORS = 4.0


def _rng(seed: int = 7) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


def _mean_matches(sample: np.ndarray, mean: float) -> bool:
    standard_error = sample.std() / math.sqrt(sample.size)
    return abs(sample.mean() - mean) <= NUM_STANDARD_ERRORS * standard_error


def _variance_matches(sample: np.ndarray, variance: float, slack: float = 0.0) -> bool:
    """The sample variance is within four standard errors of ``[variance, variance + slack]``."""
    squared_deviations = (sample - sample.mean()) ** 2
    standard_error = squared_deviations.std() / math.sqrt(sample.size)
    sample_variance = squared_deviations.mean()
    tolerance = NUM_STANDARD_ERRORS * standard_error
    return variance - tolerance <= sample_variance <= variance + slack + tolerance


def _gaps_s(arrival_at_s: np.ndarray) -> np.ndarray:
    return np.diff(arrival_at_s, prepend=0.0)


@pytest.mark.parametrize("rate_per_s", [0.5, 4.0, 120.0])
def test_poisson_gaps_have_mean_and_variance_of_the_exponential(rate_per_s: float) -> None:
    process = PoissonArrivals(rate_per_s)
    gaps_s = _gaps_s(process.sample_arrival_times(NUM_SAMPLES, _rng()))
    assert process.mean == pytest.approx(1 / rate_per_s)
    assert _mean_matches(gaps_s, process.mean)
    assert _variance_matches(gaps_s, process.variance)


def test_poisson_mean_check_rejects_a_truncated_generator() -> None:
    # A generator that caps each gap at 3/rate runs about 5% too fast; the check above must see it.
    rate_per_s = 4.0
    gaps_s = _rng().exponential(1 / rate_per_s, NUM_SAMPLES)
    truncated_s = np.minimum(gaps_s, 3 / rate_per_s)
    assert _mean_matches(gaps_s, 1 / rate_per_s)
    assert not _mean_matches(truncated_s, 1 / rate_per_s)


def test_poisson_first_arrival_is_after_one_gap_and_times_increase() -> None:
    arrival_at_s = PoissonArrivals(2.0).sample_arrival_times(1000, _rng())
    assert arrival_at_s[0] > 0
    assert np.all(np.diff(arrival_at_s) >= 0)


@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0])
def test_gamma_gaps_have_the_configured_mean_and_cv(cv: float) -> None:
    process = GammaArrivals(rate_per_s=8.0, cv=cv)
    gaps_s = _gaps_s(process.sample_arrival_times(NUM_SAMPLES, _rng()))
    assert process.variance == pytest.approx((cv * process.mean) ** 2)
    assert _mean_matches(gaps_s, 1 / 8.0)
    assert _variance_matches(gaps_s, process.variance)
    # The CV check distinguishes neighbouring settings: cv 0.5 vs 0.55 is far outside the tolerance.
    assert not _variance_matches(gaps_s, (1.1 * cv / 8.0) ** 2)


def test_rate_rescales_the_same_arrival_pattern() -> None:
    slow_s = PoissonArrivals(1.0).sample_arrival_times(500, _rng())
    fast_s = PoissonArrivals(4.0).sample_arrival_times(500, _rng())
    np.testing.assert_allclose(fast_s, slow_s / 4.0)


@pytest.mark.parametrize("bad", [0.0, -3.0, math.inf, math.nan])
def test_processes_reject_rates_that_are_not_positive_and_finite(bad: float) -> None:
    with pytest.raises(ValueError, match="rate_per_s"):
        PoissonArrivals(bad)
    with pytest.raises(ValueError, match="rate_per_s"):
        GammaArrivals(bad, 1.0)


def test_replayed_arrivals_shift_to_zero_and_report_their_mean_gap() -> None:
    process = ReplayedArrivals(np.array([10.0, 11.0, 11.5, 14.0]))
    np.testing.assert_array_equal(process.sample_arrival_times(3, _rng()), [0.0, 1.0, 1.5])
    assert process.mean == pytest.approx(4.0 / 3)
    assert process.variance == pytest.approx(np.var([1.0, 0.5, 2.5]))
    assert ReplayedArrivals(np.array([5.0])).mean is None
    with pytest.raises(ValueError, match="decrease at request 2"):
        ReplayedArrivals(np.array([0.0, 2.0, 1.0]))


def test_fixed_lengths_are_constant_and_capped() -> None:
    assert FixedLengths(300).sample(5, _rng()).tolist() == [300] * 5
    capped = FixedLengths(300, max_tokens=128)
    assert capped.mean == 128.0
    assert capped.sample(3, _rng()).tolist() == [128] * 3


@pytest.mark.parametrize(
    ("low", "high", "max_tokens"), [(1, 10, None), (100, 900, None), (100, 900, 400), (5, 9, 2)]
)
def test_uniform_lengths_match_their_moments(low: int, high: int, max_tokens: int | None) -> None:
    distribution = UniformLengths(low, high, max_tokens)
    sample = distribution.sample(NUM_SAMPLES, _rng()).astype(np.float64)
    assert sample.min() >= min(low, max_tokens or low)
    assert _mean_matches(sample, distribution.mean)
    assert _variance_matches(sample, distribution.variance)


@given(
    low=st.integers(1, 60),
    width=st.integers(0, 60),
    max_tokens=st.one_of(st.none(), st.integers(1, 130)),
)
def test_uniform_moments_equal_brute_force_enumeration(
    low: int, width: int, max_tokens: int | None
) -> None:
    high = low + width
    support = np.clip(np.arange(low, high + 1), 1, max_tokens).astype(np.float64)
    distribution = UniformLengths(low, high, max_tokens)
    assert distribution.mean == pytest.approx(support.mean(), rel=1e-12)
    assert distribution.variance == pytest.approx(support.var(), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize(
    ("mean_tokens", "sigma"), [(256.0, 0.6), (1000.0, 1.0), (40.0, 0.25), (200.0, 0.0)]
)
def test_lognormal_lengths_have_the_configured_mean(mean_tokens: float, sigma: float) -> None:
    distribution = LognormalLengths(mean_tokens, sigma)
    sample = distribution.sample(NUM_SAMPLES, _rng()).astype(np.float64)
    assert distribution.mean == pytest.approx(mean_tokens, rel=1e-9)
    assert _mean_matches(sample, mean_tokens)
    # Stochastic rounding adds between 0 and 1/4 token² to the continuous variance.
    assert _variance_matches(sample, distribution.variance, slack=0.25)


def test_lognormal_mean_accounts_for_rounding_and_clipping_at_both_ends() -> None:
    # Mean 3 tokens with a wide spread: many draws fall below 1 and above the cap of 6.
    distribution = LognormalLengths(3.0, 1.2, max_tokens=6)
    sample = distribution.sample(NUM_SAMPLES, _rng()).astype(np.float64)
    assert sample.min() == 1 and sample.max() == 6
    assert _mean_matches(sample, distribution.mean)
    assert not _mean_matches(sample, 3.0)  # ignoring the clipping would be caught


def test_lognormal_rounding_keeps_the_mean_where_round_half_up_would_not() -> None:
    # Mean 1.3 with a tiny spread: rounding to nearest gives 1 almost always.
    distribution = LognormalLengths(1.3, 0.01)
    sample = distribution.sample(NUM_SAMPLES, _rng()).astype(np.float64)
    assert _mean_matches(sample, 1.3)
    assert distribution.mean == pytest.approx(1.3, rel=1e-6)


@given(
    mean_tokens=st.floats(0.5, 5000.0),
    sigma=st.floats(0.0, 2.5),
    max_tokens=st.one_of(st.none(), st.integers(1, 8000)),
    seed=st.integers(0, 2**32),
)
def test_lognormal_lengths_are_int64_within_bounds(
    mean_tokens: float, sigma: float, max_tokens: int | None, seed: int
) -> None:
    distribution = LognormalLengths(mean_tokens, sigma, max_tokens)
    sample = distribution.sample(200, _rng(seed))
    assert sample.dtype == np.int64
    assert sample.min() >= 1
    upper = math.inf if max_tokens is None else max_tokens
    assert sample.max() <= upper
    assert 1.0 <= distribution.mean <= upper


def test_empirical_lengths_reproduce_the_population_moments() -> None:
    values = np.array([0, 3, 3, 10, 250, 4000])  # the 0 is clipped to 1
    distribution = EmpiricalLengths(values, max_tokens=1000)
    clipped = np.array([1, 3, 3, 10, 250, 1000], dtype=np.float64)
    assert distribution.mean == pytest.approx(clipped.mean())
    assert distribution.variance == pytest.approx(clipped.var())
    sample = distribution.sample(NUM_SAMPLES, _rng()).astype(np.float64)
    assert set(np.unique(sample)) == set(clipped)
    assert _mean_matches(sample, distribution.mean)
    assert _variance_matches(sample, distribution.variance)


def test_empirical_lengths_reject_an_empty_list() -> None:
    with pytest.raises(ValueError, match="no values"):
        EmpiricalLengths(np.array([], dtype=np.int64))
