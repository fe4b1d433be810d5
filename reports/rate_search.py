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

A verdict may also be **undecided**: the rate is within the noise of the SLO bound even on the
longest run (neither shown to hold nor shown to fail). Such rates sit between the highest rate
that holds and the lowest that fails; the search then narrows the two gaps around them (from
the highest hold up to the lowest undecided rate, and from the highest undecided rate up to the
lowest failure) to the tolerance, and stops. The answer's resolution is then the whole bracket,
wider than the tolerance: where the test's answer flips cannot be placed more finely than the
band of undecided rates.
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

    ``next_rate`` proposes the rate to probe (None when done) and ``record`` takes the verdict
    (True, False, or None for undecided). Raise ValueError if ``start_rate`` or ``tolerance``
    is not positive or ``first_step`` is not in (0, 1].
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
        self.num_recorded = 0
        self.verdicts: dict[float, bool | None] = {}  # each rate's latest verdict

    @property
    def fails_at(self) -> float | None:
        """The lowest rate that failed."""
        return min((r for r, v in self.verdicts.items() if v is False), default=None)

    @property
    def undecided(self) -> list[float]:
        """The undecided rates below the lowest failure, in increasing order."""
        ceiling = self.fails_at
        return sorted(
            r for r, v in self.verdicts.items() if v is None and (ceiling is None or r < ceiling)
        )

    @property
    def holds_at(self) -> float | None:
        """The highest rate that held below every failing and undecided rate."""
        others = [r for r, v in self.verdicts.items() if v is not True]
        ceiling = min(others, default=None)
        held = [r for r, v in self.verdicts.items() if v and (ceiling is None or r < ceiling)]
        return max(held, default=None)

    def below_ceiling(self, rate_per_s: float) -> bool:
        """Whether ``rate_per_s`` lies in the bracket's lower gap, between the highest rate that
        held and the lowest undecided or failing one: a rate that holds there is the answer."""
        lo, hi, gray = self.holds_at, self.fails_at, self.undecided
        if lo is None or hi is None:
            return False
        return lo < rate_per_s < (gray[0] if gray else hi)

    def _factor(self) -> float:
        """The bracketing move after ``num_recorded`` probes: ``1 + first_step · 2^(k−1)``,
        at most 2."""
        return 1.0 + min(1.0, self.first_step * 2.0 ** max(0, self.num_recorded - 1))

    def _wide(self, low: float, high: float) -> bool:
        return high - low > self.tolerance * high

    def next_rate(self) -> float | None:
        """The next rate to probe, or None once the bracket is narrow enough or hits a limit."""
        lo, hi, gray = self.holds_at, self.fails_at, self.undecided
        if not self.verdicts:
            return self.start_rate
        if hi is None:
            top = max([*gray, *([lo] if lo is not None else [])])
            return None if top >= self.start_rate * 2.0**MAX_DOUBLINGS else top * self._factor()
        if lo is None:
            bottom = min([*gray, hi])
            floor = self.start_rate / 2.0**MAX_HALVINGS
            return None if bottom <= floor else bottom / self._factor()
        ceiling = gray[0] if gray else hi
        if self._wide(lo, ceiling):
            return 0.5 * (lo + ceiling)
        if gray and self._wide(gray[-1], hi):
            return 0.5 * (gray[-1] + hi)
        return None

    def record(self, rate_per_s: float, holds: bool | None) -> None:
        """Take the verdict at ``rate_per_s`` (None: undecided). A later verdict at a rate
        replaces an earlier one (a longer run refuting a shorter one); a failure below a rate
        that held withdraws it: the bracket's lower end falls to the highest rate held below
        the lowest failing or undecided rate."""
        self.num_recorded += 1
        self.verdicts[rate_per_s] = holds

    @property
    def status(self) -> str:
        """``ok`` (bracketed), ``unattainable`` (nothing held) or ``unbounded`` (nothing failed)."""
        if self.holds_at is None:
            return "unattainable"
        return "unbounded" if self.fails_at is None else "ok"
