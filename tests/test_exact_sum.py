"""ExactSum: the correctly rounded sum math.fsum gives, from numpy chunks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.exact_sum import ExactSum

FINITE = st.floats(allow_nan=False, allow_infinity=False, width=64)
#: Values at a few scales, so that cancellations and ties of the last bit occur.
SCALED = st.builds(
    lambda mantissa, exponent: math.ldexp(mantissa, exponent),
    st.integers(-(1 << 53) + 1, (1 << 53) - 1),
    st.sampled_from([-1074, -1060, -60, -53, -30, 0, 20, 53, 900]),
)


def _same(a: float, b: float) -> bool:
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


@settings(max_examples=400, deadline=None)
@given(values=st.lists(st.one_of(FINITE, SCALED), max_size=60), cuts=st.lists(st.integers(0, 60)))
def test_exact_sum_is_fsum_whatever_the_chunks(values: list[float], cuts: list[int]) -> None:
    # math.fsum is correctly rounded (round half to even); so is the sum's integer ratio.
    try:
        expected = math.fsum(values)
    except OverflowError:
        with pytest.raises(OverflowError):
            total = ExactSum()
            total.add(np.array(values))
            total.value()
        return
    total = ExactSum()
    for chunk in np.split(np.array(values, dtype=np.float64), sorted(set(cuts))):
        total.add(chunk)
    assert _same(total.value(), expected)


def test_ties_round_to_even_and_the_empty_sum_is_zero() -> None:
    # 1 + 2**-53 lies halfway between 1 and its successor: the even neighbour, 1, is the sum.
    for values in ([1.0, 2.0**-53], [1.0, 2.0**-53, 2.0**-105], [1e16, 1.0, -1e16], [-0.0]):
        total = ExactSum()
        total.add(np.array(values))
        assert _same(total.value(), math.fsum(values))
    assert _same(ExactSum().value(), 0.0)


def test_non_finite_values_sum_as_fsum_sums_them() -> None:
    total = ExactSum()
    total.add(np.array([1.0, math.inf]))
    total.add(np.array([2.0]))
    assert total.value() == math.inf
    total.add(np.array([-math.inf]))
    with pytest.raises(ValueError, match="inf"):  # as math.fsum([1, inf, 2, -inf]) raises
        total.value()
    nan = ExactSum()
    nan.add(np.array([1.0, math.nan]))
    assert math.isnan(nan.value())
