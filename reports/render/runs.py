"""Reports of a single run folder and of a ``compare`` folder (one run folder per method)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from reports.figures import metric_label
from reports.render.common import (
    ReportRun,
    acceptance_section,
    glossary_section,
    headline_table,
    load_run,
    measured_points,
    run_acceptance,
    timeline_section,
    tokens_per_step_section,
)
from reports.render.document import Report, ReportFigure, ReportTable, Section
from sim.errors import ScenarioError

COMPARISON_FILE = "comparison.csv"
COMPARISON_COLUMNS = (
    "method",
    "status",
    "output_throughput_tok_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "mean_acceptance_length",
    "draft_acceptance_rate",
    "speedup_vs_none",
    "throughput_vs_none",
)


def _describe(run: ReportRun) -> str:
    scenario = run.scenario
    hardware = scenario.get("hardware") or {}
    workload = scenario.get("workload") or {}
    arrival = workload.get("arrival") or {}
    load = (
        f"{arrival.get('rate_per_s')} req/s ({arrival.get('process')})"
        if "rate_per_s" in arrival
        else f"{arrival.get('concurrency', '?')} clients (closed loop)"
        if arrival.get("process") == "closed_loop"
        else str(arrival.get("process", "?"))
    )
    model = scenario.get("model")
    model_name = model if isinstance(model, str) else "an inline model"
    return (
        f"Scenario `{run.summary.scenario}`: {model_name} on {hardware.get('num_gpus', 1)}× "
        f"{hardware.get('gpu', '?')}, method `{run.method}`, {workload.get('num_requests')} "
        f"requests at {load}, seed {run.summary.seed}."
    )


def _common_sections(runs: list[ReportRun], sections: list[Section]) -> list[Section]:
    acceptance = acceptance_section(
        run_acceptance(runs),
        "The mean over requests weights each request equally; the summary's "
        "`mean_acceptance_length` weights each verify step.",
    )
    timeline = timeline_section(runs)
    sections.extend(s for s in (acceptance, timeline) if s is not None)
    if any(run.method != "none" for run in runs):  # alpha and k mean nothing without drafts
        sections.append(tokens_per_step_section(measured_points(runs)))
    sections.append(glossary_section())
    return sections


def run_report(folder: Path) -> Report:
    """The report of one run folder. Raise ScenarioError if it is not one."""
    run = load_run(folder)
    headline = headline_table([run]).drop(columns="run")
    values = [
        int(v) if isinstance(v, float) and key.startswith("num_") and v == v else v
        for key, v in zip(headline.columns, headline.iloc[0].to_list(), strict=True)
    ]
    metrics = pd.DataFrame(
        {
            "metric": [metric_label(str(c)) for c in headline.columns],
            "value": pd.Series(values, dtype=object),
        }
    )
    overview = Section(
        "Summary",
        [_describe(run)],
        tables=[ReportTable("Headline figures (summary.json)", metrics)],
    )
    title = f"specsim run: {run.summary.scenario}"
    return Report(title, "run", str(folder), _common_sections([run], [overview]))


def compare_report(folder: Path) -> Report:
    """The report of a ``compare`` folder. Raise ScenarioError if ``comparison.csv`` is missing."""
    from reports.comparison import comparison_figure

    path = folder / COMPARISON_FILE
    if not path.is_file():
        raise ScenarioError(f"{folder}: no {COMPARISON_FILE}; not a compare folder")
    frame = pd.read_csv(path)
    # Each arm's run folder: the ``folder`` column, or the method itself in older comparisons.
    folders = frame["folder"] if "folder" in frame.columns else frame["method"]
    runs = [
        load_run(folder / str(sub), str(method))
        for method, sub, status in zip(frame["method"], folders, frame["status"], strict=True)
        if status == "ok" and (folder / str(sub)).is_dir()
    ]
    if not runs:
        raise ScenarioError(f"{folder}: no method's run folder is present")
    shown = frame[[c for c in COMPARISON_COLUMNS if c in frame.columns]]
    paragraphs = [
        _describe(runs[0]),
        "Every method served the same requests at the same times (common random numbers). "
        "Speed-up is TPOT p50 of `none` over the method's at this load.",
    ]
    skipped = frame[frame["status"] != "ok"]
    paragraphs += [
        f"`{m}` did not run: {r}" for m, r in zip(skipped["method"], skipped["reason"], strict=True)
    ]
    overview = Section(
        "Methods compared",
        paragraphs,
        [
            ReportFigure.from_figure(
                "comparison", "Output throughput and TPOT per method", comparison_figure(frame)
            )
        ],
        [ReportTable("comparison.csv", shown)],
    )
    title = f"specsim compare: {runs[0].summary.scenario}"
    return Report(title, "compare", str(folder), _common_sections(runs, [overview]))
