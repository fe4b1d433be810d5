"""A method's answer from its probes: the rate, per-seed rates, the interval, ties and the winner.

**Resolution.** ``first_rate_above_per_s`` is the lowest rate that failed, confirmed at the
longest runs in one seed: the first rate above the max at the search's resolution. Rates between
the two that were undecided at the longest runs (``undecided_rates_per_s``: within the noise of
the bound) widen ``resolution`` = first rate above / max rate − 1 beyond the tolerance: the plan
does not claim a finer answer than the noise allows.

**Per-seed rates.** For each seed, its highest probed rate that held below the lowest rate where
it failed (``per_seed_max_rate_per_s``), and that lowest failing rate
(``per_seed_fail_rate_per_s``). The method's **max rate** is the highest probed rate that held in
every seed. Its **interval** runs from the lowest per-seed max rate (the max rate) to the higher
of the lowest rate that failed in some seed (the bracket's upper end) and the highest per-seed
max rate: the capacity of any one seed lies there, to the search's resolution. It is open above
(None) when no probed rate failed.

**Ties.** Two methods whose intervals overlap are tied: neither is shown to sustain more. The
winner is the method with the highest max rate unless others tie with it; among tied methods the
tie-break prefers the one that deploys least, in :data:`TIE_BREAK_ORDER` (no speculation, then
n-gram lookup, which needs no extra weights), then the higher max rate. A speculative method is
thus recommended only when its capacity is shown to exceed the simpler one's.
"""

from __future__ import annotations

import math
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reports.fleet_plan import nodes_needed
from reports.probes import Probe, probe_document
from reports.rate_search import RateSearch
from reports.slo import SloTerm
from reports.stability import Target
from sim.scenario import validate_document

#: Tie-break order among tied methods: least to deploy first; the rest after, by max rate.
TIE_BREAK_ORDER = ("none", "ngram")


@dataclass
class MethodPlan:
    """One method's capacity search: its finished probes, the one under way, why it stopped."""

    method: str
    adjustments: list[str]
    search: RateSearch
    probes: list[Probe] = field(default_factory=list)
    current: Probe | None = None
    reason: str | None = None
    interrupted: bool = False
    saturation_rate: float | None = None  # where the search started, if measured
    lead_seed: int | None = None  # the seed that failed at the last failing rate

    @property
    def status(self) -> str:
        """``unsupported``, ``interrupted``, ``no_stable_rate``, ``unbounded`` or ``ok``."""
        if self.reason is not None:
            return "unsupported"
        if self.interrupted:
            return "interrupted"
        return {"unattainable": "no_stable_rate"}.get(self.search.status, self.search.status)


def per_seed_rates(probes: list[Probe], seeds: list[int]) -> tuple[list[float], list[float | None]]:
    """Each seed's highest rate that held below its lowest failing rate, and that failing rate
    (None if it never failed). A seed cut short at a rate (another seed failed) is not counted."""
    highs: list[float] = []
    fails: list[float | None] = []
    for seed in seeds:
        failed = [p.rate_per_s for p in probes if p.seed_holds(seed) is False]
        first_fail = min(failed, default=math.inf)
        held = [p.rate_per_s for p in probes if p.seed_holds(seed) and p.rate_per_s < first_fail]
        highs.append(max(held, default=0.0))
        fails.append(first_fail if math.isfinite(first_fail) else None)
    return highs, fails


def plan_row(
    plan: MethodPlan,
    seeds: list[int],
    *,
    num_gpus: int,
    target_qps: float | None,
    gpu_hour_usd: float | None,
) -> dict[str, Any]:
    """One method's answer: rate, bracket, per-seed rates, interval, the figures at the max rate,
    a first estimate of the nodes needed, and cost.

    ``nodes_estimate`` = ceil(target_qps / max rate): where the fleet search starts;
    ``nodes_needed`` is filled in only by a verified fleet run
    (:func:`verify_nodes`). Cost per million output tokens of one node at its
    max rate = gpu_hour_usd × num_gpus / (output tokens per hour at the max rate) × 1e6.
    """
    search = plan.search
    runs = [run for probe in plan.probes for seed_runs in probe.runs.values() for run in seed_runs]
    row: dict[str, Any] = {
        "method": plan.method,
        "status": plan.status,
        "reason": plan.reason,
        "adjustments": "; ".join(plan.adjustments) or None,
        "max_rate_per_s": None,
        "saturation_rate_per_s": plan.saturation_rate,
        "bracket_low_per_s": search.holds_at,
        "bracket_high_per_s": search.fails_at,
        "first_rate_above_per_s": search.fails_at,
        "undecided_rates_per_s": search.undecided,
        "resolution": search.fails_at / search.holds_at - 1.0
        if search.fails_at is not None and search.holds_at
        else None,
        "num_probes": len(plan.probes),
        "num_runs": len(runs),
        "num_simulated_requests": sum(run.simulated_requests for run in runs),
        **requests_by_rate(plan),
    }
    if plan.reason is not None:
        return row
    highs, fails = per_seed_rates(plan.probes, seeds)
    row["per_seed_max_rate_per_s"] = highs
    row["per_seed_fail_rate_per_s"] = fails
    if search.holds_at is None:
        failing = min(plan.probes, key=lambda p: p.rate_per_s, default=None)
        if plan.status == "no_stable_rate" and failing is not None:
            row["reason"] = (
                f"no stable rate: no probed rate down to {failing.rate_per_s:.4g} req/s held in "
                f"every seed; there, {failing.reason()}"
            )
        return row
    row["max_rate_per_s"] = search.holds_at
    row["interval_low_per_s"] = min(highs)
    row["interval_high_per_s"] = (
        max(search.fails_at, *highs) if search.fails_at is not None else None
    )
    # The probe there, or, while it is being confirmed at the longest runs, the probe under way.
    known = [*plan.probes, *([plan.current] if plan.current is not None else [])]
    at_max = [p for p in known if p.rate_per_s == search.holds_at][-1]
    row.update(at_max_figures(at_max, seeds))
    throughput = row["output_throughput_tok_s"]
    rate = row["max_rate_per_s"]
    row["nodes_estimate"] = math.ceil(target_qps / rate) if target_qps is not None else None
    row["nodes_needed"] = None
    row["cost_per_million_output_tokens_usd"] = (
        gpu_hour_usd * num_gpus / (throughput * 3600.0) * 1e6
        if gpu_hour_usd is not None and throughput
        else None
    )
    return row


def at_max_figures(probe: Probe, seeds: list[int]) -> dict[str, Any]:
    """Per-seed figures of the rate that held: requests run, offered and served rate, the
    stability verdict and every check's value and interval."""
    last = [probe.last(seed) for seed in seeds]
    runs = [run for run in last if run is not None]
    out: dict[str, Any] = {
        "requests_per_seed_at_max": [run.num_requests for run in runs],
        "offered_rate_per_seed_req_s": [run.judgement["offered_rate_req_s"] for run in runs],
        "served_rate_per_seed_req_s": [run.judgement["served_rate_req_s"] for run in runs],
        "decided_by_at_max": [probe.decided_by(seed) for seed in seeds],
        "stability_at_max": "stable"
        if all(run.judgement["stability"] == "holds" for run in runs)
        else "unstable",
        "output_throughput_tok_s": sum(r.summary["output_throughput_tok_s"] for r in runs)
        / len(runs),
    }
    for check in runs[0].judgement["checks"]:
        name = check["name"]
        same = [next(c for c in r.judgement["checks"] if c["name"] == name) for r in runs]
        out[f"{name}_at_max"] = [c["value"] for c in same]
        out[f"{name}_interval_at_max"] = [[c["low"], c["high"]] for c in same]
    return out


def _overlap(a: dict[str, Any], b: dict[str, Any]) -> bool:
    a_high = a.get("interval_high_per_s") or math.inf
    b_high = b.get("interval_high_per_s") or math.inf
    return bool(a["interval_low_per_s"] < b_high and b["interval_low_per_s"] < a_high)


def pick_winner(rows: list[dict[str, Any]]) -> tuple[str | None, list[str]]:
    """The winner and the methods tied with the best one (empty when it stands alone)."""
    ranked = [r for r in rows if r.get("max_rate_per_s")]
    if not ranked:
        return None, []
    best = max(ranked, key=lambda r: r["max_rate_per_s"])
    tied = [r for r in ranked if r is best or _overlap(r, best)]
    if len(tied) == 1:
        return str(best["method"]), []

    def preference(row: dict[str, Any]) -> tuple[int, float]:
        method = str(row["method"])
        order = TIE_BREAK_ORDER.index(method) if method in TIE_BREAK_ORDER else len(TIE_BREAK_ORDER)
        return order, -float(row["max_rate_per_s"])

    winner = min(tied, key=preference)
    return str(winner["method"]), [str(r["method"]) for r in tied]


def requests_by_rate(plan: MethodPlan) -> dict[str, int]:
    """Where a method's simulated requests went (``simulated_requests_`` + ``at_max``: runs at
    the max rate, its confirmation included; ``at_first_above``; ``at_undecided``: the undecided
    rates between them; ``elsewhere``: every other probed rate, the search that led there). The
    four add up to ``num_simulated_requests``."""
    search = plan.search
    undecided = set(search.undecided)
    out = {"at_max": 0, "at_first_above": 0, "at_undecided": 0, "elsewhere": 0}
    for probe in plan.probes:
        rate = probe.rate_per_s
        key = (
            "at_max"
            if rate == search.holds_at
            else "at_first_above"
            if rate == search.fails_at
            else "at_undecided"
            if rate in undecided
            else "elsewhere"
        )
        out[key] += sum(run.simulated_requests for runs in probe.runs.values() for run in runs)
    return {f"simulated_requests_{key}": value for key, value in out.items()}


def verify_nodes(
    result: dict[str, Any],
    documents: dict[str, dict[str, Any]],
    base_dir: Path,
    source: str,
    targets: list[Target],
    *,
    target_qps: float,
    gpu_hour_usd: float | None,
    base_requests: int,
    executor: Executor,
) -> dict[str, Any] | None:
    """How many nodes the winner needs at ``target_qps``, verified by fleet runs
    (:func:`reports.fleet_plan.nodes_needed`: the smallest N that holds the SLO terms in every
    seed, N − 1 failing), each replica offered about a probe's worth of requests; the winner's
    row gets ``nodes_needed`` and the fleet's cost. Returns the fleet plan, or None when there is
    no winner or no SLO term to hold (a goodput target alone).

    Raise SpecsimError if a fleet run cannot be built.
    """
    winner = result["winner"]
    terms = [t for t in targets if isinstance(t, SloTerm)]
    if winner is None or not terms:
        return None
    row = next(r for r in result["methods"] if r["method"] == winner)
    estimate = int(row["nodes_estimate"])
    seeds = list(result["seeds"])
    document = probe_document(documents[winner], target_qps, seeds[0], base_requests)
    fleet = nodes_needed(
        validate_document(document, source),
        base_dir,
        target_qps,
        terms,
        single_node_max_rate_per_s=row["max_rate_per_s"],
        price_per_gpu_hour=gpu_hour_usd,
        seeds=seeds,
        num_requests=base_requests * estimate,
        executor=executor,
    )
    row["nodes_needed"] = fleet.num_units
    row["fleet_cost_per_hour_usd"] = fleet.cost_per_hour_usd
    row["fleet_cost_per_million_output_tokens_usd"] = fleet.cost_per_million_output_tokens_usd
    return fleet.to_dict()
