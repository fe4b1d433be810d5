"""Bracket, then bisect: the highest value of a knob at which a monotone test still holds.

The capacity search's core, kept apart from any simulation so its convergence can be tested on
known thresholds. From a starting guess the rate moves up while the test holds (or down while it
fails) by steps that grow geometrically: the first move is ``first_step`` of the rate (a factor
``1 + first_step``), each later one twice the last, up to a doubling. Once the answer is
bracketed, the bracket is halved until its width is at most ``tolerance`` times its upper end.
The bracket keeps the answer whenever the test is monotone: true below some threshold and false
above it. With ``first_step = 1`` this is the classic double-or-halve bracketing; from a guess
known to lie close to the answer (the node's saturation throughput) a small first step brackets
it in two or three probes instead of a dozen.
"""

from __future__ import annotations

DEFAULT_TOLERANCE = 0.05
#: How far the search may raise the rate from its start before it gives up: 2**12 = 4096 times.
MAX_DOUBLINGS = 12
#: How far it may lower it: 2**6 = 64 times. Probes at very low rates are long in simulated
#: steps, and an SLO that fails at 1/64 of the starting rate fails for want of speed, not load.
MAX_HALVINGS = 6


class RateSearch:
    """Bracket, then bisect, the highest rate at which a monotone test holds.

    ``next_rate`` proposes the rate to probe (None when done) and ``record`` takes the verdict.
    Raise ValueError if ``start_rate`` or ``tolerance`` is not positive or ``first_step`` is
    not in (0, 1].
    """

    def __init__(
        self, start_rate: float, tolerance: float = DEFAULT_TOLERANCE, first_step: float = 1.0
    ) -> None:
        if not start_rate > 0 or not tolerance > 0:
            raise ValueError(f"start_rate and tolerance must be > 0, got {start_rate}, {tolerance}")
        if not 0 < first_step <= 1:
            raise ValueError(f"first_step must be in (0, 1], got {first_step}")
        self.start_rate = start_rate
        self.tolerance = tolerance
        self.first_step = first_step
        self.holds_at: float | None = None  # highest rate known to hold below fails_at
        self.fails_at: float | None = None  # lowest rate known to fail
        self.num_recorded = 0
        self._held: list[float] = []

    def _factor(self) -> float:
        """The bracketing move after ``num_recorded`` probes: ``1 + first_step · 2^(k−1)``,
        at most 2."""
        return 1.0 + min(1.0, self.first_step * 2.0 ** max(0, self.num_recorded - 1))

    def next_rate(self) -> float | None:
        """The next rate to probe, or None once the bracket is narrow enough or hits a limit."""
        lo, hi = self.holds_at, self.fails_at
        if lo is None and hi is None:
            return self.start_rate
        if hi is None:
            assert lo is not None
            return None if lo >= self.start_rate * 2.0**MAX_DOUBLINGS else lo * self._factor()
        if lo is None:
            return None if hi <= self.start_rate / 2.0**MAX_HALVINGS else hi / self._factor()
        if hi - lo <= self.tolerance * hi:
            return None
        return 0.5 * (lo + hi)

    def record(self, rate_per_s: float, holds: bool) -> None:
        """Take the verdict at ``rate_per_s``. A failure at a rate that held before (a longer
        run refuting a shorter one) withdraws it: the bracket's lower end falls to the highest
        rate held below the lowest failure."""
        self.num_recorded += 1
        if holds:
            self._held.append(rate_per_s)
        else:
            self.fails_at = rate_per_s if self.fails_at is None else min(self.fails_at, rate_per_s)
        below = [r for r in self._held if self.fails_at is None or r < self.fails_at]
        self.holds_at = max(below, default=None)

    @property
    def status(self) -> str:
        """``ok`` (bracketed), ``unattainable`` (nothing held) or ``unbounded`` (nothing failed)."""
        if self.holds_at is None:
            return "unattainable"
        return "unbounded" if self.fails_at is None else "ok"
