"""The two arms the SGLang speculative decomposition sets beside each speedup row agree with the
sources' own figures.

A SpecDrift card prints both arms' output tok/s; the points file keeps the baseline as its own
row and the speculative arm as a ratio rounded to three decimals, so baseline x ratio must give
back the card's speculative tok/s to within that rounding. The acceptance the diagnostic reads
from a row's notes must be the one the card states, and the DeepSeek batch-1 arms must be
sgl-project/sglang PR #3582's 77 tok/s at 1.76x.
"""

from __future__ import annotations

import pytest

from benchmarks.sglang_spec_decomposition import (
    MTP_PR_BS1,
    ROWS,
    measured_arms,
    stated_acceptance,
)
from sim.validation.points import load_points
from tools.moe_validation_points import SPECDRIFT_ROWS

POINTS = {p.point_id: p for p in load_points()}


@pytest.mark.parametrize(("model", "batch", "base", "spec", "accept", "_source"), SPECDRIFT_ROWS)
def test_specdrift_arms_give_back_the_cards_figures(
    model: str, batch: int, base: str, spec: str, accept: str, _source: str
) -> None:
    point = POINTS[f"moe-specdrift-{model}-eagle3-bs{batch}"]
    baseline, speculative = measured_arms(point, POINTS)
    assert baseline == pytest.approx(float(base))
    # The ratio is kept to three decimals: half a unit of the third decimal, relative to it.
    assert speculative == pytest.approx(float(spec), rel=0.0005 / point.measured)
    assert stated_acceptance(point) == pytest.approx(float(accept.split()[-1]))


def test_deepseek_batch1_arms_are_the_pull_requests() -> None:
    baseline, speculative = measured_arms(POINTS["moe-sglang-docs-deepseek-v3-mtp-bs1"], POINTS)
    assert speculative == 77.0 and speculative / baseline == pytest.approx(1.76)
    # Batch 32 has only the documentation's ratio.
    assert measured_arms(POINTS["moe-sglang-docs-deepseek-v3-mtp-bs32"], POINTS) == (None, None)
    assert (
        stated_acceptance(POINTS["moe-sglang-docs-deepseek-v3-mtp-bs32"])
        == (MTP_PR_BS1["acceptance"])
    )


def test_every_row_is_a_speedup_row_with_a_method() -> None:
    for row in ROWS:
        assert POINTS[row].quantity == "speedup" and POINTS[row].method != "none"
