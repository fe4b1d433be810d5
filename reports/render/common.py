"""Pieces every kind of report shares: loading a run folder, headline tables, the analytic
tokens-per-step section and the glossary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from reports.figures import (
    MAX_TIMELINE_POINTS,
    acceptance_histogram_figure,
    acceptance_lengths,
    measured_tokens_per_step,
    steps_timeline,
    timeline_figure,
)
from reports.render.document import ReportFigure, ReportTable, Section
from reports.render.glossary import GLOSSARY_MARKDOWN
from sim.errors import ScenarioError
from sim.run_folder import RunFolder, SavedRun
from sim.summary import Summary

#: The headline figures of a run, in table order, as flattened summary columns.
HEADLINE_COLUMNS = (
    "output_throughput_tok_s",
    "request_throughput_req_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "e2e_latency_p50_ms",
    "e2e_latency_p99_ms",
    "mean_acceptance_length",
    "draft_acceptance_rate",
    "mean_batch_size",
    "kv_cache_peak_usage",
    "num_preemptions",
)


@dataclass(frozen=True)
class ReportRun:
    """One run folder as a report shows it: its name there and what the folder holds."""

    name: str
    saved: SavedRun

    @property
    def summary(self) -> Summary:
        return self.saved.summary

    @property
    def requests(self) -> pd.DataFrame | None:
        return self.saved.requests

    @property
    def steps(self) -> pd.DataFrame | None:
        return self.saved.steps

    @property
    def scenario(self) -> dict[str, Any]:
        """The resolved scenario the run saved."""
        return self.saved.resolved_scenario

    @property
    def method(self) -> str:
        return self.summary.method

    def chain_k(self) -> int | None:
        """Draft tokens per step when the method drafts a chain, else None."""
        speculation = self.scenario.get("speculation") or {}
        if self.method == "none" or speculation.get("tree") is not None:
            return None
        k = speculation.get("num_speculative_tokens")
        return int(k) if k is not None else None


def read_json(path: Path) -> dict[str, Any]:
    """A JSON mapping from ``path``. Raise ScenarioError if it is not valid JSON."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot read ({exc})") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: expected a JSON object")
    return data


def load_run(folder: Path, name: str | None = None, *, with_steps: bool = True) -> ReportRun:
    """Read a run folder (:meth:`sim.run_folder.RunFolder.load`), named ``name`` or its method.

    Raise OutputError if it holds no summary or a file cannot be read.
    """
    saved = RunFolder(folder).load(with_steps=with_steps)
    return ReportRun(name or saved.summary.method, saved)


def headline_table(runs: list[ReportRun]) -> pd.DataFrame:
    """One row per run with the headline figures that its summary holds."""
    rows = []
    for run in runs:
        flat = run.summary.flat()
        rows.append({"run": run.name, **{c: flat.get(c) for c in HEADLINE_COLUMNS if c in flat}})
    return pd.DataFrame(rows)


def acceptance_section(lengths: dict[str, Any], note: str) -> Section | None:
    """The histogram of per-request acceptance lengths and its percentiles, if any method drafts."""
    kept = {name: values for name, values in lengths.items() if name != "none" and len(values)}
    if not kept:
        return None
    rows = [
        {
            "method": name,
            "num_requests": len(values),
            "mean": float(values.mean()),
            "p10": float(pd.Series(values).quantile(0.1)),
            "p50": float(pd.Series(values).quantile(0.5)),
            "p90": float(pd.Series(values).quantile(0.9)),
        }
        for name, values in kept.items()
    ]
    figure = acceptance_histogram_figure(kept)
    return Section(
        "Acceptance length per request",
        [
            "Each request's acceptance length is `1 + num_accepted / num_decode_steps` "
            "(requests.csv): tokens it gained per verify step, bonus token included. " + note
        ],
        [ReportFigure.from_figure("acceptance_histogram", "Per-request acceptance length", figure)],
        [ReportTable("Per-request acceptance length: distribution", pd.DataFrame(rows))],
    )


def run_acceptance(runs: list[ReportRun]) -> dict[str, Any]:
    """Per-request acceptance lengths of every run that has a requests table."""
    return {run.name: acceptance_lengths(run.requests) for run in runs if run.requests is not None}


def timeline_section(runs: list[ReportRun]) -> Section | None:
    """KV usage and batch size over time, downsampled, for the runs that kept their steps."""
    timelines = {}
    for run in runs:
        if run.steps is not None and not run.steps.empty:
            timelines[run.name] = steps_timeline(
                run.steps, run.saved.num_kv_blocks, MAX_TIMELINE_POINTS
            )
    if not timelines:
        return None
    longest = max(len(run.steps) for run in runs if run.steps is not None)
    figure = timeline_figure(timelines)
    return Section(
        "KV cache and batch size over time",
        [
            f"From steps.csv ({longest} steps in the longest run; every step is there), "
            f"averaged into at most {MAX_TIMELINE_POINTS} time bins: batch size is the time "
            "average over each bin, KV usage its maximum."
        ],
        [ReportFigure.from_figure("timeline", "KV cache usage and batch size over time", figure)],
    )


def tokens_per_step_section(measured: list[tuple[str, int, float]]) -> Section:
    """The closed form ``E = (1 − α^(k+1)) / (1 − α)`` against α and k, measured runs starred."""
    from sim.theory.chain_acceptance import tokens_per_step_figure, tokens_per_step_table

    table = tokens_per_step_table()
    figure = measured_tokens_per_step(tokens_per_step_figure(table), measured)
    shown = table.reset_index()
    shown.columns = ["alpha", *(f"k={k}" for k in table.columns)]
    text = (
        "Expected tokens per verify step for a chain of k drafts, each accepted with "
        "probability α given the ones before (Leviathan et al. 2023, arXiv:2211.17192, §3)."
    )
    if measured:
        text += " Stars mark the runs' measured mean acceptance length at their k."
    return Section(
        "Tokens per verify step against α and k",
        [text],
        [ReportFigure.from_figure("tokens_per_step", "Tokens per verify step", figure)],
        [ReportTable("E[tokens per verify step] by α (rows) and k (columns)", shown)],
    )


def measured_points(runs: list[ReportRun]) -> list[tuple[str, int, float]]:
    """(name, k, mean acceptance length) of the runs that draft a chain."""
    points = []
    for run in runs:
        k, tau = run.chain_k(), run.summary.mean_acceptance_length
        if k is not None and tau is not None:
            points.append((run.name, k, float(tau)))
    return points


def glossary_section() -> Section:
    """The metric glossary, as shipped in the package."""
    return Section("Metric glossary", markdown=GLOSSARY_MARKDOWN.split("\n", 1)[1])
