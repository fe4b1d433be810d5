"""The front end's FIFO queue: a hand-computed case, the Lindley recursion's invariants, and
Little's law on the queue itself."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine.frontend import FrontEnd, FrontEndServer, lindley_departures

times = st.lists(
    st.floats(0.0, 10.0, allow_nan=False, allow_infinity=False), min_size=1, max_size=60
)


@st.composite
def arrivals_and_services(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    arrival = np.sort(np.array(draw(times)))
    service = np.array(
        draw(
            st.lists(
                st.floats(0.0, 0.5, allow_nan=False, allow_infinity=False, allow_subnormal=False),
                min_size=len(arrival),
                max_size=len(arrival),
            )
        )
    )
    return arrival, service


def test_hand_computed_queue() -> None:
    # d0 = 0 + 1 = 1; d1 = max(0.5, 1) + 2 = 3; d2 = max(4, 3) + 1 = 5; d3 = max(4.5, 5) + 0.5 = 5.5
    arrival = np.array([0.0, 0.5, 4.0, 4.5])
    service = np.array([1.0, 2.0, 1.0, 0.5])
    np.testing.assert_array_equal(lindley_departures(arrival, service), [1.0, 3.0, 5.0, 5.5])


def test_server_busy_at_start_delays_everyone_until_free() -> None:
    depart = lindley_departures(np.array([0.0, 1.0]), np.array([1.0, 1.0]), free_at_s=3.0)
    np.testing.assert_array_equal(depart, [4.0, 5.0])


@settings(max_examples=200, deadline=None)
@given(arrivals_and_services())
def test_engine_arrival_never_before_the_client_sent_it(case: tuple) -> None:
    arrival, service = case
    depart = lindley_departures(arrival, service)
    assert (depart >= arrival + service).all()


@settings(max_examples=200, deadline=None)
@given(arrivals_and_services())
def test_fifo_order_is_preserved(case: tuple) -> None:
    arrival, service = case
    assert (np.diff(lindley_departures(arrival, service)) >= 0).all()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 10.0, allow_nan=False), min_size=1, max_size=60))
def test_zero_service_times_give_the_arrivals_back(values: list[float]) -> None:
    arrival = np.sort(np.array(values))
    np.testing.assert_array_equal(lindley_departures(arrival, np.zeros_like(arrival)), arrival)


@settings(max_examples=200, deadline=None)
@given(arrivals_and_services())
def test_vectorised_recursion_equals_the_one_at_a_time_server(case: tuple) -> None:
    arrival, service = case
    server = FrontEndServer()
    one_by_one = [server.depart(float(a), float(s)) for a, s in zip(arrival, service, strict=True)]
    np.testing.assert_allclose(lindley_departures(arrival, service), one_by_one, rtol=0, atol=1e-9)


def _area_under_occupancy(arrival: np.ndarray, depart: np.ndarray) -> float:
    """∫ N(t) dt by sweeping the events in time order (independent of the waiting times)."""
    events = np.concatenate((arrival, depart))
    change = np.concatenate((np.ones_like(arrival), -np.ones_like(depart)))
    order = np.lexsort((-change, events))  # arrivals first at equal times
    events, change = events[order], change[order]
    occupancy = np.cumsum(change)[:-1]
    return float((occupancy * np.diff(events)).sum())


@settings(max_examples=200, deadline=None)
@given(arrivals_and_services())
def test_littles_law_on_the_front_end_queue(case: tuple) -> None:
    # Over [first arrival, last departure] the system starts and ends empty, so the time-average
    # number inside equals throughput times the mean sojourn: L = λ·W (sample-path form).
    arrival, service = case
    depart = lindley_departures(arrival, service)
    span = float(depart[-1] - arrival[0])
    # L·T = (λ·T)·W: the area under N(t) equals the number served times the mean sojourn.
    area = _area_under_occupancy(arrival, depart)
    served_times_sojourn = len(arrival) * float((depart - arrival).mean())
    assert area == pytest.approx(served_times_sojourn, rel=1e-9, abs=1e-9 * max(span, 1.0))


def test_service_times_and_egress_follow_the_settings() -> None:
    frontend = FrontEnd(True, 0.002, 1e-6, 0.003)
    np.testing.assert_allclose(frontend.ingress_service_s(np.array([0, 1000])), [0.002, 0.003])
    assert frontend.egress_s == 0.003
    off = FrontEnd(False, 0.002, 1e-6, 0.003)
    assert off.egress_s == 0.0
    assert not off.ingress_service_s(np.array([5, 7])).any()


@pytest.mark.parametrize("bad", [-1e-3, float("nan"), float("inf")])
def test_invalid_times_are_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="ingress_fixed_s"):
        FrontEnd(True, ingress_fixed_s=bad)


def test_decreasing_arrivals_are_refused() -> None:
    with pytest.raises(ValueError, match="non-decreasing"):
        lindley_departures(np.array([1.0, 0.0]), np.zeros(2))
    server = FrontEndServer()
    server.depart(1.0, 0.0)
    with pytest.raises(ValueError, match="offered"):
        server.depart(0.5, 0.0)
