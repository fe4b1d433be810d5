"""specsim plan: SLO and goodput parsing, the search, probes, per-seed rates, ties, nodes, cost,
the command line, and the soundness of its answer on a small fast scenario."""

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

from reports.goodput import GoodputTarget, parse_goodput
from reports.plan_check import check_plan
from reports.plan_rows import MethodPlan, per_seed_rates, pick_winner, plan_row
from reports.probes import CONFIRM_FAILS, CONFIRM_HOLDS, Probe, ProbeRan
from reports.rate_search import MAX_DOUBLINGS, MAX_HALVINGS, RateSearch
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


def _search(
    threshold: float, start: float, tolerance: float, first_step: float = 1.0
) -> RateSearch:
    search = RateSearch(start, tolerance, first_step)
    for _ in range(200):
        rate = search.next_rate()
        if rate is None:
            return search
        search.record(rate, rate <= threshold)
    raise AssertionError("the search did not stop")


def test_a_start_within_the_tolerance_of_the_answer_brackets_it_in_two_probes() -> None:
    # Start just above the threshold with a first step of the tolerance: the start fails, the
    # rate one step below holds, and that bracket, start·(1 − 1/1.05) = 4.8% wide, is narrow
    # enough; double-or-halve steps take six (100, 50, 75, 87.5, 93.75, 96.875).
    near = _search(threshold=97.0, start=100.0, tolerance=0.05, first_step=0.05)
    assert near.num_recorded == 2 and near.holds_at == pytest.approx(100.0 / 1.05)
    assert _search(threshold=97.0, start=100.0, tolerance=0.05).num_recorded == 6


@settings(max_examples=200, deadline=None)
@given(
    start=st.floats(0.1, 100.0),
    ratio=st.floats(1.01 * 2.0**-MAX_HALVINGS, 1e3),
    tolerance=st.floats(0.01, 0.3),
    first_step=st.floats(0.01, 1.0),
)
def test_the_bracket_always_holds_the_threshold_and_is_narrow(
    start: float, ratio: float, tolerance: float, first_step: float
) -> None:
    threshold = start * ratio
    search = _search(threshold, start, tolerance, first_step)
    assert search.status == "ok"
    assert search.holds_at is not None and search.fails_at is not None
    assert search.holds_at <= threshold < search.fails_at
    assert search.fails_at - search.holds_at <= tolerance * search.fails_at


@settings(max_examples=200, deadline=None)
@given(
    start=st.floats(0.5, 50.0),
    ratio=st.floats(0.2, 20.0),
    band=st.floats(0.0, 0.3),
    tolerance=st.floats(0.01, 0.3),
    first_step=st.floats(0.01, 1.0),
)
def test_undecided_rates_widen_the_bracket_and_never_enter_it_as_holding(
    start: float, ratio: float, band: float, tolerance: float, first_step: float
) -> None:
    # Holds below a, undecided in [a, b) (within the noise of the bound), fails from b.
    a = start * ratio
    b = a * (1.0 + band)
    search = RateSearch(start, tolerance, first_step)
    for _ in range(300):
        rate = search.next_rate()
        if rate is None:
            break
        search.record(rate, True if rate < a else None if rate < b else False)
    else:
        raise AssertionError("the search did not stop")
    low, high, gray = search.holds_at, search.fails_at, search.undecided
    assert low is not None and high is not None
    assert low < a and high >= b and all(a <= g < b for g in gray)
    # Each gap around the undecided band is within the tolerance; without one, the bracket is.
    ceiling, floor = (gray[0], gray[-1]) if gray else (high, low)
    assert ceiling - low <= tolerance * ceiling and high - floor <= tolerance * high


def test_a_longer_run_replaces_a_rates_verdict() -> None:
    search = RateSearch(10.0)
    search.record(10.0, True)
    search.record(11.0, False)
    assert (search.holds_at, search.fails_at) == (10.0, 11.0)
    search.record(10.0, None)  # refuted at the longest runs: within the noise of the bound
    assert search.holds_at is None and search.undecided == [10.0]
    search.record(9.0, True)
    assert (search.holds_at, search.fails_at, search.undecided) == (9.0, 11.0, [10.0])
    # Only a rate in the lower gap, where holding makes it the answer, goes straight to the end.
    assert search.below_ceiling(9.5) and not search.below_ceiling(10.5)


def test_the_search_gives_up_at_its_limits() -> None:
    nothing = _search(1e-9, 1.0, 0.05)
    assert nothing.status == "unattainable" and nothing.fails_at == 2.0**-MAX_HALVINGS
    unbounded = _search(math.inf, 1.0, 0.05)
    assert unbounded.status == "unbounded" and unbounded.holds_at == 2.0**MAX_DOUBLINGS


def _outcome(verdict: str, served: float = 10.0, point: str | None = None) -> ProbeRan:
    check = {"name": "ttft_p99_ms", "value": 100.0, "low": 90.0, "high": 120.0,
             "limit": "<= 2000", "verdict": verdict}  # fmt: skip
    point = point or (verdict if verdict != "undecided" else "fails")
    judgement = {"verdict": verdict, "stability": "holds", "offered_rate_req_s": 10.0,
                 "served_rate_req_s": served, "checks": [check],
                 "point_verdict": point}  # fmt: skip
    return ProbeRan(judgement, {"output_throughput_tok_s": 1000.0})


def test_an_undecided_seed_runs_longer_up_to_the_cap_and_stays_undecided_there() -> None:
    probe = Probe(10.0, [0, 1], base_requests=500, max_requests=5000)
    assert probe.pending() == [(0, 500), (1, 500)]
    probe.record(0, 500, _outcome("holds"))
    probe.record(1, 500, _outcome("undecided"))
    assert probe.pending() == [(1, 2000)]  # four times longer
    probe.record(1, 2000, _outcome("undecided"))
    assert probe.pending() == [(1, 5000)]  # capped
    probe.record(1, 5000, _outcome("undecided"))  # point figures fail: a coin toss, not a verdict
    assert probe.pending() == [] and not probe.holds and probe.outcome is None
    assert probe.seed_holds(0) is True and probe.seed_holds(1) is None
    assert probe.decided_by(0) == "interval" and probe.decided_by(1) == "gray"
    assert "seed 1, 5000 requests" in probe.reason()
    # At the cap the point figures must agree with the interval's verdict.
    for verdict, point in (("undecided", "holds"), ("holds", "fails"), ("fails", "holds")):
        one = Probe(10.0, [0], base_requests=2000, max_requests=2000)
        one.record(0, 2000, _outcome(verdict, point=point))
        assert one.outcome is None and one.decided_by(0) == "gray"
    agreed = Probe(10.0, [0], base_requests=2000, max_requests=2000)
    agreed.record(0, 2000, _outcome("holds"))
    assert agreed.outcome is True and agreed.confirmed()


def test_a_seed_undecided_for_good_leaves_one_run_to_each_other_seed() -> None:
    probe = Probe(10.0, [0, 1, 2], base_requests=500, max_requests=500, lead=1)
    probe.record(1, 500, _outcome("undecided"))
    assert probe.pending() == [(0, 500), (2, 500)]
    probe.record(0, 500, _outcome("undecided"))
    probe.record(2, 500, _outcome("holds"))
    assert probe.pending() == [] and probe.outcome is None
    probe.record(0, 500, _outcome("fails"))  # a failure in another seed still counts
    assert probe.outcome is False


def test_longer_runs_go_one_seed_at_a_time_the_likeliest_failure_first() -> None:
    probe = Probe(10.0, [0, 1, 2], base_requests=500, max_requests=5000)
    probe.record(0, 500, _outcome("undecided", point="holds"))
    probe.record(1, 500, _outcome("undecided", point="fails"))
    assert probe.pending() == [(2, 500)]  # first runs all at once
    probe.record(2, 500, _outcome("undecided", point="holds"))
    assert probe.pending() == [(1, 2000)]
    probe.record(1, 2000, _outcome("fails"))
    assert probe.pending() == [] and probe.outcome is False  # the others never ran longer


def test_confirmation_runs_the_answer_in_every_seed_and_the_rate_above_until_one_fails() -> None:
    answer = Probe(10.0, [0, 1, 2], base_requests=500, max_requests=5000, lead=2)
    for seed in (0, 1, 2):
        answer.record(seed, 500, _outcome("holds"))
    assert answer.outcome is True and not answer.confirmed()
    answer.confirm = CONFIRM_HOLDS
    assert answer.pending() == [(2, 5000)]  # the lead first, alone
    answer.record(2, 5000, _outcome("holds"))
    assert answer.pending() == [(0, 5000), (1, 5000)]
    answer.record(0, 5000, _outcome("holds"))
    answer.record(1, 5000, _outcome("undecided"))
    assert answer.pending() == [] and answer.outcome is None  # refuted: not shown to hold
    above = Probe(11.0, [0, 1, 2], base_requests=500, max_requests=5000)
    above.record(0, 500, _outcome("holds"))
    above.record(1, 500, _outcome("fails"))
    above.confirm = CONFIRM_FAILS
    assert above.pending() == [(1, 5000)]  # the failing seed first
    above.record(1, 5000, _outcome("undecided"))
    assert above.pending() == [(0, 5000)] and above.outcome is None
    above.record(0, 5000, _outcome("fails"))
    assert above.pending() == [] and above.outcome is False and above.confirmed()


def test_the_lead_seed_runs_alone_until_it_holds() -> None:
    probe = Probe(10.0, [0, 1, 2], base_requests=500, max_requests=1000, lead=1)
    assert probe.pending() == [(1, 500)]
    probe.record(1, 500, _outcome("undecided"))
    assert probe.pending() == [(1, 1000)]
    probe.record(1, 1000, _outcome("holds"))
    assert probe.pending() == [(0, 500), (2, 500)]
    failing = Probe(10.0, [0, 1, 2], base_requests=500, max_requests=1000, lead=2)
    failing.record(2, 500, _outcome("fails"))
    assert failing.pending() == [] and not failing.holds and failing.first_failing() == 2


def test_one_failing_seed_settles_the_probe() -> None:
    probe = Probe(10.0, [0, 1, 2], base_requests=500, max_requests=2000)
    probe.record(0, 500, _outcome("undecided"))
    probe.record(1, 500, _outcome("fails"))
    probe.record(2, 500, _outcome("holds"))
    assert probe.pending() == [] and not probe.holds
    assert probe.seed_holds(0) is None  # cut short: not counted either way
    assert probe.outcome is False and probe.confirmed() is False  # failed short of the cap
    with pytest.raises(ValueError, match="base_requests"):
        Probe(1.0, [0], base_requests=10, max_requests=5)


def _settled(rate: float, verdicts: list[str]) -> Probe:
    probe = Probe(rate, list(range(len(verdicts))), base_requests=100, max_requests=100)
    for seed, verdict in enumerate(verdicts):
        probe.record(seed, 100, _outcome(verdict, served=rate))
    return probe


def test_per_seed_rates_stop_below_each_seeds_first_failure() -> None:
    probes = [
        _settled(4.0, ["holds", "holds"]),
        _settled(8.0, ["holds", "fails"]),
        _settled(16.0, ["fails", "holds"]),
        _settled(12.0, ["holds", "holds"]),
    ]
    # Seed 0 fails first at 16, so 12 counts; seed 1 fails at 8, so its passes above do not.
    assert per_seed_rates(probes, [0, 1]) == ([12.0, 4.0], [16.0, 8.0])


def _plan(method: str, probes: list[Probe]) -> MethodPlan:
    search = RateSearch(4.0)
    for probe in probes:
        search.record(probe.rate_per_s, probe.holds)
    return MethodPlan(method, [], search, probes)


def test_the_row_reports_the_rate_every_seed_held_nodes_and_cost() -> None:
    plan = _plan("eagle3", [_settled(10.0, ["holds", "holds"]), _settled(11.0, ["holds", "fails"])])
    row = plan_row(plan, [0, 1], num_gpus=2, target_qps=95.0, gpu_hour_usd=3.0)
    assert row["status"] == "ok" and row["max_rate_per_s"] == 10.0
    assert (row["bracket_low_per_s"], row["bracket_high_per_s"]) == (10.0, 11.0)
    assert row["per_seed_max_rate_per_s"] == [11.0, 10.0]
    assert (row["interval_low_per_s"], row["interval_high_per_s"]) == (10.0, 11.0)
    assert row["nodes_estimate"] == 10 and row["nodes_needed"] is None  # no fleet run here
    assert row["served_rate_per_seed_req_s"] == [10.0, 10.0]
    assert row["ttft_p99_ms_interval_at_max"] == [[90.0, 120.0], [90.0, 120.0]]
    # 1000 tok/s = 3.6e6 tok/h on 2 GPUs at $3/h: $6 per 3.6e6 tokens.
    assert row["cost_per_million_output_tokens_usd"] == pytest.approx(6.0 / 3.6)
    free = plan_row(plan, [0, 1], num_gpus=2, target_qps=None, gpu_hour_usd=None)
    assert free["nodes_estimate"] is None and free["cost_per_million_output_tokens_usd"] is None


def test_the_row_says_at_which_rates_the_simulated_requests_went() -> None:
    # 10 held, 12 undecided at the longest run (seed 1), 14 failed; 11 and 16 are neither end.
    gray = Probe(12.0, [0, 1], base_requests=100, max_requests=400)
    gray.record(0, 100, _outcome("holds"))
    gray.record(1, 400, _outcome("undecided"))
    probes = [_settled(r, v) for r, v in ((11.0, ["holds"] * 2), (16.0, ["fails"] * 2))]
    probes += [_settled(10.0, ["holds"] * 2), gray, _settled(14.0, ["holds", "fails"])]
    search = RateSearch(10.0)
    for probe in probes:
        search.record(probe.rate_per_s, probe.outcome)  # None at 12: undecided
    plan = MethodPlan("ngram", [], search, probes)
    # 10 and 11 held below the undecided 12: the max is 11, the first rate above 14.
    row = plan_row(plan, [0, 1], num_gpus=1, target_qps=None, gpu_hour_usd=None)
    assert row["max_rate_per_s"] == 11.0 and row["undecided_rates_per_s"] == [12.0]
    assert row["simulated_requests_at_max"] == 200
    assert row["simulated_requests_at_first_above"] == 200
    assert row["simulated_requests_at_undecided"] == 500
    assert row["simulated_requests_elsewhere"] == 400  # 10 and 16 req/s
    parts = [row[f"simulated_requests_{k}"] for k in ("at_max", "at_first_above",
             "at_undecided", "elsewhere")]  # fmt: skip
    assert sum(parts) == row["num_simulated_requests"] == 1300


def test_no_stable_rate_is_said_not_replaced_by_the_lowest_probe() -> None:
    plan = _plan("none", [_settled(2.0, ["fails"]), _settled(1.0, ["fails"])])
    row = plan_row(plan, [0], num_gpus=1, target_qps=10.0, gpu_hour_usd=None)
    assert row["status"] == "no_stable_rate" and row["max_rate_per_s"] is None
    assert row["reason"].startswith("no stable rate") and "1 req/s" in row["reason"]
    assert "nodes_needed" not in row and "nodes_estimate" not in row


def _row(method: str, rate: float, low: float, high: float | None) -> dict[str, Any]:
    return {"method": method, "status": "ok", "max_rate_per_s": rate,
            "interval_low_per_s": low, "interval_high_per_s": high}  # fmt: skip


def test_overlapping_intervals_tie_and_the_simpler_method_wins_the_tie() -> None:
    rows = [_row("none", 30.0, 29.0, 34.0), _row("eagle3", 32.0, 31.0, 36.0)]
    assert pick_winner(rows) == ("none", ["none", "eagle3"])
    apart = [_row("none", 30.0, 29.0, 31.0), _row("eagle3", 40.0, 38.0, 44.0)]
    assert pick_winner(apart) == ("eagle3", [])
    speculative = [_row("eagle3", 40.0, 38.0, 44.0), _row("medusa", 41.0, 39.0, None)]
    assert pick_winner(speculative) == ("medusa", ["eagle3", "medusa"])
    assert pick_winner([{"method": "none", "status": "unsupported"}]) == (None, [])


def test_goodput_pairs_read_as_vllm_writes_them() -> None:
    target = parse_goodput("ttft:500 tpot:50,e2el:8000", 0.95)
    assert target == GoodputTarget({"ttft": 500.0, "tpot": 50.0, "e2el": 8000.0}, 0.95)
    bad = [("ttft=500", "KEY:VALUE"), ("itl:5", "unknown metric"), ("ttft:5 ttft:6", "twice"),
           ("ttft:-1", "> 0"), ("", "no KEY")]  # fmt: skip
    for text, named in bad:
        with pytest.raises(ScenarioError, match=named):
            parse_goodput(text)
    with pytest.raises(ScenarioError, match="goodput-min"):
        parse_goodput("ttft:5", 1.5)


#: A node that saturates cleanly and simulates fast: a 1B model, four sequences at a time,
#: 64-token prompts and 16-token outputs.
SMALL = {
    "name": "small-plan",
    "model": "llama-3.2-1b",
    "engine": {"preset": "vllm-v1", "max_num_seqs": 4},
    "workload": {
        "num_requests": 600,
        "arrival": {"process": "poisson", "rate_per_s": 20.0},
        "prompt_tokens": {"distribution": "fixed", "value": 64},
        "output_tokens": {"distribution": "fixed", "value": 16},
    },
    "slo": {"ttft_p99_ms": 200},
}
SMALL_ARGS = ["--requests", "600", "--seeds", "2", "--tolerance", "0.1", "--workers", "1"]


def _small(tmp_path: Path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(json.dumps(SMALL))
    return path


def test_plan_end_to_end_and_its_answer_holds_in_a_ten_times_longer_run(
    cli: typer.Typer, runner: CliRunner, tmp_path: Path
) -> None:
    out = tmp_path / "plan"
    args = ["plan", str(_small(tmp_path)), "--methods", "none", "--target-qps", "500"]
    result = runner.invoke(cli, [*args, *SMALL_ARGS, "--out", str(out)])
    assert result.exit_code == 0, result.output
    plan = json.loads((out / "plan.json").read_text())
    assert plan["complete"] and plan["winner"] == "none" and plan["seeds"] == [0, 1]
    (row,) = plan["methods"]
    low, high = row["bracket_low_per_s"], row["bracket_high_per_s"]
    assert row["status"] == "ok" and row["max_rate_per_s"] == low < high
    assert row["first_rate_above_per_s"] == high
    assert row["resolution"] == pytest.approx(high / low - 1)
    # Each gap around the rates undecided at the longest runs is within the tolerance.
    gray = row["undecided_rates_per_s"]
    assert all(low < rate < high for rate in gray)
    ceiling, floor = (gray[0], gray[-1]) if gray else (high, low)
    assert ceiling - low <= 0.1 * ceiling and high - floor <= 0.1 * high
    # Nodes: the estimate is where the fleet search starts; the answer is verified by fleet runs
    # at 500 req/s: N holds in every seed and N - 1 does not.
    assert row["nodes_estimate"] == math.ceil(500 / low)
    fleet = plan["fleet"]
    assert row["nodes_needed"] == fleet["num_units"] and fleet["target_rate_per_s"] == 500
    verdicts = {probe["num_units"]: probe["holds"] for probe in fleet["probes"]}
    assert verdicts[fleet["num_units"]] and all(len(p["seed_holds"]) == 2 for p in fleet["probes"])
    assert fleet["num_units"] == 1 or verdicts[fleet["num_units"] - 1] is False
    assert row["stability_at_max"] == "stable" and len(row["served_rate_per_seed_req_s"]) == 2
    probes = pd.read_csv(out / "probes.csv")
    assert probes[probes["rate_per_s"] == low]["seed_holds"].eq(True).all()
    # The answer's soundness: ten times longer runs hold at the max rate in every seed and
    # do not at the first probed rate above it.
    from sim.scenario import read_document

    document, base_dir, source = read_document(_small(tmp_path))
    checks = check_plan(document, base_dir, source, plan, parse_slo("ttft_p99_ms<=200"), 10)
    by_which = {entry["which"]: entry for entry in checks}
    assert by_which["max"]["holds_in_every_seed"], by_which["max"]
    assert all(run["served_share"] >= 0.97 for run in by_which["max"]["runs"])
    assert not by_which["above"]["holds_in_every_seed"], by_which["above"]


def test_an_slo_no_rate_meets_exits_2_with_no_stable_rate(
    cli: typer.Typer, runner: CliRunner, tmp_path: Path
) -> None:
    out = tmp_path / "plan"
    args = ["plan", str(_small(tmp_path)), "--methods", "none", "--slo", "tpot_p50_ms<=0.01"]
    result = runner.invoke(cli, [*args, *SMALL_ARGS, "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "no stable rate" in result.output and "tpot_p50_ms" in result.output
    plan = json.loads((out / "plan.json").read_text())
    assert plan["methods"][0]["status"] == "no_stable_rate"


def test_plan_uses_the_scenarios_slo_and_refuses_none(
    cli: typer.Typer, runner: CliRunner, tmp_path: Path
) -> None:
    result = runner.invoke(cli, ["plan", "--set", "slo=null", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "no SLO" in result.output
    result = runner.invoke(cli, ["plan", "--slo", "ttft_p98_ms<=5", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "ttft_p98_ms" in result.output
    result = runner.invoke(cli, ["plan", "--goodput", "ttft=5", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "KEY:VALUE" in result.output
    result = runner.invoke(cli, ["plan", "--goodput-min", "0.9", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "--goodput" in result.output
