"""Bracket, then bisect: the highest value of a knob at which a monotone test still holds.

The capacity search's core, kept apart from any simulation so its convergence can be tested on
known thresholds. Starting from a guess, the rate doubles while the test holds (or halves while it
fails) until the answer is bracketed, then the bracket is halved until its width is at most
``tolerance`` times its upper end. The bracket keeps the answer whenever the test is monotone:
true below some threshold and false above it.
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
    Raise ValueError if ``start_rate`` or ``tolerance`` is not positive.
    """

    def __init__(self, start_rate: float, tolerance: float = DEFAULT_TOLERANCE) -> None:
        if not start_rate > 0 or not tolerance > 0:
            raise ValueError(f"start_rate and tolerance must be > 0, got {start_rate}, {tolerance}")
        self.start_rate = start_rate
        self.tolerance = tolerance
        self.holds_at: float | None = None  # highest rate known to hold
        self.fails_at: float | None = None  # lowest rate known to fail

    def next_rate(self) -> float | None:
        """The next rate to probe, or None once the bracket is narrow enough or hits a limit."""
        lo, hi = self.holds_at, self.fails_at
        if lo is None and hi is None:
            return self.start_rate
        if hi is None:
            assert lo is not None
            return None if lo >= self.start_rate * 2.0**MAX_DOUBLINGS else lo * 2.0
        if lo is None:
            return None if hi <= self.start_rate / 2.0**MAX_HALVINGS else hi / 2.0
        if hi - lo <= self.tolerance * hi:
            return None
        return 0.5 * (lo + hi)

    def record(self, rate_per_s: float, holds: bool) -> None:
        """Take the verdict at ``rate_per_s``."""
        if holds:
            self.holds_at = rate_per_s if self.holds_at is None else max(self.holds_at, rate_per_s)
        else:
            self.fails_at = rate_per_s if self.fails_at is None else min(self.fails_at, rate_per_s)

    @property
    def status(self) -> str:
        """``ok`` (bracketed), ``unattainable`` (nothing held) or ``unbounded`` (nothing failed)."""
        if self.holds_at is None:
            return "unattainable"
        return "unbounded" if self.fails_at is None else "ok"
