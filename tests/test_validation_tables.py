"""The report cannot hide a miss: every row is printed with its verdict, MAPE counts every
expressible row, and targets and speedup checks say MISS when the figures miss."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from sim.validation import format_report, is_miss, mape, speedup_checks, targets
from sim.validation.runner import ValidationResult
from sim.validation.tables import TOLERANCE
from specsim.cli import app
from tools.quoted_validation_points import EAGLE3_T3_BATCH, EAGLE3_T3_SPEEDUP


def _result(
    measured: float,
    predicted: float | None,
    *,
    quantity: str = "tpot_ms",
    regime: str = "tp",
    fitted_by: str = "",
    point_id: str = "p1",
    concurrency: int | None = None,
) -> ValidationResult:
    return ValidationResult(
        point_id=point_id,
        regime=regime,
        setup="a setup",
        quantity=quantity,
        statistic="mean",
        unit="ms",
        measured=measured,
        predicted=predicted,
        source_group="a-source",
        source="a source",
        fitted_by=fitted_by,
        reason="" if predicted is not None else "FP8 weights",
        concurrency=concurrency,
    )


def test_a_wrong_prediction_is_a_miss_everywhere_it_shows() -> None:
    wrong = _result(10.0, 20.0)
    assert is_miss(wrong)
    report = format_report([wrong])
    assert "| p1 | a setup | tpot_ms (mean) | 10 | 20 | +100.0% | MISS |" in report
    assert "1 of 1 rows are misses." in report
    assert "100.0% (n=1)" in report
    assert "MISS  out-of-sample tpot MAPE, batch 1-128: 100.0%" in report


@given(
    measured=st.floats(min_value=0.1, max_value=1e4),
    ratio=st.floats(min_value=0.01, max_value=5.0),
    family=st.sampled_from(["tpot_ms", "ttft_ms", "output_tok_s"]),
)
def test_verdict_follows_the_tolerance(measured: float, ratio: float, family: str) -> None:
    result = _result(measured, measured * ratio, quantity=family)
    error = abs(result.relative_error or 0.0)
    assert is_miss(result) == (error > TOLERANCE[result.family])
    line = next(line for line in format_report([result]).splitlines() if line.startswith("| p1"))
    assert ("| MISS |" in line) == is_miss(result)


def test_fitted_and_out_of_sample_rows_are_apart_and_unexpressible_rows_kept() -> None:
    rows = [
        _result(10.0, 10.1, fitted_by="a fit", point_id="fitted-row"),
        _result(10.0, 13.0, point_id="check-row"),
        _result(10.0, None, point_id="fp8-row"),
    ]
    report = format_report(rows)
    fitted, outside = report.split("Out-of-sample rows")
    assert "fitted-row" in fitted and "check-row" not in fitted
    assert "check-row" in outside and "fitted-row" not in outside
    assert "- fp8-row: tpot_ms 10 ms - not expressible: FP8 weights" in report
    value, count = mape(rows, "tpot")
    assert count == 2 and value is not None
    outside_target = next(t for t in targets(rows) if t.name.startswith("out-of-sample tpot MAPE"))
    assert outside_target.count == 1 and outside_target.passed is False


def test_rows_above_128_clients_are_reported_beside_the_target_not_in_it() -> None:
    # Issue #8 states its MAPE targets at batch 1-128: a 256-client closed loop is outside them,
    # a 128-client one and any row that is not a closed loop inside; the row outside is printed
    # on the target's line, so a miss there stays in sight.
    rows = [
        _result(10.0, 11.0, point_id="c128", concurrency=128),
        _result(10.0, 10.5, point_id="open"),
        _result(10.0, 30.0, point_id="c256", concurrency=256),
    ]
    target = next(t for t in targets(rows) if t.name.startswith("out-of-sample tpot MAPE"))
    assert target.count == 2 and target.value is not None
    assert abs(target.value - 7.5) < 1e-9 and target.passed is True
    assert target.line().endswith("above 128 clients, outside the target, 200.0% (n=1)")
    ttft = next(t for t in targets(rows) if t.name.startswith("out-of-sample ttft MAPE"))
    assert ttft.passed is None and ttft.apart == ""


def test_batch1_fitted_rows_are_held_to_three_percent() -> None:
    row = _result(10.0, 10.5, regime="batch-1", fitted_by="engine preset")
    assert is_miss(row)
    target = next(t for t in targets([row]) if t.name.startswith("batch-1"))
    assert target.passed is False


def _speedups(method: str, values: dict[int, float]) -> list[ValidationResult]:
    return [
        _result(
            1.0,
            value,
            quantity="speedup",
            regime="speculation",
            point_id=f"eagle3-t3-{method}-bs{b}",
        )
        for b, value in values.items()
    ]


def test_speedup_checks_pass_and_miss_on_the_predicted_shape() -> None:
    falling = _speedups("eagle", {2: 1.4, 24: 0.93, 64: 0.9}) + _speedups(
        "eagle3", {2: 1.8, 64: 1.3}
    )
    lines = [c.line() for c in speedup_checks(falling, tree_speedup_at=lambda batch: 0.8)]
    assert all(not line.startswith("MISS") for line in lines), lines
    flat = _speedups("eagle", {2: 1.4, 24: 1.5, 64: 1.6}) + _speedups("eagle3", {2: 1.8, 64: 0.9})
    checks = {c.name: c.passed for c in speedup_checks(flat, tree_speedup_at=lambda batch: 1.2)}
    assert checks["EAGLE-1 speedup falls with batch (SGLang v0.4.4)"] is False
    assert checks["EAGLE-1 reaches <= 1x by batch 16-32 (SGLang v0.4.4)"] is False
    assert checks["EAGLE-3 still > 1x at batch 64 (SGLang v0.4.4)"] is False
    assert any(
        name.startswith("EAGLE-2 tree") and passed is False for name, passed in checks.items()
    )


def test_cli_refuses_an_unknown_regime_with_exit_code_2() -> None:
    outcome = CliRunner().invoke(app, ["validate", "--regime", "fast"])
    assert outcome.exit_code == 2
    assert "unknown regime 'fast'" in outcome.output
    assert "Traceback" not in outcome.output


def _table3(
    predicted: dict[str, dict[int, float]], measured: dict[str, tuple[float, ...]]
) -> list[ValidationResult]:
    rows = []
    for method, values in predicted.items():
        for batch, measured_value in zip(EAGLE3_T3_BATCH, measured[method], strict=True):
            row = _result(
                measured_value,
                values[batch],
                quantity="speedup",
                regime="speculation",
                point_id=f"eagle3-t3-{method}-bs{batch}",
            )
            rows.append(row)
    return rows


HEAD_RATIO = "EAGLE-3 / EAGLE-1 speedup ratio grows with batch (SGLang v0.4.4)"


def _head_ratio_verdict(rows: list[ValidationResult]) -> bool | None:
    return next(c.passed for c in speedup_checks(rows) if c.name == HEAD_RATIO)


def test_head_ratio_check_passes_on_table3_itself_and_misses_a_constant_ratio() -> None:
    # Predicting Table 3 exactly carries all of its growth (1.29 at batch 2 -> ~1.44 from 16);
    # EAGLE-3 a fixed 6 % above EAGLE-1 at every batch carries none of it.
    exact, constant = _exact_and_constant()
    assert _head_ratio_verdict(_table3(exact, EAGLE3_T3_SPEEDUP)) is True
    assert _head_ratio_verdict(_table3(constant, EAGLE3_T3_SPEEDUP)) is False
    # Without a measured growth, or without a batch under load, the check does not judge.
    flat = {"eagle": EAGLE3_T3_SPEEDUP["eagle"], "eagle3": EAGLE3_T3_SPEEDUP["eagle"]}
    assert _head_ratio_verdict(_table3(exact, flat)) is None
    small = [r for r in _table3(exact, EAGLE3_T3_SPEEDUP) if int(r.point_id.split("bs")[1]) < 16]
    assert _head_ratio_verdict(small) is None


def _exact_and_constant() -> list[dict[str, dict[int, float]]]:
    exact = {m: dict(zip(EAGLE3_T3_BATCH, v, strict=True)) for m, v in EAGLE3_T3_SPEEDUP.items()}
    constant = {"eagle": exact["eagle"], "eagle3": {b: 1.06 * v for b, v in exact["eagle"].items()}}
    return [exact, constant]


@given(st.lists(st.floats(0.5, 2.0), min_size=len(EAGLE3_T3_BATCH), max_size=len(EAGLE3_T3_BATCH)))
def test_head_ratio_check_ignores_a_mechanism_both_heads_share(factors: list[float]) -> None:
    # A batch mechanism both heads pay scales both speedups at a batch alike: the verdict stays
    # (a pass stays a pass, a miss a miss).
    for base in _exact_and_constant():
        scaled = {
            m: {b: v * f for (b, v), f in zip(values.items(), factors, strict=True)}
            for m, values in base.items()
        }
        verdict = _head_ratio_verdict(_table3(base, EAGLE3_T3_SPEEDUP))
        assert _head_ratio_verdict(_table3(scaled, EAGLE3_T3_SPEEDUP)) == verdict
