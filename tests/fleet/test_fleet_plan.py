"""``nodes_needed`` and ``specsim fleet-plan``: the answer is verified on both sides, and cost
questions need a price."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from reports.fleet_plan import nodes_needed
from reports.slo import parse_slo
from specsim.cli import app
from tests.fleet.helpers import scenario


def test_answer_holds_and_one_less_fails() -> None:
    loaded = scenario(None, num_requests=1200)
    plan = nodes_needed(
        loaded,
        Path("."),
        target_rate_per_s=80.0,
        slo=parse_slo("ttft_p99_ms<=300"),
        single_node_max_rate_per_s=80.0,
        price_per_gpu_hour=2.0,
        want_cost=True,
    )
    assert plan.num_units is not None and plan.num_units >= 2
    verdicts = {p.num_units: p.holds for p in plan.probes}
    assert verdicts[plan.num_units] is True
    assert verdicts[plan.num_units - 1] is False
    assert plan.start_units == 1
    assert plan.num_gpus == plan.num_units
    assert plan.cost_per_hour_usd == 2.0 * plan.num_gpus
    tokens_per_hour = plan.output_throughput_tok_s * 3600.0
    assert (
        abs(
            plan.cost_per_million_output_tokens_usd - plan.cost_per_hour_usd / tokens_per_hour * 1e6
        )
        < 1e-12
    )


def test_a_cost_question_without_a_price_is_exit_2() -> None:
    result = CliRunner().invoke(
        app,
        ["fleet-plan", "--target-rate", "10", "--slo", "ttft_p99_ms<=2000", "--cost"],
    )
    assert result.exit_code == 2
    assert "price per GPU-hour" in result.output
    assert "Traceback" not in result.output


def test_an_slo_no_fleet_meets_is_exit_2() -> None:
    result = CliRunner().invoke(
        app,
        [
            "fleet-plan",
            "--target-rate",
            "20",
            "--slo",
            "ttft_p99_ms<=0.001",
            "--max-units",
            "2",
            "--set",
            "workload.num_requests=60",
        ],
    )
    assert result.exit_code == 2
    assert "no fleet of up to 2 units holds the SLO" in result.output
