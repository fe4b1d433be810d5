"""Capacity planning (``specsim plan``): the highest Poisson request rate each method sustains.

For each method the search brackets the answer (doubling, or halving, the rate from the scenario's
own until the SLO flips), then bisects the bracket until it is narrower than a relative tolerance.
Each probed rate runs several seeds; the rate holds when every SLO term holds on the across-seed
mean of its metric. The answer is the bracket's lower end, reported with the bracket itself and
with each seed's own highest passing rate among the probes, whose spread shows how much the
sample alone moves the answer.

A probe is a finite run of ``num_requests`` requests that drains at the end. Past saturation the
queue grows for as long as requests keep arriving, so a short run sees less queueing than a long
one: fewer requests per probe make the search faster and the answer a little optimistic for
queue-sensitive SLO terms (TTFT, end-to-end latency). The default caps the probe at
:data:`DEFAULT_PROBE_REQUESTS` requests.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from reports.rate_search import RateSearch
from reports.slo import SloTerm, slo_value
from sim.errors import ScenarioError, SpecsimError
from sim.output import write_json, write_table
from sim.run import run_scenario
from sim.scenario import validate_document

DEFAULT_PROBE_REQUESTS = 1000
PLAN_JSON = "plan.json"
PLAN_CSV = "plan.csv"
PROBES_CSV = "probes.csv"
DEFAULT_SEEDS = 3


@dataclass
class Probe:
    """One probed rate: each seed's SLO figures, output throughput and verdict, and the verdict."""

    rate_per_s: float
    values_ms: dict[str, list[float | None]]
    output_throughput_tok_s: list[float]
    seed_holds: list[bool]
    holds: bool


def judge(rate_per_s: float, summaries: list[dict[str, Any]], slo: list[SloTerm]) -> Probe:
    """The probe's verdict: every term holds on the across-seed mean of its metric."""
    values: dict[str, list[float | None]] = {
        term.key: [slo_value(summary, term) for summary in summaries] for term in slo
    }
    seed_holds = [
        all(term.holds(values[term.key][i]) for term in slo) for i in range(len(summaries))
    ]
    holds = all(term.holds(_mean(values[term.key])) for term in slo)
    throughput = [float(s["output_throughput_tok_s"]) for s in summaries]
    return Probe(rate_per_s, values, throughput, seed_holds, holds)


def _mean(values: Iterable[float | None]) -> float | None:
    kept = list(values)
    if not kept or any(v is None for v in kept):
        return None
    return sum(v for v in kept if v is not None) / len(kept)


def probe_document(
    document: dict[str, Any], rate_per_s: float, seed: int, num_requests: int
) -> dict[str, Any]:
    """``document`` with Poisson arrivals at ``rate_per_s``, ``num_requests`` and ``seed``."""
    out = copy.deepcopy(document)
    workload = dict(out.get("workload") or {})
    workload["arrival"] = {"process": "poisson", "rate_per_s": rate_per_s}
    workload["num_requests"] = num_requests
    out["workload"] = workload
    out["seed"] = seed
    return out


def run_probe(document: dict[str, Any], base_dir: str, source: str) -> dict[str, Any] | str:
    """One seed at one rate: its summary, or the message of the SpecsimError that stopped it."""
    try:
        return run_scenario(validate_document(document, source), Path(base_dir)).summary
    except SpecsimError as exc:
        return str(exc)


@dataclass
class MethodPlan:
    """One method's capacity search: its probes, its bracket, and why it stopped if it failed."""

    method: str
    adjustments: list[str]
    search: RateSearch
    probes: list[Probe] = field(default_factory=list)
    reason: str | None = None

    @property
    def status(self) -> str:
        return "unsupported" if self.reason is not None else self.search.status


Runner = Callable[[list[tuple[dict[str, Any], str, str]]], list[dict[str, Any] | str]]


def local_runner(workers: int) -> tuple[Runner, Callable[[], None]]:
    """Run probe batches in ``workers`` local processes (in this process when 1), and a closer."""
    if workers <= 1:
        return (lambda tasks: [run_probe(*task) for task in tasks]), (lambda: None)
    executor = ProcessPoolExecutor(max_workers=workers)

    def run(tasks: list[tuple[dict[str, Any], str, str]]) -> list[dict[str, Any] | str]:
        futures = [executor.submit(run_probe, *task) for task in tasks]
        return [future.result() for future in futures]

    return run, lambda: executor.shutdown(wait=True, cancel_futures=True)


def search_capacity(
    plans: list[MethodPlan],
    documents: dict[str, dict[str, Any]],
    base_dir: Path,
    slo: list[SloTerm],
    *,
    seeds: list[int],
    num_requests: int,
    runner: Runner,
    on_round: Callable[[int], None] | None = None,
) -> None:
    """Advance every method's search in lockstep, one batch of (method, seed) runs per round.

    A method whose run raises SpecsimError stops with that reason; the others go on.
    """
    round_number = 0
    while True:
        batch: list[tuple[MethodPlan, float]] = []
        for plan in plans:
            rate = plan.search.next_rate() if plan.reason is None else None
            if rate is not None:
                batch.append((plan, rate))
        if not batch:
            return
        tasks = [
            (
                probe_document(documents[plan.method], rate, seed, num_requests),
                str(base_dir),
                f"method {plan.method}, rate {rate:g}/s, seed {seed}",
            )
            for plan, rate in batch
            for seed in seeds
        ]
        outcomes = runner(tasks)
        for index, (plan, rate) in enumerate(batch):
            mine = outcomes[index * len(seeds) : (index + 1) * len(seeds)]
            failures = [outcome for outcome in mine if isinstance(outcome, str)]
            if failures:
                plan.reason = failures[0]
                continue
            probe = judge(rate, [o for o in mine if not isinstance(o, str)], slo)
            plan.probes.append(probe)
            plan.search.record(rate, probe.holds)
        round_number += 1
        if on_round is not None:
            on_round(round_number)


def per_seed_max_rates(probes: list[Probe], num_seeds: int) -> list[float]:
    """Each seed's highest probed rate that held below the lowest rate where that seed failed."""
    rates = []
    for seed in range(num_seeds):
        first_fail = min((p.rate_per_s for p in probes if not p.seed_holds[seed]), default=math.inf)
        rates.append(
            max(
                (p.rate_per_s for p in probes if p.seed_holds[seed] and p.rate_per_s < first_fail),
                default=0.0,
            )
        )
    return rates


def plan_row(
    plan: MethodPlan,
    slo: list[SloTerm],
    *,
    num_seeds: int,
    num_gpus: int,
    target_qps: float | None,
    gpu_hour_usd: float | None,
) -> dict[str, Any]:
    """One method's answer: the rate, its bracket and seed spread, nodes needed and cost.

    Nodes needed = ceil(target_qps / max rate). Cost per million output tokens =
    gpu_hour_usd × num_gpus / (output tokens per hour at the max rate) × 1e6.
    """
    search = plan.search
    row: dict[str, Any] = {
        "method": plan.method,
        "status": plan.status,
        "reason": plan.reason,
        "adjustments": "; ".join(plan.adjustments) or None,
        "max_rate_per_s": None,
        "bracket_low_per_s": search.holds_at,
        "bracket_high_per_s": search.fails_at,
        "num_probes": len(plan.probes),
    }
    if plan.reason is not None:
        return row
    row["max_rate_per_s"] = search.holds_at or 0.0
    seed_rates = per_seed_max_rates(plan.probes, num_seeds)
    row["per_seed_max_rate_per_s"] = seed_rates
    row["seed_spread_per_s"] = max(seed_rates) - min(seed_rates) if seed_rates else None
    at_max = next((p for p in plan.probes if p.rate_per_s == search.holds_at), None)
    throughput = None
    if at_max is not None:
        row["seeds_holding_at_max"] = sum(at_max.seed_holds)
        throughput = sum(at_max.output_throughput_tok_s) / len(at_max.output_throughput_tok_s)
        for term in slo:
            values = [v for v in at_max.values_ms[term.key] if v is not None]
            row[f"{term.key}_at_max"] = _mean(at_max.values_ms[term.key])
            row[f"{term.key}_at_max_min"] = min(values, default=None)
            row[f"{term.key}_at_max_max"] = max(values, default=None)
    row["output_throughput_tok_s"] = throughput
    rate = row["max_rate_per_s"]
    row["nodes_needed"] = (
        math.ceil(target_qps / rate) if target_qps is not None and rate > 0 else None
    )
    row["cost_per_million_output_tokens_usd"] = (
        gpu_hour_usd * num_gpus / (throughput * 3600.0) * 1e6
        if gpu_hour_usd is not None and throughput
        else None
    )
    return row


def pick_winner(rows: list[dict[str, Any]]) -> str | None:
    """The method needing fewest nodes for the target (if one is given), then the highest rate."""
    ranked = [r for r in rows if r["status"] in ("ok", "unbounded") and r["max_rate_per_s"]]
    if not ranked:
        return None
    best = min(
        ranked,
        key=lambda r: (
            r["nodes_needed"] if r["nodes_needed"] is not None else 0,
            -r["max_rate_per_s"],
        ),
    )
    return str(best["method"])


def probes_frame(plans: list[MethodPlan]) -> pd.DataFrame:
    """Every probe of every method, one row per seed: the data behind the SLO frontier."""
    rows = []
    for plan in plans:
        for probe in plan.probes:
            for seed, seed_holds in enumerate(probe.seed_holds):
                row: dict[str, Any] = {
                    "method": plan.method,
                    "rate_per_s": probe.rate_per_s,
                    "seed_index": seed,
                    "holds": probe.holds,
                    "seed_holds": seed_holds,
                    "output_throughput_tok_s": probe.output_throughput_tok_s[seed],
                }
                row.update({key: values[seed] for key, values in probe.values_ms.items()})
                rows.append(row)
    return pd.DataFrame(rows)


def save_plan(out_dir: Path, document: dict[str, Any], plans: list[MethodPlan]) -> None:
    """Write ``plan.json`` (the whole answer), ``plan.csv`` (one row per method) and probes."""
    write_json(out_dir / PLAN_JSON, document)
    table = pd.DataFrame(document["methods"])
    for column in table.columns:
        if table[column].map(lambda v: isinstance(v, list)).any():
            table[column] = table[column].map(
                lambda v: ";".join(f"{x:g}" for x in v) if isinstance(v, list) else v
            )
    write_table(out_dir / PLAN_CSV, table)
    write_table(out_dir / PROBES_CSV, probes_frame(plans))


def plan_capacity(
    document: dict[str, Any],
    base_dir: Path,
    source: str,
    *,
    slo_text: str | None,
    methods_text: str | None,
    target_qps: float | None,
    gpu_hour_usd: float | None,
    num_seeds: int,
    num_requests: int | None,
    tolerance: float,
    workers: int,
    out_dir: Path,
) -> dict[str, Any]:
    """Search each method's capacity; write ``plan.json``, ``plan.csv`` and probes; return the plan.

    Raise ScenarioError if the SLO, a method or a probe's scenario is invalid, and SpecsimError
    if no method can run.
    """
    from reports.comparison import method_document, method_list
    from reports.slo import parse_slo, slo_from_mapping

    scenario = validate_document(document, source)
    if slo_text is not None:
        slo = parse_slo(slo_text)
    elif scenario.slo:
        slo = slo_from_mapping(scenario.slo)
    else:
        raise ScenarioError(f"{source}: no SLO; give --slo or a slo: mapping in the scenario")
    own = scenario.speculation.method
    methods = method_list(methods_text or ",".join(dict.fromkeys(["none", own])))
    probe_requests = num_requests or min(scenario.workload.num_requests, DEFAULT_PROBE_REQUESTS)
    start_rate = float(getattr(scenario.workload.arrival, "rate_per_s", None) or 1.0)
    seeds = [scenario.seed + i for i in range(num_seeds)]
    documents, plans = {}, []
    for method in methods:
        variant, notes = method_document(document, method)
        # Fail fast on a schema error; an unsupported method shows only when it runs.
        validate_document(probe_document(variant, start_rate, seeds[0], probe_requests), source)
        documents[method] = variant
        plans.append(MethodPlan(method, notes, RateSearch(start_rate, tolerance)))
    runner, close = local_runner(min(workers, len(methods) * num_seeds))
    try:
        search_capacity(
            plans, documents, base_dir, slo, seeds=seeds, num_requests=probe_requests, runner=runner
        )
    finally:
        close()
    if all(plan.reason is not None for plan in plans):
        raise SpecsimError(
            "no method could run: " + "; ".join(f"{p.method}: {p.reason}" for p in plans)
        )
    num_gpus = scenario.hardware.num_gpus
    rows = [
        plan_row(
            plan,
            slo,
            num_seeds=num_seeds,
            num_gpus=num_gpus,
            target_qps=target_qps,
            gpu_hour_usd=gpu_hour_usd,
        )
        for plan in plans
    ]
    notes = [f"{p.method}: {note}" for p in plans for note in p.adjustments]
    notes += [f"{p.method} not run: {p.reason}" for p in plans if p.reason is not None]
    if gpu_hour_usd is None:
        notes.append("no --gpu-hour-usd given: cost per million output tokens not computed")
    if target_qps is None:
        notes.append("no --target-qps given: nodes needed not computed")
    result = {
        "scenario": scenario.name,
        "slo": [str(term) for term in slo],
        "criterion": "a rate holds when every SLO term holds on the across-seed mean of its "
        "metric; max_rate_per_s is the highest probed rate that held",
        "arrival": "poisson",
        "num_requests_per_probe": probe_requests,
        "seeds": seeds,
        "tolerance": tolerance,
        "target_qps": target_qps,
        "gpu_hour_usd": gpu_hour_usd,
        "num_gpus_per_node": num_gpus,
        "winner": pick_winner(rows),
        "methods": rows,
        "notes": notes,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    save_plan(out_dir, result, plans)
    return result
