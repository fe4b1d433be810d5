"""Reports of a ``sweep`` folder (a grid of runs) and of a ``plan`` folder (capacity search)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reports.figures import (
    load_curves_figure,
    slo_frontier_figure,
    speedup_figure,
    speedup_table,
)
from reports.render.common import (
    HEADLINE_COLUMNS,
    RunFolder,
    acceptance_section,
    glossary_section,
    load_run,
    measured_points,
    read_json,
    run_acceptance,
    tokens_per_step_section,
)
from reports.render.document import Report, ReportFigure, ReportTable, Section
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
            return key, key
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
    sections.append(tokens_per_step_section(_mean_points(measured_points(runs))))
    sections.append(glossary_section())
    return Report(
        f"specsim sweep: {manifest.get('scenario', folder.name)}", "sweep", str(folder), sections
    )


def _point_table(ok: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    columns = ["point", *axes, *(c for c in HEADLINE_COLUMNS if c in ok.columns)]
    return ok[list(dict.fromkeys(columns))].sort_values(axes or ["point"]).reset_index(drop=True)


def _point_runs(folder: Path, ok: pd.DataFrame) -> list[RunFolder]:
    runs = []
    for point, method in zip(ok["point"], ok["method"], strict=True):
        point_dir = folder / "points" / str(point)
        if point_dir.is_dir():
            run = load_run(point_dir, str(method), with_steps=False)
            runs.append(run)
    return runs


def _pooled_by_method(runs: list[RunFolder]) -> dict[str, Any]:
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


def plan_report(folder: Path) -> Report:
    """The report of a ``plan`` folder. Raise ScenarioError if ``plan.json`` is missing."""
    if not (folder / PLAN_JSON).is_file():
        raise ScenarioError(f"{folder}: no {PLAN_JSON}; not a plan folder")
    plan = read_json(folder / PLAN_JSON)
    rows: list[dict[str, Any]] = list(plan.get("methods") or [])
    bounds = _bounds(list(plan.get("slo") or []))
    probes = pd.read_csv(folder / PROBES_CSV) if (folder / PROBES_CSV).is_file() else pd.DataFrame()
    columns = [
        "method", "status", "max_rate_per_s", "interval_low_per_s", "interval_high_per_s",
        "per_seed_max_rate_per_s", "served_rate_per_seed_req_s", "offered_rate_per_seed_req_s",
        "stability_at_max", "bracket_low_per_s", "bracket_high_per_s", "num_runs",
        "output_throughput_tok_s", "nodes_needed", "cost_per_million_output_tokens_usd",
    ]  # fmt: skip
    table = pd.DataFrame(rows)
    table = table[[c for c in columns if c in table.columns]]
    for column in table.columns:  # per-seed lists as "a / b / c"
        table[column] = table[column].map(
            lambda v: " / ".join(f"{x:.4g}" for x in v) if isinstance(v, list) else v
        )
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
    tables = [ReportTable("Capacity per method (plan.csv)", table)]
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
    sections = [
        Section("Capacity under the SLO", paragraphs, figures, tables),
        tokens_per_step_section([]),
        glossary_section(),
    ]
    return Report(
        f"specsim plan: {plan.get('scenario', folder.name)}", "plan", str(folder), sections
    )
