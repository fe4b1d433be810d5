"""specsim plan: SLO parsing, the bracket-and-bisect search, nodes, cost and the winner."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from reports.capacity import MethodPlan, Probe, per_seed_max_rates, pick_winner, plan_row
from reports.rate_search import MAX_DOUBLINGS, RateSearch
from reports.slo import SloTerm, parse_slo, slo_from_mapping
from sim.errors import ScenarioError


def test_parse_slo_reads_terms_and_strictness() -> None:
    terms = parse_slo(" ttft_p99_ms<=2000, tpot_p50_ms < 50 ,e2e_latency_mean_ms<=1e4")
    assert [str(t) for t in terms] == [
        "ttft_p99_ms<=2000",
        "tpot_p50_ms<50",
        "e2e_latency_mean_ms<=10000",
    ]
    assert terms[0].holds(2000.0) and not terms[1].holds(50.0) and terms[1].holds(49.9)
    assert not terms[0].holds(None)
    assert slo_from_mapping({"itl_p90_ms": 30}) == [SloTerm("itl", "p90", 30.0)]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("ttft_p99_ms<=2000,tpot_p42_ms<=50", "tpot_p42_ms"),
        ("ttft_p99_ms>=2000", "ttft_p99_ms>=2000"),
        ("latency_p99_ms<=5", "latency_p99_ms"),
        ("ttft_p99_ms<=-5", "ttft_p99_ms<=-5"),
        ("ttft_p99_ms<=1.2.3", "ttft_p99_ms<=1.2.3"),
        (" , ", "no term"),
    ],
)
def test_a_bad_slo_term_is_named(text: str, named: str) -> None:
    with pytest.raises(ScenarioError, match=named.replace(".", r"\.")):
        parse_slo(text)


def _search(threshold: float, start: float, tolerance: float) -> RateSearch:
    search = RateSearch(start, tolerance)
    for _ in range(200):
        rate = search.next_rate()
        if rate is None:
            return search
        search.record(rate, rate <= threshold)
    raise AssertionError("the search did not stop")


@settings(max_examples=200, deadline=None)
@given(
    start=st.floats(0.1, 100.0),
    ratio=st.floats(1e-3, 1e3),
    tolerance=st.floats(0.01, 0.3),
)
def test_the_bracket_always_holds_the_threshold_and_is_narrow(
    start: float, ratio: float, tolerance: float
) -> None:
    threshold = start * ratio
    search = _search(threshold, start, tolerance)
    assert search.status == "ok"
    assert search.holds_at is not None and search.fails_at is not None
    assert search.holds_at <= threshold < search.fails_at
    assert search.fails_at - search.holds_at <= tolerance * search.fails_at


def test_the_search_gives_up_at_its_limits() -> None:
    assert _search(1e-9, 1.0, 0.05).status == "unattainable"
    unbounded = _search(math.inf, 1.0, 0.05)
    assert unbounded.status == "unbounded" and unbounded.holds_at == 2.0**MAX_DOUBLINGS


def _probe(rate: float, seed_holds: list[bool], ttft: list[float]) -> Probe:
    return Probe(rate, {"ttft_p99_ms": list(ttft)}, [100.0 * rate] * len(ttft), seed_holds, True)


def test_per_seed_rates_stop_below_each_seeds_first_failure() -> None:
    probes = [
        _probe(4.0, [True, True], [1, 1]),
        _probe(8.0, [True, False], [1, 9]),
        _probe(16.0, [False, True], [9, 1]),
        _probe(12.0, [True, True], [1, 1]),
    ]
    # Seed 0 fails first at 16, so 12 counts; seed 1 fails at 8, so its passes above do not.
    assert per_seed_max_rates(probes, 2) == [12.0, 4.0]


def test_nodes_and_cost_follow_their_formulas() -> None:
    search = RateSearch(4.0)
    search.record(10.0, True)
    search.record(11.0, False)
    plan = MethodPlan("eagle3", [], search, [_probe(10.0, [True, True], [100.0, 300.0])])
    slo = parse_slo("ttft_p99_ms<=2000")
    row = plan_row(plan, slo, num_seeds=2, num_gpus=2, target_qps=95.0, gpu_hour_usd=3.0)
    assert row["max_rate_per_s"] == 10.0
    assert (row["bracket_low_per_s"], row["bracket_high_per_s"]) == (10.0, 11.0)
    assert row["nodes_needed"] == 10
    assert row["ttft_p99_ms_at_max"] == 200.0
    assert (row["ttft_p99_ms_at_max_min"], row["ttft_p99_ms_at_max_max"]) == (100.0, 300.0)
    # 1000 tok/s = 3.6e6 tok/h on 2 GPUs at $3/h: $6 per 3.6e6 tokens.
    assert row["cost_per_million_output_tokens_usd"] == pytest.approx(6.0 / 3.6)
    free = plan_row(plan, slo, num_seeds=2, num_gpus=2, target_qps=None, gpu_hour_usd=None)
    assert free["nodes_needed"] is None and free["cost_per_million_output_tokens_usd"] is None


def test_the_winner_needs_fewest_nodes_then_sustains_most() -> None:
    rows: list[dict[str, Any]] = [
        {"method": "none", "status": "ok", "max_rate_per_s": 10.0, "nodes_needed": 3},
        {"method": "eagle3", "status": "ok", "max_rate_per_s": 12.0, "nodes_needed": 3},
        {"method": "ngram", "status": "unsupported", "max_rate_per_s": None, "nodes_needed": None},
    ]
    assert pick_winner(rows) == "eagle3"
    assert pick_winner(rows[2:]) is None


def test_plan_end_to_end_brackets_a_rate_that_holds(
    cli: typer.Typer, runner: CliRunner, tmp_path: Path
) -> None:
    out = tmp_path / "plan"
    args = [
        "plan",
        "--slo",
        "ttft_p99_ms<=80",
        "--methods",
        "none",
        "--requests",
        "40",
        "--seeds",
        "2",
        "--tolerance",
        "0.25",
        "--workers",
        "1",
        "--target-qps",
        "50",
        "--out",
        str(out),
    ]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    plan = json.loads((out / "plan.json").read_text())
    assert plan["winner"] == "none" and plan["num_requests_per_probe"] == 40
    (row,) = plan["methods"]
    low, high = row["bracket_low_per_s"], row["bracket_high_per_s"]
    assert row["status"] == "ok" and row["max_rate_per_s"] == low < high
    assert high - low <= 0.25 * high
    assert row["nodes_needed"] == math.ceil(50 / low)
    assert "no --gpu-hour-usd" in result.output
    probes = pd.read_csv(out / "probes.csv")
    verdict = probes.groupby("rate_per_s")["ttft_p99_ms"].mean() <= 80
    assert verdict[low] and not verdict[high]
    assert (pd.read_csv(out / "plan.csv")["method"] == ["none"]).all()


def test_plan_uses_the_scenarios_slo_and_refuses_none(
    cli: typer.Typer, runner: CliRunner, tmp_path: Path
) -> None:
    result = runner.invoke(cli, ["plan", "--set", "slo=null", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "no SLO" in result.output
    result = runner.invoke(cli, ["plan", "--slo", "ttft_p98_ms<=5", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "ttft_p98_ms" in result.output
