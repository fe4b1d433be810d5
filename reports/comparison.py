"""Side-by-side comparison of drafting strategies on one workload (``specsim compare``).

Every method runs the same scenario with the same seed. Arrivals and lengths come from the named
random streams ``arrivals``, ``prompt_tokens`` and ``output_tokens``, which no strategy touches, so
each method serves exactly the same requests at exactly the same times (common random numbers): the
differences in the table are the strategies', not the sample's. The comparison checks this after
the runs and raises InvariantError if it ever fails.

When the scenario's speculation settings name things that belong to one method only (a draft model,
a trace field or profile of another method, a tree for a chain-only method), those keys are dropped
for the methods they do not fit, so each method runs with its own defaults; every such change is
written in the ``adjustments`` column.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from matplotlib.figure import Figure

from reports.progress import ItemProgress
from sim.errors import InvariantError, ScenarioError, SpecsimError
from sim.method_table import PROFILE_METHOD
from sim.output import atomic_write, write_table
from sim.results import save_result
from sim.run import ScenarioResult, run_scenario
from sim.scenario import METHODS, validate_document
from sim.speculation import CHAIN_ONLY_METHODS, TRACE_METHODS, default_trace_field

BASELINE = "none"
COMPARISON_FILE = "comparison.csv"
FIGURE_FILE = "comparison.png"
#: Columns read from the summary into the table, in table order.
METRIC_COLUMNS = (
    "output_throughput_tok_s",
    "request_throughput_req_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "mean_acceptance_length",
    "draft_acceptance_rate",
)


@dataclass
class MethodRun:
    """One method's outcome: its result, or the reason it could not run, and what was adjusted."""

    method: str
    result: ScenarioResult | None
    reason: str | None = None
    adjustments: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.result is not None


def method_list(text: str) -> list[str]:
    """The methods of a ``--methods a,b,c`` list, in order, without repeats.

    Raise ScenarioError naming the first unknown method, or if the list is empty.
    """
    methods: list[str] = []
    for raw in text.split(","):
        name = raw.strip()
        if not name:
            continue
        if name not in METHODS:
            raise ScenarioError(f"--methods: unknown method {name!r}; known: {', '.join(METHODS)}")
        if name not in methods:
            methods.append(name)
    if not methods:
        raise ScenarioError(f"--methods: no method given in {text!r}")
    return methods


#: Short names of per-arm settings (``draft_model:model=llama-3.2-1b,alpha=0.7``) and the
#: ``speculation`` key each one sets; any other key is a path under ``speculation``.
ARM_SHORTCUTS = {
    "k": "num_speculative_tokens",
    "model": "draft_model",
    "tp": "draft_tp",
    "alpha": "acceptance.alpha",
    "tau": "acceptance.mean_acceptance_length",
    "profile": "acceptance.profile",
    "trace": "acceptance.trace",
    "adaptive": "policy.name",  # a per-step policy with its defaults (sim/engine/policies/)
}
#: Acceptance keys that name its source: an arm that gives one replaces the scenario's source.
_ACCEPTANCE_SOURCES = ("alpha", "per_position", "mean_acceptance_length", "trace", "profile")


@dataclass(frozen=True)
class Arm:
    """One column of a comparison: a method and its own ``speculation`` settings."""

    label: str
    method: str
    settings: tuple[tuple[str, Any], ...] = ()


def parse_arms(text: str) -> tuple[list[Arm], bool]:
    """The arms of ``--methods none,eagle3:k=3,draft_model:model=llama-3.2-1b,alpha=0.7``, the
    ``none`` baseline first, and whether it had to be added.

    An item ``METHOD[:KEY=VALUE]`` starts an arm; an item ``KEY=VALUE`` without a method adds a
    setting to the arm before it. Values are read as YAML. Raise ScenarioError naming the item
    for an unknown method, a setting without an arm, a malformed setting, a repeated arm, or an
    empty list.
    """
    arms: list[tuple[str, str, list[tuple[str, Any]]]] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        head, sep, rest = item.partition(":")
        if "=" in head:  # KEY=VALUE continuing the previous arm
            if not arms:
                raise ScenarioError(f"--methods: setting {item!r} comes before any method")
            arms[-1][2].append(_arm_setting(item, arms[-1][1]))
            continue
        method = head.strip()
        if method not in METHODS:
            raise ScenarioError(
                f"--methods: unknown method {method!r}; known: {', '.join(METHODS)}"
            )
        settings = [_arm_setting(rest, method)] if sep and rest.strip() else []
        if sep and not rest.strip():
            raise ScenarioError(f"--methods: {item!r}: expected {method}:KEY=VALUE")
        arms.append((item, method, settings))
    if not arms:
        raise ScenarioError(f"--methods: no method given in {text!r}")
    out: list[Arm] = []
    for _, method, settings in arms:
        label = method + "".join(
            f"{':' if i == 0 else ','}{key}={value}" for i, (key, value) in enumerate(settings)
        )
        if any(arm.label == label for arm in out):
            raise ScenarioError(f"--methods: {label} is given twice")
        out.append(Arm(label, method, tuple(settings)))
    added = not any(arm.label == BASELINE for arm in out)
    baseline = [a for a in out if a.label == BASELINE] or [Arm(BASELINE, BASELINE)]
    return [*baseline, *(a for a in out if a.label != BASELINE)], added


def arm_folder(label: str) -> str:
    """A folder name for an arm: its label with every character but letters, digits, ``.``,
    ``-``, ``_`` and ``=`` replaced by ``_`` (``draft_model_model=llama-3.2-1b_alpha=0.7``)."""
    return re.sub(r"[^A-Za-z0-9._=-]", "_", label)


def _arm_setting(text: str, method: str) -> tuple[str, Any]:
    """``(key, value)`` of one ``KEY=VALUE`` arm setting. Raise ScenarioError if malformed."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or not raw.strip():
        raise ScenarioError(f"--methods: {method} setting {text!r}: expected KEY=VALUE")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        raise ScenarioError(f"--methods: {method} setting {text!r}: not a valid value") from None
    return key, value


def arm_document(document: dict[str, Any], arm: Arm) -> tuple[dict[str, Any], list[str]]:
    """The scenario for one arm: :func:`method_document` for its method, then its settings.

    Raise ScenarioError if a setting walks through a key that is not a mapping.
    """
    out, notes = method_document(document, arm.method)
    speculation = out.setdefault("speculation", {})
    for key, value in arm.settings:
        path = ARM_SHORTCUTS.get(key, key).split(".")
        if path[0] == "acceptance" and len(path) == 2 and path[1] in _ACCEPTANCE_SOURCES:
            speculation["acceptance"] = {
                k: v
                for k, v in (speculation.get("acceptance") or {}).items()
                if k not in _ACCEPTANCE_SOURCES
            }
        node = speculation
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ScenarioError(f"--methods {arm.label}: speculation.{part} is not a mapping")
            node = child
        node[path[-1]] = value
    return out, notes


def _acceptance_misfit(acceptance: dict[str, Any], method: str) -> str | None:
    """Why the scenario's ``speculation.acceptance`` does not describe ``method``, or None."""
    if acceptance.get("trace") is not None:
        # The trace's field defaults by method; it fits only the method whose acceptance that
        # field measured.
        chosen = acceptance.get("trace_field") or default_trace_field(method)
        if TRACE_METHODS.get(method) != chosen:
            return f"trace field {chosen} does not measure {method}'s acceptance"
    if acceptance.get("profile") is not None:
        profile = str(acceptance["profile"])
        if profile.split("/")[0] != PROFILE_METHOD.get(method, method):
            return f"profile {profile} is not a {method} profile"
    return None


def method_document(document: dict[str, Any], method: str) -> tuple[dict[str, Any], list[str]]:
    """The scenario document with ``speculation.method`` set to ``method``, and what was dropped.

    The other speculation keys are kept unless they belong to another method; dropped keys fall
    back to ``method``'s own defaults.
    """
    out = copy.deepcopy(document)
    speculation = dict(out.get("speculation") or {})
    notes: list[str] = []
    if method == BASELINE:
        out["speculation"] = {"method": BASELINE}
        return out, notes
    speculation["method"] = method
    if method != "draft_model":
        for key in ("draft_model", "draft_tp"):
            if speculation.pop(key, None) is not None:
                notes.append(f"speculation.{key} dropped (draft_model only)")
    if method in CHAIN_ONLY_METHODS and speculation.pop("tree", None) is not None:
        notes.append(f"speculation.tree dropped ({method} drafts a chain)")
    acceptance = speculation.get("acceptance")
    if isinstance(acceptance, dict):
        misfit = _acceptance_misfit(acceptance, method)
        if misfit is not None:
            del speculation["acceptance"]
            notes.append(f"speculation.acceptance dropped ({misfit}); {method}'s default applies")
    out["speculation"] = speculation
    return out, notes


def compare_methods(
    document: dict[str, Any],
    base_dir: Path,
    source: str,
    methods: list[str] | list[Arm],
    progress: ItemProgress | None = None,
) -> list[MethodRun]:
    """Run ``document`` once per arm (a method name or an :class:`Arm`), on identical arrivals
    and lengths.

    An arm that cannot run becomes a run with its reason. Raise SpecsimError if every arm
    fails, and InvariantError if two arms saw different requests.
    """
    arms = [a if isinstance(a, Arm) else Arm(a, a) for a in methods]
    runs: list[MethodRun] = []
    for arm in arms:
        if progress is not None:
            progress.start(arm.label)
        variant, notes = arm_document(document, arm)
        try:
            scenario = validate_document(variant, f"{source} (method {arm.label})")
            result = run_scenario(scenario, base_dir)
        except SpecsimError as exc:
            runs.append(MethodRun(arm.label, None, str(exc), notes))
            if progress is not None:
                progress.done(f"{arm.label} cannot run")
            continue
        runs.append(MethodRun(arm.label, result, None, notes))
        if progress is not None:
            progress.done(f"{arm.label} done")
    finished = [run for run in runs if run.result is not None]
    if not finished:
        reasons = "; ".join(f"{run.method}: {run.reason}" for run in runs)
        raise SpecsimError(f"no method could run: {reasons}")
    _check_common_requests(
        [(run.method, run.result) for run in runs if run.result is not None], document
    )
    return runs


def unrunnable_arms(
    document: dict[str, Any], base_dir: Path, source: str, arms: list[Arm]
) -> dict[str, str]:
    """Arms that cannot run, each with the reason, found before any arm runs: the scenario is
    validated and the node built (drafting support, draft model, acceptance source)."""
    from sim.run import build_simulation

    reasons: dict[str, str] = {}
    for arm in arms:
        variant, _ = arm_document(document, arm)
        try:
            scenario = validate_document(variant, f"{source} (method {arm.label})")
            if scenario.fleet is None:
                build_simulation(scenario, base_dir)
        except SpecsimError as exc:
            reasons[arm.label] = str(exc)
    return reasons


def _check_common_requests(
    results: list[tuple[str, ScenarioResult]], document: dict[str, Any]
) -> None:
    """Raise InvariantError unless every run served the same lengths (and, open loop, arrivals)."""
    columns = ["prompt_tokens", "output_tokens"]
    arrival = (document.get("workload") or {}).get("arrival") or {}
    if arrival.get("process") != "closed_loop":
        # In a closed loop the next arrival waits for a finish, so arrivals depend on the server.
        columns.append("arrival_at_s")
    first_method, first = results[0]
    for method, result in results[1:]:
        for column in columns:
            if not np.array_equal(first.requests[column], result.requests[column]):
                raise InvariantError(
                    f"compare: {method} saw different {column} from {first_method}; "
                    "common random numbers are broken"
                )


def comparison_frame(runs: list[MethodRun]) -> pd.DataFrame:
    """One row per method: status, adjustments, headline metrics and ratios to ``none``.

    ``speedup_vs_none`` is TPOT p50 of ``none`` over the method's (per-token decode speed-up at
    the same load); ``throughput_vs_none`` is the ratio of output throughputs.
    """
    rows: list[dict[str, Any]] = []
    for run in runs:
        row: dict[str, Any] = {
            "method": run.method,
            "folder": arm_folder(run.method),
            "status": "ok" if run.ok else "unsupported",
            "reason": run.reason,
            "adjustments": "; ".join(run.adjustments) or None,
        }
        flat = run.result.summary.flat() if run.result is not None else {}
        for column in METRIC_COLUMNS:
            row[column] = _metric(flat, column)
        rows.append(row)
    frame = pd.DataFrame(rows)
    base = frame[frame["method"] == BASELINE]
    base_tpot = float(base["tpot_p50_ms"].iloc[0]) if len(base) else float("nan")
    base_tput = float(base["output_throughput_tok_s"].iloc[0]) if len(base) else float("nan")
    frame["speedup_vs_none"] = base_tpot / frame["tpot_p50_ms"].astype(float)
    frame["throughput_vs_none"] = frame["output_throughput_tok_s"].astype(float) / base_tput
    return frame


def _metric(flat: dict[str, Any], column: str) -> float:
    """A figure of a summary's flat row (:meth:`sim.summary.Summary.flat`); NaN for a run that
    did not run or a statistic without samples."""
    if not flat:
        return float("nan")
    value = flat[column]
    return float("nan") if value is None else float(value)


def comparison_figure(frame: pd.DataFrame) -> Figure:
    """Bars of output throughput and of TPOT p50 (p99 as a whisker) per method that ran."""
    ran = frame[frame["status"] == "ok"]
    figure = Figure(figsize=(9, 3.8), layout="constrained")
    left, right = figure.subplots(1, 2)
    x = np.arange(len(ran))
    left.bar(x, ran["output_throughput_tok_s"], color="tab:blue")
    left.set_ylabel("output throughput (tok/s)")
    p50 = ran["tpot_p50_ms"].to_numpy(dtype=float)
    above = np.clip(ran["tpot_p99_ms"].to_numpy(dtype=float) - p50, 0.0, None)
    right.bar(x, p50, color="tab:orange", yerr=[np.zeros_like(above), above], capsize=4)
    right.set_ylabel("TPOT p50 (ms), whisker to p99")
    for axes in (left, right):
        axes.set_xticks(x, ran["method"], rotation=30, ha="right")
        axes.grid(axis="y", alpha=0.3)
    figure.suptitle("methods on identical arrivals and lengths")
    return figure


def save_comparison(runs: list[MethodRun], out_dir: Path) -> pd.DataFrame:
    """Write each method's folder, ``comparison.csv`` and ``comparison.png``; return the table."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for run in runs:
        if run.result is not None:
            save_result(run.result, out_dir / arm_folder(run.method))
    frame = comparison_frame(runs)
    write_table(out_dir / COMPARISON_FILE, frame)
    figure = comparison_figure(frame)
    atomic_write(out_dir / FIGURE_FILE, lambda f: figure.savefig(f, format="png", dpi=120), True)
    return frame
