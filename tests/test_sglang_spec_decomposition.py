"""The two arms the SGLang speculative decomposition sets beside each speedup row agree with the
sources' own figures.

A SpecDrift card prints both arms' output tok/s; the points file keeps the baseline as its own
row and the speculative arm as a ratio rounded to three decimals, so baseline x ratio must give
back the card's speculative tok/s to within that rounding. The acceptance the diagnostic reads
from a row's notes must be the one the card states, and the DeepSeek batch-1 arms must be
sgl-project/sglang PR #3582's 77 tok/s at 1.76x. The plain DeepSeek-V3 rows of SGLang v0.4.1.post2
(sgl-project/sglang PR #2643) must run as their harness, ``bench_one_batch_server``, ran them.
"""

from __future__ import annotations

import sys

import pytest

from benchmarks.sglang_spec_decomposition import (
    MTP_PR_BS1,
    ROWS,
    main,
    measured_arms,
    stated_acceptance,
)
from sim.validation.points import load_points
from sim.validation.scenarios import build_scenario
from tools.moe_validation_points import SGLANG_V041_ROWS, SPECDRIFT_ROWS

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


def test_every_row_is_a_speedup_row_with_a_method_or_a_plain_throughput_row() -> None:
    for row in ROWS:
        point = POINTS[row]
        speedup = point.quantity == "speedup" and point.method != "none"
        plain = point.quantity == "output_tok_s" and point.method == "none"
        assert speedup or plain, row


@pytest.mark.parametrize(("batch", "value"), SGLANG_V041_ROWS)
def test_release_rows_run_one_batch_as_bench_one_batch_server(batch: int, value: str) -> None:
    """SGLang v0.4.1.post2's figures come from ``bench_one_batch_server``: the whole batch in one
    request, so the simulated run is ``batch`` requests sent at once and nothing more (no
    warm-up kept, no second round), of the release's 128/256 tokens, on the engine era's preset."""
    point = POINTS[f"moe-sglang-v041-deepseek-v3-bs{batch}"]
    assert point.measured == float(value) and point.quantity == "output_tok_s"
    scenario = build_scenario(point)
    workload = scenario.workload
    assert workload.num_requests == batch == workload.arrival.concurrency
    assert scenario.measurement.warmup_requests == 0
    assert (point.prompt_tokens, point.output_tokens) == (128, 256)
    assert scenario.engine.preset == "sglang-0.4" and point.method == "none"
    assert (scenario.hardware.gpu, scenario.hardware.num_gpus) == ("h200", 8)


def test_a_plain_row_prints_its_one_arm(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row without speculation is its own measured arm: one line, its error the simulated
    over the measured throughput, and no speedup line."""
    row = "moe-sglang-v041-deepseek-v3-bs1"
    monkeypatch.setattr(sys, "argv", ["sglang_spec_decomposition", "--rows", row])
    main()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith(f"| {row}")]
    assert len(lines) == 1
    cells = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert cells[1] == "none" and float(cells[3]) == pytest.approx(POINTS[row].measured, abs=0.05)
    # The printed prediction is rounded to 0.1 tok/s and the error is computed before rounding,
    # so the error read back from the printed prediction may differ by that rounding.
    measured = POINTS[row].measured
    error = float(cells[2].replace(",", "")) / measured - 1
    printed = float(cells[4].rstrip("%")) / 100
    assert printed == pytest.approx(error, abs=0.05 / measured + 0.0005)
