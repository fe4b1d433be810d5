"""What a plan writes: ``plan.json`` (the whole answer), ``plan.csv`` (one row per method) and
``probes.csv`` (one row per probed rate and seed, with every check's estimate and interval).

Each file is written atomically, after every finished run as well as at the end, so an
interrupted plan keeps what it found.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from reports.plan_rows import MethodPlan
from sim.output import write_json, write_table

PLAN_JSON = "plan.json"
PLAN_CSV = "plan.csv"
PROBES_CSV = "probes.csv"


def probes_frame(plans: list[MethodPlan]) -> pd.DataFrame:
    """Every finished probe, one row per seed (its longest run): the data behind the frontier."""
    rows = []
    for plan in plans:
        for probe in plan.probes:
            for index, seed in enumerate(probe.seeds):
                run = probe.last(seed)
                if run is None:
                    continue
                judgement = run.judgement
                row: dict[str, Any] = {
                    "method": plan.method,
                    "rate_per_s": probe.rate_per_s,
                    "seed": seed,
                    "seed_index": index,
                    "num_requests": run.num_requests,
                    "holds": probe.holds,
                    "provisional": probe.provisional,
                    "seed_holds": probe.seed_holds(seed),
                    "verdict": run.verdict,
                    "point_verdict": judgement.get("point_verdict"),
                    "decided_by": probe.decided_by(seed),
                    "stability": judgement["stability"],
                    "offered_rate_req_s": judgement["offered_rate_req_s"],
                    "served_rate_req_s": judgement["served_rate_req_s"],
                    "output_throughput_tok_s": run.summary["output_throughput_tok_s"],
                }
                for check in judgement["checks"]:
                    row[check["name"]] = check["value"]
                    row[f"{check['name']}_low"] = check["low"]
                    row[f"{check['name']}_high"] = check["high"]
                rows.append(row)
    return pd.DataFrame(rows)


def save_plan(out_dir: Path, document: dict[str, Any], plans: list[MethodPlan]) -> None:
    """Write ``plan.json`` (the whole answer), ``plan.csv`` (one row per method) and probes."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / PLAN_JSON, document)
    table = pd.DataFrame(document["methods"])
    for column in table.columns:
        if table[column].map(lambda v: isinstance(v, list)).any():
            table[column] = table[column].map(
                lambda v: ";".join(_cell(x) for x in v) if isinstance(v, list) else v
            )
    write_table(out_dir / PLAN_CSV, table)
    write_table(out_dir / PROBES_CSV, probes_frame(plans))


def _cell(value: Any) -> str:
    if isinstance(value, list):
        return "/".join(_cell(v) for v in value)
    return "" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
