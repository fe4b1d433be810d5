"""The tables behind the figures: acceptance lengths, downsampled timelines and speed-ups."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reports.figures import acceptance_lengths, speedup_table, steps_timeline
from sim.errors import SpecsimError


def test_acceptance_length_is_one_plus_accepted_per_step() -> None:
    requests = pd.DataFrame({"num_accepted": [6, 0, 3], "num_decode_steps": [3, 0, 2]})
    assert acceptance_lengths(requests).tolist() == [3.0, 2.5]
    with pytest.raises(SpecsimError, match="num_accepted"):
        acceptance_lengths(pd.DataFrame({"num_decode_steps": [1]}))


def _steps(durations: np.ndarray, seqs: np.ndarray, kv: np.ndarray) -> pd.DataFrame:
    start = np.concatenate([[0.0], np.cumsum(durations)[:-1]])
    return pd.DataFrame(
        {
            "start_at_s": start,
            "duration_s": durations,
            "num_seqs": seqs,
            "kv_blocks_used": kv,
            "num_waiting": np.zeros_like(seqs),
        }
    )


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(1e-4, 0.1), st.integers(1, 256), st.integers(0, 5000)),
        min_size=1,
        max_size=400,
    ),
    st.integers(1, 50),
)
def test_timeline_keeps_peak_and_time_average(
    rows: list[tuple[float, int, int]], bins: int
) -> None:
    durations, seqs, kv = (np.array(c, dtype=float) for c in zip(*rows, strict=True))
    timeline = steps_timeline(_steps(durations, seqs, kv), 5000.0, bins)
    assert len(timeline) <= bins
    # The KV maximum survives the binning, and the usage is blocks over the pool.
    assert timeline["kv_blocks_used"].max() == kv.max()
    assert np.allclose(timeline["kv_usage"], timeline["kv_blocks_used"] / 5000.0)
    # Each bin's batch size is a weighted mean of its steps: within the steps' range.
    assert seqs.min() - 1e-9 <= timeline["batch_size"].min()
    assert timeline["batch_size"].max() <= seqs.max() + 1e-9


def test_timeline_of_a_constant_batch_is_constant() -> None:
    steps = _steps(np.full(1000, 0.01), np.full(1000, 7.0), np.arange(1000.0))
    timeline = steps_timeline(steps, None, 10)
    assert len(timeline) == 10
    assert np.allclose(timeline["batch_size"], 7.0)
    assert "kv_usage" not in timeline


def test_speedup_is_baseline_tpot_over_method_tpot_at_the_same_point() -> None:
    frame = pd.DataFrame(
        {
            "rate": [1, 1, 8, 8],
            "method": ["none", "eagle3", "none", "eagle3"],
            "tpot_p50_ms": [8.0, 4.0, 10.0, 12.5],
            "mean_batch_size": [2.0, 1.5, 30.0, 28.0],
        }
    )
    table = speedup_table(frame, "rate", "method", ["rate"])
    assert table["speedup_vs_none"].tolist() == [2.0, 0.8]
    assert table["batch_size_none"].tolist() == [2.0, 30.0]
    assert speedup_table(frame[frame["method"] != "none"], "rate", "method", ["rate"]).empty
