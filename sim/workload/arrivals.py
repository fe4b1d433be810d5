"""Arrival processes that know the analytic mean and variance of their gaps.

An open-loop process turns a generator into arrival times: the cumulative sum of independent gaps,
so the first request arrives after one gap, not at zero. ``mean`` and ``variance`` are those of one
gap, in seconds and seconds². A closed loop has no arrival times; the serving node releases each
client's next request when its previous one finishes.

Gaps are drawn from the standard distribution and then scaled (exponential: E/rate), so two runs on
one seed that differ only in the rate see the same arrival pattern stretched in time. The gaps are
never truncated: capping each gap (as some simulators do at 3/rate) silently raises the real rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


class ArrivalProcess(Protocol):
    """What the workload builder needs from an open-loop arrival process."""

    @property
    def mean(self) -> float | None:
        """The mean gap between arrivals in seconds (None for a one-request replay)."""
        ...

    @property
    def variance(self) -> float | None:
        """The variance of one gap in seconds², or None when it has no closed form."""
        ...

    def sample_arrival_times(self, num_requests: int, rng: np.random.Generator) -> np.ndarray:
        """``num_requests`` float64 arrival times in seconds, non-decreasing."""
        ...


@dataclass(frozen=True)
class PoissonArrivals:
    """A Poisson process at ``rate_per_s``: independent exponential gaps with mean 1 / rate.

    Raise ValueError if ``rate_per_s`` is not a positive finite number.
    """

    rate_per_s: float

    def __post_init__(self) -> None:
        if not (0 < self.rate_per_s < float("inf")):
            raise ValueError(f"rate_per_s must be > 0 and finite, got {self.rate_per_s}")

    @property
    def mean(self) -> float:
        return 1.0 / self.rate_per_s

    @property
    def variance(self) -> float:
        return 1.0 / self.rate_per_s**2

    def sample_arrival_times(self, num_requests: int, rng: np.random.Generator) -> np.ndarray:
        gaps_s = rng.standard_exponential(num_requests) / self.rate_per_s
        return np.cumsum(gaps_s)


@dataclass(frozen=True)
class GammaArrivals:
    """A renewal process with gamma gaps: mean 1 / rate, coefficient of variation ``cv``.

    Shape k = 1 / cv² and scale θ = 1 / (rate·k) give mean kθ = 1 / rate and standard deviation
    √k·θ = cv / rate. This is ``vllm bench serve``'s burstiness b with cv = 1 / √b; cv = 1 is
    Poisson.

    Raise ValueError if ``rate_per_s`` or ``cv`` is not a positive finite number.
    """

    rate_per_s: float
    cv: float

    def __post_init__(self) -> None:
        for key, value in (("rate_per_s", self.rate_per_s), ("cv", self.cv)):
            if not (0 < value < float("inf")):
                raise ValueError(f"{key} must be > 0 and finite, got {value}")

    @property
    def shape(self) -> float:
        return 1.0 / self.cv**2

    @property
    def mean(self) -> float:
        return 1.0 / self.rate_per_s

    @property
    def variance(self) -> float:
        return (self.cv / self.rate_per_s) ** 2

    def sample_arrival_times(self, num_requests: int, rng: np.random.Generator) -> np.ndarray:
        scale_s = 1.0 / (self.rate_per_s * self.shape)
        gaps_s = rng.standard_gamma(self.shape, num_requests) * scale_s
        return np.cumsum(gaps_s)


@dataclass(frozen=True, eq=False)
class ReplayedArrivals:
    """Recorded arrival times replayed as they are, shifted so the first is at zero.

    ``mean`` is the mean gap over the replayed requests, (last − first) / (n − 1), and ``variance``
    their population variance; a one-request trace has neither (both None). ``sample_arrival_times``
    takes the first ``num_requests`` times and ignores the generator.

    Raise ValueError if the times are empty, not finite, or decreasing.
    """

    arrival_at_s: np.ndarray
    source: str = "trace"

    def __post_init__(self) -> None:
        times = np.asarray(self.arrival_at_s, dtype=np.float64)
        if times.size == 0:
            raise ValueError(f"{self.source}: no arrival times")
        if not np.all(np.isfinite(times)):
            raise ValueError(f"{self.source}: arrival times must be finite")
        if np.any(np.diff(times) < 0):
            first_bad = int(np.argmax(np.diff(times) < 0)) + 1
            raise ValueError(
                f"{self.source}: arrival times decrease at request {first_bad} "
                f"({times[first_bad - 1]} then {times[first_bad]})"
            )
        shifted = times - times[0]
        shifted.flags.writeable = False
        object.__setattr__(self, "arrival_at_s", shifted)

    @property
    def mean(self) -> float | None:
        if self.arrival_at_s.size < 2:
            return None
        return float(self.arrival_at_s[-1] / (self.arrival_at_s.size - 1))

    @property
    def variance(self) -> float | None:
        if self.arrival_at_s.size < 2:
            return None
        return float(np.diff(self.arrival_at_s).var())

    def sample_arrival_times(self, num_requests: int, rng: np.random.Generator) -> np.ndarray:
        return self.arrival_at_s[:num_requests].copy()
