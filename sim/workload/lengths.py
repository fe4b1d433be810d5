"""Token-length distributions that know their analytic mean and variance.

Every distribution yields int64 lengths clipped to ``[1, max_tokens]`` (``max_tokens=None``: no
upper cap), and its ``mean`` is the exact mean of those clipped integers, so a test of the sample
mean against ``mean`` checks the generator, not an approximation. ``variance`` is exact too, except
for the lognormal (see :class:`LognormalLengths`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


class LengthDistribution(Protocol):
    """What the workload builder needs from a length distribution."""

    @property
    def mean(self) -> float:
        """The exact mean length in tokens, clipping included."""
        ...

    @property
    def variance(self) -> float | None:
        """The variance in tokens², or None when it has no closed form."""
        ...

    def sample(self, num_requests: int, rng: np.random.Generator) -> np.ndarray:
        """``num_requests`` int64 lengths in ``[1, max_tokens]``."""
        ...


def _clip(lengths: np.ndarray, max_tokens: int | None) -> np.ndarray:
    """Lengths as int64 clipped to ``[1, max_tokens]``."""
    return np.clip(lengths, 1, max_tokens).astype(np.int64, copy=False)


def _sum_int(low: int, high: int) -> int:
    """``low + (low + 1) + ... + high`` (0 when ``high < low``)."""
    return (low + high) * (high - low + 1) // 2 if high >= low else 0


def _sum_squares(low: int, high: int) -> int:
    """``low² + ... + high²`` (0 when ``high < low``), from n(n+1)(2n+1)/6."""

    def upto(n: int) -> int:
        return n * (n + 1) * (2 * n + 1) // 6

    return upto(high) - upto(low - 1) if high >= low else 0


@dataclass(frozen=True)
class FixedLengths:
    """Every request has ``value`` tokens (clipped to ``max_tokens``)."""

    value: int
    max_tokens: int | None = None

    @property
    def mean(self) -> float:
        cap = self.value if self.max_tokens is None else self.max_tokens
        return float(max(min(self.value, cap), 1))

    @property
    def variance(self) -> float:
        return 0.0

    def sample(self, num_requests: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(num_requests, int(self.mean), dtype=np.int64)


@dataclass(frozen=True)
class UniformLengths:
    """Integers uniform on ``low..high`` inclusive, then clipped to ``max_tokens``.

    Unclipped, the mean is (low + high) / 2 and the variance ((high − low + 1)² − 1) / 12; with a
    cap inside the range the values above it pile up on the cap, and the moments are summed exactly.
    """

    low: int
    high: int
    max_tokens: int | None = None

    def _moments(self) -> tuple[float, float]:
        num_values = self.high - self.low + 1
        cap = self.high if self.max_tokens is None else self.max_tokens
        if cap >= self.high:
            mean = (self.low + self.high) / 2
            return mean, (num_values**2 - 1) / 12
        if cap <= self.low:
            return float(cap), 0.0
        # low <= cap < high: low..cap-1 once each, and the cap itself for cap..high.
        num_capped = self.high - cap + 1
        total = _sum_int(self.low, cap - 1) + num_capped * cap
        total_sq = _sum_squares(self.low, cap - 1) + num_capped * cap * cap
        mean = total / num_values
        return mean, total_sq / num_values - mean * mean

    @property
    def mean(self) -> float:
        return self._moments()[0]

    @property
    def variance(self) -> float:
        return self._moments()[1]

    def sample(self, num_requests: int, rng: np.random.Generator) -> np.ndarray:
        lengths = rng.integers(self.low, self.high, size=num_requests, endpoint=True)
        return _clip(lengths, self.max_tokens)


def _standard_normal_cdf(x: float) -> float:
    """Φ(x), via erfc for accuracy in the lower tail."""
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


@dataclass(frozen=True)
class LognormalLengths:
    """Lognormal lengths with mean ``mean_tokens`` and log-standard-deviation ``sigma``.

    X = exp(mu + sigma·Z) with mu = ln(mean) − sigma²/2, so E[X] = mean. X is rounded to an integer
    by stochastic rounding, N = floor(X + U) with U ~ Uniform(0, 1), whose conditional mean is
    exactly x (floor(x + U) is ⌊x⌋ + 1 with probability x − ⌊x⌋): unlike round-half-up it keeps
    E[N] = E[X].

    Clipping to [1, c] is accounted for exactly. For an integer K, E[(N − K)⁺ | X = x] = (x − K)⁺,
    and clip(N, 1, c) = 1 + (N − 1)⁺ − (N − c)⁺, so E[clip(N, 1, c)] = 1 + C(1) − C(c) with
    C(K) = E[(X − K)⁺] = mean·Φ(d₁) − K·Φ(d₁ − sigma), d₁ = (ln(mean / K) + sigma²/2) / sigma (the
    Black–Scholes call price at zero rate; Hull, *Options, Futures and Other Derivatives*, ch. 15).

    ``variance`` is that of the continuous, unclipped X, (e^{sigma²} − 1)·mean². Rounding adds
    E[f(1 − f)] with f the fractional part of X, between 0 and 1/4 token² (≈ 1/6 for a spread much
    wider than one token); clipping removes some. Neither has a closed form.
    """

    mean_tokens: float
    sigma: float
    max_tokens: int | None = None
    _mu: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_mu", math.log(self.mean_tokens) - self.sigma**2 / 2)

    def _call_price(self, strike: float) -> float:
        """E[(X − strike)⁺] for the continuous lognormal X."""
        if self.sigma == 0.0:
            return max(self.mean_tokens - strike, 0.0)
        d1 = (math.log(self.mean_tokens / strike) + self.sigma**2 / 2) / self.sigma
        return self.mean_tokens * _standard_normal_cdf(d1) - strike * _standard_normal_cdf(
            d1 - self.sigma
        )

    @property
    def mean(self) -> float:
        capped = 0.0 if self.max_tokens is None else self._call_price(self.max_tokens)
        mean = 1.0 + self._call_price(1.0) - capped
        # The true mean lies in [1, cap]; clamping removes round-off of the call prices.
        upper = math.inf if self.max_tokens is None else float(self.max_tokens)
        return min(max(mean, 1.0), upper)

    @property
    def variance(self) -> float:
        return math.expm1(self.sigma**2) * self.mean_tokens**2

    def sample(self, num_requests: int, rng: np.random.Generator) -> np.ndarray:
        # Normals first, then the rounding uniforms: changing `mean` rescales the same draws.
        continuous = np.exp(self._mu + self.sigma * rng.standard_normal(num_requests))
        rounded = np.floor(continuous + rng.random(num_requests))
        return _clip(rounded, self.max_tokens)


@dataclass(frozen=True, eq=False)
class _RecordedLengths:
    """Lengths taken from recorded ``values`` (clipped on construction): their population mean
    and variance are the distribution's.

    Raise ValueError if ``values`` is empty.
    """

    values: np.ndarray
    max_tokens: int | None = None
    source: str = "values"

    def __post_init__(self) -> None:
        if len(self.values) == 0:
            raise ValueError(f"{self.source}: no values to draw lengths from")
        clipped = _clip(np.asarray(self.values), self.max_tokens)
        clipped.flags.writeable = False
        object.__setattr__(self, "values", clipped)

    @property
    def mean(self) -> float:
        return float(self.values.mean())

    @property
    def variance(self) -> float:
        return float(self.values.var())


@dataclass(frozen=True, eq=False)
class EmpiricalLengths(_RecordedLengths):
    """Lengths drawn uniformly with replacement from recorded ``values``, then clipped.

    The mean and variance are those of the clipped values themselves (population moments), which is
    exactly what sampling with replacement reproduces.

    Raise ValueError if ``values`` is empty.
    """

    def sample(self, num_requests: int, rng: np.random.Generator) -> np.ndarray:
        return self.values[rng.integers(0, len(self.values), size=num_requests)]


@dataclass(frozen=True, eq=False)
class ReplayedLengths(_RecordedLengths):
    """Recorded lengths replayed in order, request by request, then clipped.

    The mean and variance are those of the first ``num_requests`` clipped values: the population
    that is replayed, not a model of it. ``sample`` ignores the generator.

    Raise ValueError if ``values`` is empty or shorter than a request for ``sample``.
    """

    source: str = "trace"

    def sample(self, num_requests: int, rng: np.random.Generator) -> np.ndarray:
        if num_requests > len(self.values):
            raise ValueError(
                f"{self.source}: {num_requests} lengths asked for, {len(self.values)} recorded"
            )
        return self.values[:num_requests].copy()
