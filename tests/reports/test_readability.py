"""What a planner reads: plain numbers in tables, axes named in words, labelled log axes."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from reports.figures import _plain_log_ticks, metric_label
from reports.render.document import format_cell


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (16710.4, "16,710"),
        (45.26, "45.3"),
        (7.5361, "7.536"),
        (0.075, "0.075"),
        (0.0, "0.000"),
        (-7.465e-07, "-0.00000075"),
        (float("nan"), "-"),
        (None, "-"),
        (600, "600"),
    ],
)
def test_cells_are_plain_numbers(value: object, shown: str) -> None:
    assert format_cell(value) == shown
    assert "e+" not in format_cell(value) and "e-" not in format_cell(value)


def test_metric_names_are_words_with_units() -> None:
    assert metric_label("ttft_p99_ms") == "TTFT p99 (ms)"
    assert metric_label("e2e_latency_p50_ms") == "end-to-end latency p50 (ms)"
    assert metric_label("output_throughput_tok_s") == "output throughput (tok/s)"
    assert "goodput" in metric_label("good_request_fraction")


@pytest.mark.parametrize(("low", "high"), [(8.0, 14.0), (15.0, 70.0), (20.0, 6000.0)])
def test_a_log_axis_has_at_least_two_plain_labels(low: float, high: float) -> None:
    # The sweep's TPOT panel once showed a single "10" over 8 to 14 ms, its TTFT panel none.
    figure = Figure()
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.plot([1, 2], [low, high])
    axes.set_yscale("log")
    _plain_log_ticks(axes, "y")
    figure.canvas.draw()
    labels = [
        t.get_text()
        for t in axes.yaxis.get_ticklabels()
        if t.get_text() and low <= float(t.get_text().replace(",", "")) * 1.05 <= high * 1.1
    ]
    assert len(labels) >= 2, labels
    assert all("10^" not in text and "$" not in text for text in labels)
    assert all(np.isfinite(float(text)) for text in labels)
