"""The shipped draft overheads are the fit's output, and the validation table meets its target."""

from __future__ import annotations

import numpy as np
import pytest

from calibration.draft_overhead import chosen, fit, overhead_values
from sim.drafting.overheads import load_draft_overheads, overheads_document
from sim.validate import TPOT_TOLERANCE, format_validation_table, validation_rows


@pytest.fixture(scope="module")
def fitted() -> tuple:
    return fit()


def test_fit_reproduces_the_shipped_overheads(fitted: tuple) -> None:
    shared, specific, _ = fitted
    best = chosen(shared, specific)
    assert overheads_document()["meta"]["chosen_form"] == best.form
    for method, values in overhead_values(best).items():
        shipped = load_draft_overheads("vllm-v1", method)
        assert shipped.per_forward_s == pytest.approx(values["per_forward_s"], rel=1e-3)
        assert shipped.per_step_s == pytest.approx(values["per_step_s"], rel=1e-3)


def test_fit_intervals_bracket_the_values_and_residuals_are_small(fitted: tuple) -> None:
    shared, specific, points = fitted
    best = chosen(shared, specific)
    assert np.all(best.ci95[:, 0] <= best.values) and np.all(best.values <= best.ci95[:, 1])
    measured = np.array([p.measured_tpot_ms for p in points])
    assert np.max(np.abs(best.predicted_tpot_ms / measured - 1)) < TPOT_TOLERANCE
    # The method-specific form nests the shared one: it can only fit as well or better.
    assert specific.rms_relative_error <= shared.rms_relative_error + 1e-9


def test_validation_tpot_rows_within_tolerance() -> None:
    rows = validation_rows()
    tpot = [r for r in rows if r.quantity == "tpot_ms"]
    assert len(tpot) == 13
    misses = [r.setup for r in tpot if not r.within_tolerance]
    assert not misses, misses
    # Checks exist and are labelled as such.
    assert any(r.is_check for r in rows)
    table = format_validation_table(rows)
    assert table.count("\n|") == len(rows) + 1


def test_offline_points_run_without_the_serving_front_end() -> None:
    """vLLM's offline ``LLM`` class has no API server: the offline throughput rows run with the
    front end off, the online TPOT rows with the preset's; TPOT does not see the front end (its
    delay shifts the first and the last token alike)."""
    from pathlib import Path

    from sim.run import run_scenario
    from sim.validate import bs1_scenario

    online, offline = (
        bs1_scenario("none", num_requests=4),
        bs1_scenario("none", num_requests=4, frontend=False),
    )
    assert online.engine.frontend is None or online.engine.frontend.enabled is not False
    assert offline.engine.frontend is not None and offline.engine.frontend.enabled is False
    on = run_scenario(online, Path.cwd()).summary
    off = run_scenario(offline, Path.cwd()).summary
    assert on.tpot_ms.mean == pytest.approx(off.tpot_ms.mean, rel=1e-9)
    assert off.ttft_ms.mean < on.ttft_ms.mean
