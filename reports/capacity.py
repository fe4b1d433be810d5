"""Capacity planning (``specsim plan``): the highest Poisson request rate each method sustains.

Each method's search starts at the node's saturation throughput, measured by one closed-loop
run that keeps the batch full (:func:`reports.probes.run_saturation`): no open-loop rate above it
is stable, and the stable capacity lies a few percent below it. The search
(:class:`reports.rate_search.RateSearch`) moves from there by steps that start at the tolerance
and double until the answer is bracketed, then bisects until the bracket is narrower than the
tolerance. A method whose saturation run cannot be made starts from the scenario's own rate,
doubling or halving. Each probed rate is a :class:`reports.probes.Probe`: every
seed runs on a steady window and is judged for stability and the SLO with confidence intervals
(:mod:`reports.stability`); undecided seeds go on longer up to the long-run length (a longer
run continues the shorter one in the worker that paused it: :mod:`reports.probe_runs`,
:mod:`reports.worker_pool`), a rate whose short runs lean to hold is taken to hold for now, the rate
holds only if it holds in every seed, and a rate still undecided there is within the noise of the
bound: neither held nor failed, it widens the answer's resolution instead of being decided by a
point figure. The answer is confirmed at the long-run length in every seed, and the first rate
above it in one failing seed. Methods advance independently in parallel processes: each submits
its next runs as soon as its previous ones are in.

The answer per method (:mod:`reports.plan_rows`) is the highest rate that held in every seed,
the first rate above it that failed and the resolution between them, with each seed's own
rate, the interval they span, the figures at that rate, and ties between methods whose
intervals overlap. A method with no stable rate says so instead of reporting the
lowest probe. After every finished run the plan so far is saved (``complete: false``), so an
interrupted plan keeps what it found.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import Any

from reports.goodput import DEFAULT_MIN_FRACTION, GoodputTarget, parse_goodput
from reports.intervals import CONFIDENCE
from reports.plan_output import save_plan
from reports.plan_rows import TIE_BREAK_ORDER, MethodPlan, pick_winner, plan_row, verify_nodes
from reports.probe_runs import run_probe
from reports.probes import (
    CONFIRM_FAILS,
    CONFIRM_HOLDS,
    GROWTH,
    PROBE_TRIM_FRACTIONS,
    Probe,
    ProbeOutcome,
    ProbeRefused,
    probe_document,
    run_saturation,
)
from reports.rate_search import RateSearch
from reports.stability import MAX_OVERLOAD, MIN_TREND, Target
from reports.worker_pool import StickyPool
from sim.engine.compiled_loop import load as load_compiled_loop
from sim.errors import ScenarioError, SpecsimError
from sim.scenario import Scenario, validate_document

DEFAULT_PROBE_REQUESTS = 2000
#: A probe's longest run, in probe lengths: ten, the length a plan's answer is checked at
#: (benchmarks/bench_plan_soundness.py), so the answer is confirmed at the length it is read at.
DEFAULT_MAX_GROWTH = 10

Task = tuple[dict[str, Any], str, str, list[Target]]


def make_executor(workers: int) -> StickyPool:
    """``workers`` local processes that ignore Ctrl-C (the parent decides) and keep each seed's
    paused run for its next stage, or inline for 1; each loads the compiled loop once for all
    its probes (:func:`sim.engine.compiled_loop.load`)."""
    return StickyPool(max(1, workers), initializer=load_compiled_loop)


def _to_confirm(plan: MethodPlan) -> Probe | None:
    """The probe at the search's answer, then the one at the first rate above it, if its
    outcome was not read at the longest runs (it is taken back out of the finished probes and
    set to be confirmed there), else None."""
    search = plan.search
    for rate, mode in ((search.holds_at, CONFIRM_HOLDS), (search.fails_at, CONFIRM_FAILS)):
        at_rate = [p for p in plan.probes if p.rate_per_s == rate]
        if not at_rate or at_rate[-1].confirmed():
            continue
        probe = at_rate[-1]
        plan.probes.remove(probe)
        probe.confirm = mode
        return probe
    return None


def _advance(plan: MethodPlan, seeds: list[int], base: int, maximum: int) -> list[tuple[int, int]]:
    """Settle finished probes into the search and return the runs ``plan`` needs next. Once the
    search has its answer, it runs at ``maximum`` requests in every seed, and the first rate
    above it in a failing seed: the rates a plan reports are the ones a user bets on, so they
    are judged on the longest runs (if those refute them, the search goes on)."""
    while plan.reason is None:
        if plan.current is None:
            rate = plan.search.next_rate()
            if rate is None:
                plan.current = _to_confirm(plan)
                if plan.current is None:
                    return []
            else:
                direct = plan.search.below_ceiling(rate)
                plan.current = Probe(rate, seeds[:], base, maximum, plan.lead_seed, direct=direct)
        pending = plan.current.pending()
        if pending:
            return pending
        plan.probes.append(plan.current)
        plan.search.record(plan.current.rate_per_s, plan.current.outcome)
        failing = plan.current.first_failing()
        plan.lead_seed = plan.lead_seed if failing is None else failing
        plan.current = None
    return []


def saturation_rates(
    documents: dict[str, dict[str, Any]],
    base_dir: Path,
    source: str,
    seed: int,
    num_requests: int,
    executor: StickyPool,
) -> dict[str, float | None]:
    """Each method's saturation throughput (None where its run could not be made: its probes
    will say why), the runs side by side on ``executor``."""
    futures = {
        method: executor.submit(run_saturation, document, str(base_dir), source, seed, num_requests)
        for method, document in documents.items()
    }
    rates: dict[str, float | None] = {}
    for method, future in futures.items():
        outcome = future.result()
        rates[method] = outcome if isinstance(outcome, float) and outcome > 0 else None
    return rates


def search_capacity(
    plans: list[MethodPlan],
    documents: dict[str, dict[str, Any]],
    base_dir: Path,
    targets: list[Target],
    *,
    seeds: list[int],
    base_requests: int,
    max_requests: int,
    executor: StickyPool,
    on_progress: Callable[[], None] | None = None,
) -> None:
    """Run every method's search to its end, each method submitting its next runs as soon as
    its previous ones are in, so the workers stay busy. A seed's runs at one rate are stages of
    one simulation (:mod:`reports.probe_runs`): a longer run continues the shorter one where
    the worker paused it; a method's paused runs are dropped when its search ends. A method
    whose run raises SpecsimError stops with that reason; the others go on."""
    in_flight: dict[Future[ProbeOutcome], tuple[MethodPlan, int, int]] = {}
    keys: dict[str, set[tuple[str, float, int]]] = {plan.method: set() for plan in plans}

    def submit(plan: MethodPlan) -> None:
        runs = _advance(plan, seeds, base_requests, max_requests)
        if not runs:
            executor.forget(keys[plan.method])
            keys[plan.method].clear()
        for seed, length in runs:
            assert plan.current is not None
            rate = plan.current.rate_per_s
            document = probe_document(documents[plan.method], rate, seed, length)
            where = f"method {plan.method}, rate {rate:g}/s, seed {seed}, {length} requests"
            key = (plan.method, rate, seed)
            keys[plan.method].add(key)
            future = executor.submit_keyed(key, run_probe, document, str(base_dir), where,
                                           targets, max_requests=max_requests)  # fmt: skip
            in_flight[future] = (plan, seed, length)

    for plan in plans:
        submit(plan)
    while in_flight:
        done, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
        for future in done:
            plan, seed, length = in_flight.pop(future)
            outcome = future.result()
            if isinstance(outcome, ProbeRefused):
                plan.reason = plan.reason or outcome.reason
            elif plan.current is not None:
                plan.current.record(seed, length, outcome)
            if not any(other is plan for other, _, _ in in_flight.values()):
                submit(plan)
        if on_progress is not None:
            on_progress()


def plan_targets(
    scenario: Scenario, slo_text: str | None, goodput_text: str | None, goodput_min: float | None
) -> list[Target]:
    """What a rate must meet: the command line's ``--slo`` and ``--goodput`` if either is given,
    else the scenario's ``slo:`` and ``measurement.goodput``.

    Raise ScenarioError if a term is invalid or there is no target at all.
    """
    from reports.slo import parse_slo, slo_from_mapping

    minimum = DEFAULT_MIN_FRACTION if goodput_min is None else goodput_min
    targets: list[Target] = []
    if slo_text is not None or goodput_text is not None:
        targets += parse_slo(slo_text) if slo_text is not None else []
        targets += [parse_goodput(goodput_text, minimum)] if goodput_text is not None else []
    else:
        targets += slo_from_mapping(scenario.slo) if scenario.slo else []
        bounds = scenario.measurement.goodput
        targets += [GoodputTarget(dict(bounds), minimum)] if bounds else []
    if goodput_min is not None and not any(isinstance(t, GoodputTarget) for t in targets):
        raise ScenarioError("--goodput-min needs per-request bounds: give --goodput")
    if not targets:
        raise ScenarioError(
            "no SLO; give --slo or --goodput, or a slo: mapping or measurement.goodput in "
            "the scenario"
        )
    return targets


def _saved_and_told(
    out_dir: Path,
    snapshot: Callable[[], dict[str, Any]],
    plans: list[MethodPlan],
    on_update: Callable[[list[MethodPlan]], None] | None,
) -> None:
    """After each finished run: save the plan so far, then tell the caller (progress)."""
    save_plan(out_dir, {**snapshot(), "complete": False}, plans)
    if on_update is not None:
        on_update(plans)


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
    goodput_text: str | None = None,
    goodput_min: float | None = None,
    max_requests: int | None = None,
    on_update: Callable[[list[MethodPlan]], None] | None = None,
) -> dict[str, Any]:
    """Search each method's capacity; write ``plan.json``, ``plan.csv`` and probes; return the
    plan (``interrupted`` is true if Ctrl-C stopped it: what was found is kept).

    Raise ScenarioError if the SLO, a method or a probe's scenario is invalid, or if no method
    has a stable rate under the SLO; SpecsimError if no method can run.
    """
    from reports.comparison import method_document, method_list

    scenario = validate_document(document, source)
    targets = plan_targets(scenario, slo_text, goodput_text, goodput_min)
    own = scenario.speculation.method
    methods = method_list(methods_text or ",".join(dict.fromkeys(["none", own])))
    base = num_requests or DEFAULT_PROBE_REQUESTS
    maximum = max_requests or base * DEFAULT_MAX_GROWTH
    if maximum < base:
        raise ScenarioError(f"--max-requests {maximum} is below --requests {base}")
    start_rate = float(getattr(scenario.workload.arrival, "rate_per_s", None) or 1.0)
    seeds = [scenario.seed + i for i in range(num_seeds)]
    documents, adjustments = {}, {}
    for method in methods:
        variant, notes = method_document(document, method)
        # Fail fast on a schema error; an unsupported method shows only when it runs.
        validate_document(probe_document(variant, start_rate, seeds[0], base), source)
        documents[method], adjustments[method] = variant, notes
    plans: list[MethodPlan] = []
    header = {
        "scenario": scenario.name,
        "slo": [str(target) for target in targets],
        "search": (
            "from each method's saturation throughput (a closed loop keeping the batch full, "
            f"seed {seeds[0]}, {base} requests), steps of {tolerance:g} of the rate doubling "
            "until the answer is bracketed, then bisection; without it, from the scenario's "
            f"rate ({start_rate:g}/s) doubling or halving"
        ),
        "criterion": (
            f"a rate holds when, in every seed, the node is stable (served >= "
            f"{1 - MAX_OVERLOAD:.0%} of offered; waiting time with no upward trend: slope "
            f"not shown above {MIN_TREND:g} s/s and shown at most {MAX_OVERLOAD:g} s/s) and "
            f"every SLO term holds, each shown at {(1 + CONFIDENCE) / 2:.0%} confidence on a "
            f"steady window; it fails when one of them is shown broken in some seed. An "
            f"undecided run is lengthened {GROWTH}-fold up to {maximum} requests; undecided "
            "there, or with its point figures disagreeing, the rate is undecided: within the "
            "noise of the bound, it neither holds nor fails. The max rate is confirmed in "
            f"every seed at {maximum} requests, the first rate above it in one seed there"
        ),
        "resolution": (
            "the answer lies between max_rate_per_s (held) and first_rate_above_per_s (failed); "
            f"the search narrows each gap around undecided rates to {tolerance:g} of the rate, "
            "and resolution is first_rate_above_per_s / max_rate_per_s - 1: wider than the "
            "tolerance where undecided rates lie between"
        ),
        "tie_break": "methods whose intervals overlap are tied; among them the winner is the "
        f"first of {', '.join(TIE_BREAK_ORDER)} present, else the highest max rate",
        "arrival": "poisson",
        "num_requests_per_probe": base,
        "max_requests_per_probe": maximum,
        "steady_window_trim_fractions": list(PROBE_TRIM_FRACTIONS),
        "seeds": seeds,
        "tolerance": tolerance,
        "target_qps": target_qps,
        "gpu_hour_usd": gpu_hour_usd,
        "num_gpus_per_node": scenario.hardware.num_gpus,
    }

    def snapshot() -> dict[str, Any]:
        rows = [
            plan_row(
                plan,
                seeds,
                num_gpus=scenario.hardware.num_gpus,
                target_qps=target_qps,
                gpu_hour_usd=gpu_hour_usd,
            )
            for plan in plans
        ]
        winner, tied = pick_winner(rows)
        return {**header, "winner": winner, "tied": tied, "methods": rows,
                "notes": _notes(plans, rows, target_qps, gpu_hour_usd)}  # fmt: skip

    executor = make_executor(min(workers, len(methods) * num_seeds))
    interrupted = False
    try:
        bounds = saturation_rates(documents, base_dir, source, seeds[0], base, executor)
        for method in methods:
            bound = bounds[method]
            search = (
                RateSearch(bound, tolerance, first_step=tolerance)
                if bound is not None
                else RateSearch(start_rate, tolerance)
            )
            plans.append(MethodPlan(method, adjustments[method], search, saturation_rate=bound))
        search_capacity(
            plans, documents, base_dir, targets, seeds=seeds, base_requests=base,
            max_requests=maximum, executor=executor,
            on_progress=lambda: _saved_and_told(out_dir, snapshot, plans, on_update),
        )  # fmt: skip
    except KeyboardInterrupt:
        interrupted = True
        for plan in plans:
            plan.interrupted = plan.reason is None and (
                plan.current is not None or plan.search.next_rate() is not None
            )
    finally:
        # On Ctrl-C do not wait for runs under way; otherwise reap the workers.
        executor.shutdown(wait=not interrupted, cancel_futures=True)
    result = {**snapshot(), "complete": not interrupted, "interrupted": interrupted}
    save_plan(out_dir, result, plans)
    if interrupted:
        return result
    if target_qps is not None and result["winner"] is not None:
        with make_executor(min(workers, num_seeds)) as fleet_executor:
            result["fleet"] = verify_nodes(
                result, documents, base_dir, source, targets, target_qps=target_qps,
                gpu_hour_usd=gpu_hour_usd, base_requests=base, executor=fleet_executor,
            )  # fmt: skip
        if result["fleet"] is None:
            result["notes"].append("nodes not verified by a fleet run: the plan has no SLO term")
        save_plan(out_dir, result, plans)
    if all(plan.reason is not None for plan in plans):
        raise SpecsimError(
            "no method could run: " + "; ".join(f"{p.method}: {p.reason}" for p in plans)
        )
    if all(row["status"] in ("unsupported", "no_stable_rate") for row in result["methods"]):
        reasons = [f"{r['method']}: {r['reason']}" for r in result["methods"] if r["reason"]]
        raise ScenarioError(
            f"no stable rate meets {', '.join(result['slo'])} (plan written to {out_dir}):\n  "
            + "\n  ".join(reasons)
        )
    return result


def _notes(
    plans: list[MethodPlan],
    rows: list[dict[str, Any]],
    target_qps: float | None,
    gpu_hour_usd: float | None,
) -> list[str]:
    notes = [f"{p.method}: {note}" for p in plans for note in p.adjustments]
    notes += [f"{p.method} not run: {p.reason}" for p in plans if p.reason is not None]
    notes += [f"{r['method']}: {r['reason']}" for r in rows if r["status"] == "no_stable_rate"]
    if gpu_hour_usd is None:
        notes.append("no --gpu-hour-usd given: cost per million output tokens not computed")
    if target_qps is None:
        notes.append("no --target-qps given: nodes needed not computed")
    else:
        notes.append(
            "nodes: the winner's count is verified by fleet runs at the target rate; the other "
            "methods' ~N is ceil(target / max rate), where that search would start"
        )
    return notes
