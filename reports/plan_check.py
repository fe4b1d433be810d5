"""Check a plan against long runs: does its max rate hold, and its first rate above not?

A plan is sound when, for each method, a run ``factor`` times longer than its probes at the
reported max rate meets the SLO in every seed and serves at least :data:`MIN_SERVED_SHARE` of
the offered rate, and a run as long at the reported first rate above it
(``first_rate_above_per_s``, the other end of the plan's stated resolution) does not, in at least
one seed. The long runs are measured on the same steady window as the probes and read on their
point figures, what a user re-running the plan's answer looks at: the summary's served share
(finishes over arrivals in the window) and each SLO term's value, and the plan's own point
figures (served share from the backlog's growth, no growing backlog: the waiting-time slope's
point value within the plan's limit). Each run is also judged as the
plan judges its own longest runs (intervals and point figures), so a check says whether the plan's
own reading of that run is what it claims.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from reports.comparison import method_document
from reports.goodput import GoodputTarget
from reports.probes import PROBE_TRIM_FRACTIONS, probe_document
from reports.stability import HOLDS, MAX_OVERLOAD, UNDECIDED, Target, judge_run
from sim.metrics import goodput, measurement_window
from sim.pool import pool_worker_init
from sim.run import run_scenario
from sim.scenario import validate_document

MIN_SERVED_SHARE = 1.0 - MAX_OVERLOAD


def long_run(
    document: dict[str, Any],
    base_dir: Path,
    source: str,
    rate_per_s: float,
    seed: int,
    num_requests: int,
    targets: list[Target],
) -> dict[str, Any]:
    """One long run at ``rate_per_s``: served share, each target's value, whether it holds on
    the point figures (``holds``) and the plan's own verdict on it (``plan_verdict``: holds or
    fails where the intervals and the point figures agree, else undecided).

    Raise SpecsimError if the run cannot be built.
    """
    probe = probe_document(document, rate_per_s, seed, num_requests)
    result = run_scenario(validate_document(probe, source), base_dir, step_records="summary")
    summary, requests = result.summary, result.requests
    judgement = judge_run(requests, result.steps, targets, PROBE_TRIM_FRACTIONS)
    offered = summary.offered_rate_req_s
    assert offered is not None, "a probe measures a steady window, which has an offered rate"
    served = summary.request_throughput_req_s / offered
    values: dict[str, float | None] = {}
    holds = served >= MIN_SERVED_SHARE
    for target in targets:
        if isinstance(target, GoodputTarget):
            window = measurement_window(
                requests["arrival_at_s"], requests["finished_at_s"], 0, PROBE_TRIM_FRACTIONS
            )
            done = window.measured
            arrival = requests["arrival_at_s"][done]
            ttft = requests["first_token_at_s"][done] - arrival
            e2e = requests["finished_at_s"][done] - arrival
            out = requests["output_tokens"][done]
            tpot = np.where(out > 1, (e2e - ttft) / np.maximum(out - 1, 1), 0.0)
            value = float(goodput(ttft, tpot, e2e, target.bounds_ms).mean())
            values[target.key] = value
            holds = holds and value >= target.min_fraction
        else:
            stat = summary.latency_stat_ms(target.metric, target.stat)
            values[target.key] = stat
            holds = holds and target.holds(stat)
    slope = next((c for c in judgement["checks"] if c["name"] == "waiting_time_slope"), None)
    values["waiting_time_slope"] = None if slope is None else slope["value"]
    # The point figures as the plan reads them (its served share from the backlog's growth, the
    # slope within MIN_TREND) must hold too.
    verdict, point = judgement["verdict"], judgement["point_verdict"]
    holds = holds and point == HOLDS
    return {"rate_per_s": rate_per_s, "seed": seed, "num_requests": num_requests,
            "served_share": served, "values": values, "holds": holds,
            "plan_verdict": verdict if verdict == point else UNDECIDED}  # fmt: skip


def check_plan(
    document: dict[str, Any],
    base_dir: Path,
    source: str,
    plan: dict[str, Any],
    targets: list[Target],
    factor: int = 10,
    workers: int = 1,
) -> list[dict[str, Any]]:
    """Long runs at each method's max rate and at its first rate above, every seed.

    Returns one entry per (method, which) with its runs and ``holds_in_every_seed``. Raise
    SpecsimError if a run cannot be built.
    """
    num_requests = factor * int(plan["num_requests_per_probe"])
    cases = []
    for row in plan["methods"]:
        if not row.get("max_rate_per_s"):
            continue
        variant, _ = method_document(document, row["method"])
        above = row.get("first_rate_above_per_s", row.get("bracket_high_per_s"))
        for which, rate in (("max", row["max_rate_per_s"]), ("above", above)):
            if rate is not None:
                cases.append((row["method"], which, float(rate), variant))
    tasks = [
        (variant, base_dir, source, rate, seed, num_requests, targets)
        for _, _, rate, variant in cases
        for seed in plan["seeds"]
    ]
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers, initializer=pool_worker_init) as executor:
            runs = list(executor.map(long_run, *zip(*tasks, strict=True)))
    else:
        runs = [long_run(*task) for task in tasks]
    entries, per_case = [], len(plan["seeds"])
    for index, (method, which, rate, _) in enumerate(cases):
        mine = runs[index * per_case : (index + 1) * per_case]
        entries.append({"method": method, "which": which, "rate_per_s": rate, "runs": mine,
                        "holds_in_every_seed": all(r["holds"] for r in mine)})  # fmt: skip
    return entries
