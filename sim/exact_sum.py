"""The correctly rounded sum of many floats given as numpy chunks: :class:`ExactSum`."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


class ExactSum:
    """The sum of every value :meth:`add` was given, rounded once (:meth:`value`): the float
    ``math.fsum`` gives over the same values, whatever the chunks, without a Python float per
    value. A finite float is ``m * 2**e`` with an integer ``m`` of at most 53 bits
    (``np.frexp``); the ``m`` of each exponent are summed exactly in numpy (as 27-bit halves, in
    float64 sums that stay below 2**53), the groups added as one Python integer, and the
    integer's ratio to a power of two is correctly rounded (round half to even) as ``fsum``'s
    result is. Non-finite values are left to ``math.fsum`` (its infinities, NaN and errors)."""

    #: Values summed per numpy pass: each half is below 2**27, so its float64 sum over this
    #: many values stays an exact integer (below 2**53).
    CHUNK = 1 << 25

    def __init__(self) -> None:
        self._scaled = 0  # the exact sum is _scaled * 2**_exponent
        self._exponent = 0
        self._special: list[float] = []

    def add(self, values: FloatArray) -> None:
        """Add ``values`` (any shape) to the sum."""
        flat = np.asarray(values, dtype=np.float64).ravel()
        finite = np.isfinite(flat)
        if not finite.all():
            self._special.extend(flat[~finite].tolist())
            flat = flat[finite]
        for start in range(0, len(flat), self.CHUNK):
            self._add_finite(flat[start : start + self.CHUNK])

    def _add_finite(self, flat: FloatArray) -> None:
        nonzero = flat[flat != 0.0]
        if not len(nonzero):
            return
        fraction, exponent = np.frexp(nonzero)  # value = fraction * 2**exponent, |fraction| < 1
        mantissa = (fraction * 2.0**53).astype(np.int64)  # exact: |mantissa| < 2**53
        exponent = exponent.astype(np.int64) - 53
        low_e = int(exponent.min())
        groups = exponent - low_e
        # mantissa = high * 2**26 + low with 0 <= low < 2**26 and |high| < 2**27.
        high = np.bincount(groups, weights=(mantissa >> 26).astype(np.float64))
        low = np.bincount(groups, weights=(mantissa & ((1 << 26) - 1)).astype(np.float64))
        scaled = 0
        for shift in np.flatnonzero((high != 0) | (low != 0)).tolist():
            scaled += ((int(high[shift]) << 26) + int(low[shift])) << shift
        if low_e < self._exponent:
            self._scaled <<= self._exponent - low_e
            self._exponent = low_e
        self._scaled += scaled << (low_e - self._exponent)

    def value(self) -> float:
        """The sum, correctly rounded to a float (0.0 for none; ``math.fsum`` with infinities
        or NaN among the values)."""
        if self._special:
            return math.fsum(self._special)
        if self._exponent >= 0:
            return float(self._scaled << self._exponent)
        return self._scaled / (1 << -self._exponent)
