"""Reports of a ``sweep`` folder (a grid of runs) and of a ``plan`` folder (capacity search)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reports.figures import (
    load_curves_figure,
    metric_label,
    slo_frontier_figure,
    speedup_figure,
    speedup_table,
)
from reports.render.common import (
    HEADLINE_COLUMNS,
    ReportRun,
    acceptance_section,
    glossary_section,
    load_run,
    measured_points,
    read_json,
    run_acceptance,
    tokens_per_step_section,
)
from reports.render.document import Report, ReportFigure, ReportTable, Section, format_cell
from sim.errors import ScenarioError

SWEEP_TABLE = "sweep.csv"
SWEEP_MANIFEST = "sweep.json"
PLAN_JSON = "plan.json"
PROBES_CSV = "probes.csv"
#: Grid keys read as load, most specific first; the first one present becomes the x axis.
LOAD_KEYS = ("rate_per_s", "concurrency")
METHOD_KEY = "speculation.method"


def _load_axis(frame: pd.DataFrame, axes: list[str]) -> tuple[str, str]:
    """The grid column to plot against and its label: load if swept, else the first numeric."""
    for suffix in LOAD_KEYS:
        for key in axes:
            if key.endswith(suffix):
                label = "request rate (req/s)" if suffix == "rate_per_s" else "concurrent clients"
                return key, label
    for key in axes:
        if key != METHOD_KEY and pd.api.types.is_numeric_dtype(frame[key]):
            return key, metric_label(key.rsplit(".", 1)[-1])
    return "point_index", "grid point"


def sweep_report(folder: Path) -> Report:
    """The report of a ``sweep`` folder.

    Raise ScenarioError if ``sweep.csv`` is missing or no point finished.
    """
    path = folder / SWEEP_TABLE
    if not path.is_file():
        raise ScenarioError(f"{folder}: no {SWEEP_TABLE}; not a sweep folder")
    frame = pd.read_csv(path)
    manifest = read_json(folder / SWEEP_MANIFEST) if (folder / SWEEP_MANIFEST).is_file() else {}
    axes = [key for key in (manifest.get("grid") or {}) if key in frame.columns]
    ok = frame[frame["status"] == "ok"].copy()
    if ok.empty:
        raise ScenarioError(f"{path}: no point finished; nothing to report")
    ok["point_index"] = np.arange(len(ok))
    x, x_label = _load_axis(ok, axes)
    others = [key for key in axes if key not in (x, METHOD_KEY)]
    ok["series"] = ok["method"].astype(str)
    for key in others:
        ok["series"] += ", " + key.rsplit(".", 1)[-1] + "=" + ok[key].astype(str)
    grid_text = "; ".join(
        f"`{k}` ∈ {{{', '.join(map(str, v))}}}" for k, v in (manifest.get("grid") or {}).items()
    )
    sections = [
        Section(
            "Sweep",
            [
                f"{len(frame)} grid points, {len(ok)} finished"
                + (
                    f", {int((frame['status'] == 'failed').sum())} failed"
                    if len(ok) < len(frame)
                    else ""
                )
                + (f": {grid_text}." if grid_text else "."),
                f"Scenario `{manifest.get('scenario', '?')}`. Lines are methods"
                + (f", split by {', '.join(others)}" if others else "")
                + "; p50 solid, p99 dashed.",
            ],
            [
                ReportFigure.from_figure(
                    "load_curves",
                    f"Throughput and latency against {x_label}",
                    load_curves_figure(ok, x, "series", x_label),
                )
            ],
            [ReportTable("Points (sweep.csv)", _point_table(ok, axes))],
        )
    ]
    keys = [x, *others]
    speedups = speedup_table(ok, x, "method", keys)
    if not speedups.empty:
        speedups["series"] = speedups["method"].astype(str)
        for key in others:
            speedups["series"] += ", " + key.rsplit(".", 1)[-1] + "=" + speedups[key].astype(str)
        sections.append(
            Section(
                "Speed-up over no speculation",
                [
                    "At each point, TPOT p50 without speculation over the method's. Below the "
                    "dotted line speculation slows decoding down: the crossover load is where "
                    "it stops paying."
                ],
                [
                    ReportFigure.from_figure(
                        "speedup",
                        f"Speed-up against {x_label} and batch size",
                        speedup_figure(speedups, x, "series", x_label),
                    )
                ],
                [ReportTable("Speed-up per point", speedups.drop(columns="series"))],
            )
        )
    runs = _point_runs(folder, ok)
    acceptance = acceptance_section(
        _pooled_by_method(runs), "Requests of every finished point of a method are pooled."
    )
    if acceptance is not None:
        sections.append(acceptance)
    if any(run.method != "none" for run in runs):  # alpha and k mean nothing without drafts
        sections.append(tokens_per_step_section(_mean_points(measured_points(runs))))
    sections.append(glossary_section())
    return Report(
        f"specsim sweep: {manifest.get('scenario', folder.name)}", "sweep", str(folder), sections
    )


def _point_table(ok: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    columns = ["point", *axes, *(c for c in HEADLINE_COLUMNS if c in ok.columns)]
    return ok[list(dict.fromkeys(columns))].sort_values(axes or ["point"]).reset_index(drop=True)


def _point_runs(folder: Path, ok: pd.DataFrame) -> list[ReportRun]:
    runs = []
    for point, method in zip(ok["point"], ok["method"], strict=True):
        point_dir = folder / "points" / str(point)
        if point_dir.is_dir():
            run = load_run(point_dir, str(method), with_steps=False)
            runs.append(run)
    return runs


def _pooled_by_method(runs: list[ReportRun]) -> dict[str, Any]:
    pooled: dict[str, list[np.ndarray]] = {}
    for run in runs:
        for name, values in run_acceptance([run]).items():
            pooled.setdefault(name, []).append(values)
    return {name: np.concatenate(parts) for name, parts in pooled.items()}


def _mean_points(points: list[tuple[str, int, float]]) -> list[tuple[str, int, float]]:
    """One star per (method, k): the mean acceptance length over the points that share it."""
    by_key: dict[tuple[str, int], list[float]] = {}
    for name, k, tau in points:
        by_key.setdefault((name, k), []).append(tau)
    return [(name, k, float(np.mean(taus))) for (name, k), taus in by_key.items()]


_TERM = re.compile(r"^(?P<key>[a-z0-9_]+)\s*<=?\s*(?P<bound>[-+0-9.eE]+)$")


def _bounds(slo: list[str]) -> dict[str, float]:
    bounds = {}
    for term in slo:
        match = _TERM.match(term.strip())
        if match is not None:
            bounds[match["key"]] = float(match["bound"])
    return bounds


def per_seed_table(rows: list[dict[str, Any]], seeds: list[int]) -> pd.DataFrame:
    """One row per method and seed from ``plan.json``: the seed's own highest rate and first
    failing rate, and at the method's max rate the offered and served rates and every check
    with its interval (``ttft_p99_ms_at_max`` and ``..._interval_at_max``)."""
    out = []
    for row in rows:
        highs = row.get("per_seed_max_rate_per_s") or []
        for index, seed in enumerate(seeds):

            def at(key: str, i: int = index, r: dict[str, Any] = row) -> Any:
                values = r.get(key)
                return values[i] if isinstance(values, list) and i < len(values) else None

            entry: dict[str, Any] = {
                "method": row.get("method"),
                "seed": seed,
                "highest rate held (req/s)": highs[index] if index < len(highs) else None,
                "first failing rate (req/s)": at("per_seed_fail_rate_per_s"),
                "offered at max (req/s)": at("offered_rate_per_seed_req_s"),
                "served at max (req/s)": at("served_rate_per_seed_req_s"),
            }
            for key in row:
                if not key.endswith("_at_max") or key.endswith("interval_at_max"):
                    continue
                check = key.removesuffix("_at_max")
                value, interval = at(key), at(f"{check}_interval_at_max")
                if isinstance(value, int | float):
                    text = format_cell(value)
                    if isinstance(interval, list) and len(interval) == 2:
                        text += f" [{format_cell(interval[0])}, {format_cell(interval[1])}]"
                    entry[check.replace("_", " ")] = text
            out.append(entry)
    return pd.DataFrame(out)


def _nodes_cell(row: dict[str, Any]) -> str:
    """A method's node count: verified (``4``), estimated (``~5``) or unknown (``-``)."""
    if row.get("nodes_needed") is not None:
        return str(int(row["nodes_needed"]))
    if row.get("nodes_estimate") is not None:
        return f"~{int(row['nodes_estimate'])}"
    return "-"


def plan_report(folder: Path) -> Report:
    """The report of a ``plan`` folder. Raise ScenarioError if ``plan.json`` is missing."""
    if not (folder / PLAN_JSON).is_file():
        raise ScenarioError(f"{folder}: no {PLAN_JSON}; not a plan folder")
    plan = read_json(folder / PLAN_JSON)
    rows: list[dict[str, Any]] = list(plan.get("methods") or [])
    bounds = _bounds(list(plan.get("slo") or []))
    probes = pd.read_csv(folder / PROBES_CSV) if (folder / PROBES_CSV).is_file() else pd.DataFrame()
    columns = [
        "method", "status", "max_rate_per_s", "first_rate_above_per_s", "resolution",
        "interval_low_per_s", "interval_high_per_s", "stability_at_max",
        "output_throughput_tok_s", "num_runs", "nodes_needed", "cost_per_million_output_tokens_usd",
    ]  # fmt: skip
    table = pd.DataFrame(rows)
    table = table[[c for c in columns if c in table.columns]]
    if "nodes_needed" in table.columns:
        # The winner's count is verified by fleet runs; the others are the search's estimate.
        table["nodes_needed"] = [_nodes_cell(row) for row in rows]
    winner = plan.get("winner")
    slo_text = ", ".join(f"`{term}`" for term in plan.get("slo", []))
    paragraphs = [
        f"Scenario `{plan.get('scenario')}` under {slo_text}, "
        f"Poisson arrivals, {plan.get('num_requests_per_probe')} requests per probe, seeds "
        f"{plan.get('seeds')}. {plan.get('criterion', '')}.",
        f"Winner: **{winner}**"
        + (f" for a target of {plan['target_qps']:g} req/s." if plan.get("target_qps") else "."),
        *(
            [f"Tie between {', '.join(plan['tied'])}: {plan.get('tie_break', '')}."]
            if plan.get("tied")
            else []
        ),
        *([] if plan.get("complete", True) else ["This plan is incomplete (interrupted)."]),
        *plan.get("notes", []),
    ]
    figures = []
    tables = [
        ReportTable("Capacity per method, with the stability verdict at the max rate", table),
        ReportTable(
            "Per seed: its highest rate that held, its first failing rate, and at the plan's max "
            "rate the offered and served rates and each check (value, 90% interval)",
            per_seed_table(rows, [int(s) for s in plan.get("seeds") or []]),
        ),
    ]
    if not probes.empty and bounds:
        figures.append(
            ReportFigure.from_figure(
                "slo_frontier",
                "SLO metrics against request rate; dotted: bound, dashed: max rate",
                slo_frontier_figure(probes, rows, bounds),
            )
        )
        means = probes.groupby(["method", "rate_per_s"], sort=False).mean(numeric_only=True)
        means = means.drop(
            columns=["seed", "seed_index", "holds", "seed_holds", "num_requests"], errors="ignore"
        )
        means = means[[c for c in means.columns if not c.endswith(("_low", "_high"))]]
        means = means.reset_index().sort_values(["method", "rate_per_s"])
        figures.append(
            ReportFigure.from_figure(
                "load_curves",
                "Throughput and SLO metrics against request rate (seed means)",
                load_curves_figure(means, "rate_per_s", "method", "request rate (req/s)"),
            )
        )
        tables.append(ReportTable("Probes, mean over seeds (probes.csv)", means))
    sections = [Section("Capacity under the SLO", paragraphs, figures, tables)]
    if any(str(row.get("method")) != "none" for row in rows):
        sections.append(tokens_per_step_section([]))
    sections.append(glossary_section())
    return Report(
        f"specsim plan: {plan.get('scenario', folder.name)}", "plan", str(folder), sections
    )
