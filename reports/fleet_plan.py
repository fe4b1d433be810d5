"""How many nodes: the smallest fleet that holds the SLO at a target rate, verified by fleet runs.

The answer is never ``ceil(target / single-node rate)`` alone: that figure is only where the
search starts. Each candidate size N is a fleet run (:mod:`sim.fleet`) at the target rate, with
the scenario's router, and N holds when, in every seed (the conservative combination), every SLO
term holds and the fleet keeps up: over the second half of the arrivals it finishes at least
:data:`MIN_SERVED_FRACTION` of the requests that arrive there (a short run that drains its queue
at the end can meet a latency SLO while its backlog grows; this catches it). From the start the
search steps down while N − 1 holds, or doubles up until a size holds and then bisects, so the
answer N holds and N − 1 fails (or N = 1), each verified. This assumes that holding is monotone
in N, as more replicas behind one router only share the load.

A fleet unit is one replica of a plain node or of a one-group colocated fleet, or the whole mix of
a several-group or prefill/decode fleet (N units scale every group's count by N), so plans can
compare colocated and disaggregated serving.
Cost per hour = GPUs × price per GPU-hour; cost per million output tokens = cost per hour /
(output tokens per hour at the target rate) × 10⁶. A cost question without a price is an error.

``nodes_needed`` is the function the capacity planner calls; ``specsim fleet-plan`` is the
command.
"""

from __future__ import annotations

import copy
import math
from concurrent.futures import Executor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from reports.slo import SloTerm, slo_value
from sim.errors import ScenarioError
from sim.run import run_scenario
from sim.scenario import Scenario, validate_document
from sim.summary import Summary

#: A fleet keeps up when, over the second half of the arrivals, it finishes at least this share
#: of the requests that arrive in that window (a growing backlog fails it).
MIN_SERVED_FRACTION = 0.95
#: Largest fleet the search tries before it reports that no size holds.
DEFAULT_MAX_UNITS = 256
PLAN_FILE = "fleet_plan.json"


@dataclass(frozen=True)
class FleetProbe:
    """One verified fleet size: its verdict, each seed's SLO figures and throughput."""

    num_units: int
    num_gpus: int
    holds: bool
    seed_holds: list[bool]
    served_fraction: list[float]
    values_ms: dict[str, list[float | None]]
    request_throughput_req_s: list[float]
    output_throughput_tok_s: list[float]


@dataclass(frozen=True)
class FleetPlanResult:
    """The smallest fleet that holds the SLO at the target rate, with the probes behind it.

    ``num_units`` is None when no size up to the search's limit held (``reason`` says why).
    """

    scenario: str
    shape: str
    router: str
    target_rate_per_s: float
    slo: list[str]
    seeds: list[int]
    num_requests: int
    single_node_max_rate_per_s: float | None
    start_units: int
    num_units: int | None
    num_gpus: int | None
    gpus_per_unit: int
    output_throughput_tok_s: float | None
    price_per_gpu_hour: float | None
    cost_per_hour_usd: float | None
    cost_per_million_output_tokens_usd: float | None
    probes: list[FleetProbe] = field(default_factory=list)
    reason: str | None = None
    criterion: str = (
        "a fleet size holds when, in every seed, every SLO term holds and it finishes at least "
        f"{MIN_SERVED_FRACTION:.0%} of the requests arriving over the second half of the arrival "
        "span; the answer holds and the size below it fails, each verified by a fleet run at the "
        "target rate"
    )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _unit_document(scenario: Scenario) -> dict[str, Any]:
    """The scenario as a mapping whose fleet describes one unit: one replica of a plain node or
    of a one-group colocated fleet; the whole mix of a several-group or disaggregated fleet."""
    document: dict[str, Any] = scenario.model_dump(mode="json")
    fleet = document.get("fleet")
    if fleet is None:
        document["fleet"] = {
            "replicas": [{"count": 1}],
            "router": {"policy": "least_outstanding"},
        }
    elif fleet.get("replicas") and len(fleet["replicas"]) == 1:
        fleet["replicas"][0]["count"] = 1
    return document


def _scaled(unit: dict[str, Any], num_units: int, rate: float, seed: int, n: int) -> dict[str, Any]:
    """``unit`` scaled to ``num_units`` units, offered ``rate`` requests/s, ``n`` requests."""
    document = copy.deepcopy(unit)
    fleet = document["fleet"]
    shapes = [fleet["replicas"]] if fleet.get("replicas") else []
    if fleet.get("disaggregation"):
        shapes = [fleet["disaggregation"]["prefill"], fleet["disaggregation"]["decode"]]
    for groups in shapes:
        for group in groups:
            group["count"] = group["count"] * num_units
    arrival = dict(document["workload"]["arrival"])
    arrival["rate_per_s"] = rate
    document["workload"]["arrival"] = arrival
    document["workload"]["num_requests"] = n
    document["seed"] = seed
    return document


def _gpus_per_unit(unit: Scenario) -> int:
    """GPUs in one unit (``unit``'s fleet section describes it)."""
    fleet = unit.fleet
    assert fleet is not None
    node_gpus = unit.hardware.num_gpus
    groups = fleet.replicas or []
    if fleet.disaggregation is not None:
        groups = [*fleet.disaggregation.prefill, *fleet.disaggregation.decode]
    return sum(g.count * int((g.hardware or {}).get("num_gpus", node_gpus)) for g in groups)


def nodes_needed(
    scenario: Scenario,
    base_dir: Path,
    target_rate_per_s: float,
    slo: list[SloTerm],
    *,
    single_node_max_rate_per_s: float | None = None,
    price_per_gpu_hour: float | None = None,
    want_cost: bool = False,
    seeds: list[int] | None = None,
    num_requests: int | None = None,
    max_units: int = DEFAULT_MAX_UNITS,
    executor: Executor | None = None,
) -> FleetPlanResult:
    """The smallest fleet of the scenario's unit that holds ``slo`` at ``target_rate_per_s``.

    The search starts at ``ceil(target / single_node_max_rate_per_s)`` units (1 without a rate).
    ``price_per_gpu_hour`` defaults to the scenario's ``fleet.price_per_gpu_hour``. The seeds of
    a size run side by side on ``executor`` when one is given (else one after another).
    Raise ScenarioError if the rate is not positive, the arrivals have no rate (closed loop or
    trace), or ``want_cost`` is set without a price; SpecsimError if a fleet run fails.
    """
    if not target_rate_per_s > 0:
        raise ScenarioError(f"target rate: must be > 0, got {target_rate_per_s}")
    if not hasattr(scenario.workload.arrival, "rate_per_s"):
        raise ScenarioError(
            "workload.arrival.process: a fleet plan offers a rate; use poisson or gamma arrivals"
        )
    price = price_per_gpu_hour
    if price is None and scenario.fleet is not None:
        price = scenario.fleet.price_per_gpu_hour
    if want_cost and price is None:
        raise ScenarioError(
            "price per GPU-hour: a cost question needs a price; give --price-per-gpu-hour or "
            "fleet.price_per_gpu_hour in the scenario"
        )
    unit = _unit_document(scenario)
    shape = "disaggregated" if unit["fleet"].get("disaggregation") else "colocated"
    seeds = seeds or [scenario.seed]
    n = num_requests or scenario.workload.num_requests
    start = 1
    if single_node_max_rate_per_s:
        start = max(1, math.ceil(target_rate_per_s / single_node_max_rate_per_s))
    start = min(start, max_units)
    probes: dict[int, FleetProbe] = {}

    def probe(num_units: int) -> FleetProbe:
        if num_units not in probes:
            probes[num_units] = _probe(
                unit, num_units, target_rate_per_s, slo, seeds, n, base_dir, executor
            )
        return probes[num_units]

    answer: int | None = None
    if probe(start).holds:
        answer = start
        while answer > 1 and probe(answer - 1).holds:
            answer -= 1
    else:
        low, high = start, None
        while high is None and low < max_units:
            candidate = min(low * 2, max_units)
            if probe(candidate).holds:
                high = candidate
            else:
                low = candidate
        if high is not None:
            while high - low > 1:
                middle = (low + high) // 2
                if probe(middle).holds:
                    high = middle
                else:
                    low = middle
            answer = high
    per_unit = _gpus_per_unit(validate_document(unit, "fleet unit"))
    result_probe = probes.get(answer) if answer is not None else None
    throughput = (
        sum(result_probe.output_throughput_tok_s) / len(result_probe.output_throughput_tok_s)
        if result_probe is not None
        else None
    )
    num_gpus = answer * per_unit if answer is not None else None
    cost_per_hour = num_gpus * price if num_gpus is not None and price is not None else None
    cost_per_million = (
        cost_per_hour / (throughput * 3600.0) * 1e6
        if cost_per_hour is not None and throughput
        else None
    )
    return FleetPlanResult(
        scenario=scenario.name,
        shape=shape,
        router=unit["fleet"]["router"]["policy"]
        if isinstance(unit["fleet"]["router"], dict)
        else str(unit["fleet"]["router"]),
        target_rate_per_s=target_rate_per_s,
        slo=[str(term) for term in slo],
        seeds=seeds,
        num_requests=n,
        single_node_max_rate_per_s=single_node_max_rate_per_s,
        start_units=start,
        num_units=answer,
        num_gpus=num_gpus,
        gpus_per_unit=per_unit,
        output_throughput_tok_s=throughput,
        price_per_gpu_hour=price,
        cost_per_hour_usd=cost_per_hour,
        cost_per_million_output_tokens_usd=cost_per_million,
        probes=[probes[k] for k in sorted(probes)],
        reason=None if answer is not None else f"no fleet of up to {max_units} units holds the SLO",
    )


def _probe(
    unit: dict[str, Any],
    num_units: int,
    rate: float,
    slo: list[SloTerm],
    seeds: list[int],
    n: int,
    base_dir: Path,
    executor: Executor | None = None,
) -> FleetProbe:
    tasks = [
        (
            _scaled(unit, num_units, rate, seed, n),
            base_dir,
            f"fleet plan, {num_units} units, seed {seed}",
        )
        for seed in seeds
    ]
    if executor is not None:
        outcomes = [f.result() for f in [executor.submit(fleet_run, *task) for task in tasks]]
    else:
        outcomes = [fleet_run(*task) for task in tasks]
    summaries = [summary for summary, _ in outcomes]
    served = [share for _, share in outcomes]
    values = {term.key: [slo_value(s, term) for s in summaries] for term in slo}
    seed_holds = [
        all(term.holds(values[term.key][i]) for term in slo) and served[i] >= MIN_SERVED_FRACTION
        for i in range(len(seeds))
    ]
    fleet = summaries[0].fleet
    assert fleet is not None, "a fleet run's summary holds its fleet section"
    return FleetProbe(
        num_units=num_units,
        num_gpus=fleet.num_gpus,
        holds=all(seed_holds),
        seed_holds=seed_holds,
        served_fraction=served,
        values_ms=values,
        request_throughput_req_s=[float(s.request_throughput_req_s) for s in summaries],
        output_throughput_tok_s=[float(s.output_throughput_tok_s) for s in summaries],
    )


def fleet_run(document: dict[str, Any], base_dir: Path, where: str) -> tuple[Summary, float]:
    """One fleet run: its summary and :func:`served_fraction`. Raise SpecsimError if it cannot
    be built."""
    result = run_scenario(validate_document(document, where), base_dir)
    return result.summary, served_fraction(result.requests)


def served_fraction(requests: dict[str, np.ndarray]) -> float:
    """Requests finished per request arrived over the second half of the arrival span.

    The first half is warm-up; a stable fleet finishes about as many requests as arrive in a
    window, an overloaded one falls behind by its backlog's growth.
    """
    arrival = np.sort(requests["arrival_at_s"])
    if len(arrival) < 4:
        return 1.0
    start, end = float(arrival[len(arrival) // 2]), float(arrival[-1])
    arrived = int(((arrival >= start) & (arrival <= end)).sum())
    finish = requests["finished_at_s"]
    done = int(((finish >= start) & (finish <= end)).sum())
    return done / arrived


def format_plan(plan: FleetPlanResult) -> str:
    """The plan as a few lines of text: each probe, then the answer and its cost."""
    lines = [
        f"{plan.scenario}: {plan.shape} fleet, router {plan.router}, target "
        f"{plan.target_rate_per_s:g} req/s, SLO {', '.join(plan.slo)}, seeds {plan.seeds}",
    ]
    for p in plan.probes:
        figures = "  ".join(
            f"{key} {'/'.join('-' if v is None else f'{v:.1f}' for v in vals)}"
            for key, vals in p.values_ms.items()
        )
        served = "/".join(f"{x:.0%}" for x in p.served_fraction)
        verdict = "holds" if p.holds else "fails"
        lines.append(
            f"  {p.num_units:>4} units ({p.num_gpus} GPUs): {verdict}  {figures}  "
            f"kept up with {served} of arrivals"
        )
    if plan.num_units is None:
        lines.append(f"answer: none ({plan.reason})")
        return "\n".join(lines)
    lines.append(
        f"answer: {plan.num_units} units, {plan.num_gpus} GPUs "
        f"(search started at {plan.start_units})"
    )
    if plan.cost_per_hour_usd is not None:
        lines.append(
            f"cost: ${plan.cost_per_hour_usd:,.2f}/hour at ${plan.price_per_gpu_hour:g}/GPU-hour; "
            f"${plan.cost_per_million_output_tokens_usd:,.3f} per million output tokens"
        )
    return "\n".join(lines)
