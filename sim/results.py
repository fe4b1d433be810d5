"""Saving and loading one run's folder: summary, records and the resolved scenario."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from sim.output import write_json, write_table, write_yaml
from sim.run import ScenarioResult
from sim.vllm_bench import VLLM_BENCH_FILE, vllm_bench_result

SUMMARY_FILE = "summary.json"
REQUESTS_FILE = "requests.csv"
STEPS_FILE = "steps.csv"
SCENARIO_FILE = "scenario.resolved.yaml"


def requests_frame(result: ScenarioResult) -> pd.DataFrame:
    """One row per request with its derived latencies (seconds)."""
    frame = pd.DataFrame(result.requests)
    frame.insert(0, "request_id", range(len(frame)))
    frame["ttft_s"] = frame["first_token_at_s"] - frame["arrival_at_s"]
    frame["e2e_latency_s"] = frame["finished_at_s"] - frame["arrival_at_s"]
    return frame


def steps_frame(result: ScenarioResult) -> pd.DataFrame:
    """One row per engine step."""
    frame = pd.DataFrame(result.steps)
    frame.insert(0, "step", range(len(frame)))
    return frame


def save_result(
    result: ScenarioResult,
    out_dir: Path,
    *,
    write_steps: bool = True,
    vllm_bench: dict[str, Any] | None = None,
) -> None:
    """Write ``summary.json``, ``requests.csv``, ``steps.csv``, the resolved scenario and
    ``vllm_bench.json`` (the run in ``vllm bench serve --save-result``'s keys; computed from
    the records unless given, as it must be when the step records were dropped)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_yaml(out_dir / SCENARIO_FILE, result.resolved_scenario)
    write_table(out_dir / REQUESTS_FILE, requests_frame(result))
    if write_steps:
        write_table(out_dir / STEPS_FILE, steps_frame(result))
    bench = vllm_bench if vllm_bench is not None else vllm_bench_result(result)
    write_json(out_dir / VLLM_BENCH_FILE, bench)
    write_json(out_dir / SUMMARY_FILE, result.summary)


def load_summary(folder: Path) -> dict[str, Any]:
    """The ``summary.json`` of a run folder."""
    data: dict[str, Any] = json.loads((folder / SUMMARY_FILE).read_text(encoding="utf-8"))
    return data
