"""``specsim calibrate``: read artifacts, fit what each can tell, assemble one profile.

Each input is parsed (every run of it); what it holds decides what is fitted:

* per-request acceptance traces → an acceptance law per traced method
  (:func:`calibration.fit_acceptance.fit_traces`);
* spec-decode counters or a reported acceptance length → an acceptance law
  (:func:`calibration.fit_acceptance.fit_counters`);
* per-step ``Iteration(...)`` timings → the engine overheads by regression
  (:func:`calibration.fit_step_cost.fit_steps`);
* per-request TTFT and end-to-end latency of a replayable run → the engine overheads by replay
  (:func:`calibration.fit_replay.fit_overheads`), which needs the GPU and model (``--gpu``,
  ``--model`` or the artifact's metadata);
* only the aggregate statistics of a benchmark run (result JSON without per-request arrays, its
  console report, nightly table rows) → the step-cost parameters by simulation of the rebuilt
  runs (:mod:`calibration.aggregate`, :func:`calibration.fit_simulation.fit_by_simulation`); all
  such runs of one call make ONE fit (a rate or concurrency sweep separates per-step from
  per-sequence costs), and runs stating different models, GPUs or TP degrees are refused.

Several Prometheus scrape files are read together as scrapes taken in the order given (before and
after a run) and differenced; a counter that goes down between them is refused. A vLLM log is split
into its server sessions, each fitted on its own.

An input with none of these is listed under ``provenance.rejected`` with the reason; a profile with
nothing fitted at all is an error.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from calibration.aggregate import aggregate_experiment, check_same_node, is_aggregate_only
from calibration.check import check_run
from calibration.fit_acceptance import AcceptanceFit, fit_counters, fit_traces
from calibration.fit_replay import ReplayFit, fit_overheads, read_measured_run, replay_experiment
from calibration.fit_simulation import Experiment, fit_by_simulation
from calibration.fit_step_cost import fit_steps
from calibration.parameters import available_parameters
from calibration.profile_document import (
    InputRecord,
    engine_section,
    input_record,
    profile_document,
    simulation_engine_section,
    step_engine_section,
)
from sim.artifacts import detect_kind, parse_prometheus_scrapes, parse_runs
from sim.artifacts.schema import ParsedArtifact
from sim.catalogue import gpu_names, model_names
from sim.errors import CalibrationError

_REPLAYABLE = ("vllm_bench_json", "sglang_bench_jsonl", "vllm_request_timings")


@dataclass(frozen=True)
class Calibration:
    """The assembled profile document and the replay fit behind its engine section, if any."""

    document: dict[str, Any]
    replay_fit: ReplayFit | None
    seconds: float
    warnings: tuple[str, ...] = ()


def catalogue_model(name: str | None) -> str | None:
    """The catalogue name of a Hugging Face model id (``meta-llama/Llama-3.1-8B`` → llama-3.1-8b),
    or None when the catalogue has no such model."""
    if not name:
        return None
    base = name.rsplit("/", 1)[-1].lower().removeprefix("meta-")
    for suffix in ("-instruct", "-chat", "-hf"):
        base = base.removesuffix(suffix)
    return base if base in model_names() else None


def _target(
    artifact: ParsedArtifact, gpu: str | None, model: str | None, tp: int | None
) -> tuple[str, str, int] | str:
    """(gpu, model, tp) to replay on, or the reason it is unknown."""
    meta = artifact.metadata
    gpu = gpu or (meta.gpu if meta.gpu in gpu_names() else None)
    model = model or catalogue_model(meta.model)
    if gpu is None or model is None:
        missing = " and ".join(f"--{k}" for k, v in (("gpu", gpu), ("model", model)) if v is None)
        return (
            f"per-request timings need the GPU and model to replay on; pass {missing} "
            f"(known GPUs: {', '.join(gpu_names())})"
        )
    return gpu, model, tp or meta.tensor_parallel_size or 1


def _run_label(label: str, artifact: ParsedArtifact, index: int, num_runs: int) -> str:
    """The label of one run of a file: the file, and which run when it holds several."""
    settings = artifact.metadata.settings
    if num_runs == 1:
        return label
    if "session_lines" in settings:
        return f"{label} [server session, lines {settings['session_lines']}]"
    if "test_name" in settings:
        return f"{label} [{settings['test_name']}]"
    model = f", model {artifact.metadata.model}" if artifact.metadata.model else ""
    return f"{label} [run {index} of {num_runs}{model}]"


def _record(label: str, run_label: str, artifact: ParsedArtifact, used: list[str]) -> InputRecord:
    record = input_record(label, artifact, used)
    if run_label == label:
        return record
    return replace(record, metadata={**record.metadata, "run": run_label[len(label) + 2 : -1]})


def _grouped(
    paths: Sequence[Path], labels: Sequence[str]
) -> list[tuple[str, tuple[ParsedArtifact, ...] | CalibrationError]]:
    """Each input's runs (or why it cannot be read); several Prometheus scrape files become one
    input, differenced in the order given."""
    kinds: list[str | None] = []
    for path in paths:
        try:
            kinds.append(detect_kind(Path(path)))
        except CalibrationError:
            kinds.append(None)
    scrapes = [i for i, kind in enumerate(kinds) if kind == "prometheus"]
    grouped: list[tuple[str, tuple[ParsedArtifact, ...] | CalibrationError]] = []
    for i, (path, label) in enumerate(zip(paths, labels, strict=True)):
        if len(scrapes) > 1 and i in scrapes:
            if i != scrapes[0]:
                continue
            label = " -> ".join(labels[j] for j in scrapes)
            try:
                grouped.append(
                    (label, parse_prometheus_scrapes([paths[j] for j in scrapes], strict=True))
                )
            except CalibrationError as exc:
                grouped.append((label, exc))
            continue
        try:
            grouped.append((label, parse_runs(Path(path))))
        except CalibrationError as exc:
            grouped.append((label, exc))
    return grouped


def _several_k(artifact: ParsedArtifact) -> str | None:
    """Why the artifact's acceptance counters cannot be fitted as one run, or None."""
    several = [n for n in artifact.notes if n.startswith("several k in one file")]
    if artifact.kind == "vllm_log" and several:
        return (
            f"spec-decode lines of {several[0].removeprefix('several k in one file: ')} "
            "speculative tokens with no server start between them: one fit per k needs the log "
            "split per server session (keep the 'vLLM API server version' lines)"
        )
    return None


def _unique(key: str, taken: dict[str, AcceptanceFit]) -> str:
    if key not in taken:
        return key
    n = 2
    while f"{key}-{n}" in taken:
        n += 1
    return f"{key}-{n}"


def calibrate(
    paths: Sequence[Path],
    *,
    labels: Sequence[str] | None = None,
    gpu: str | None = None,
    model: str | None = None,
    tp: int | None = None,
    check: bool = False,
    parameters: Sequence[str] | None = None,
    name: str | None = None,
    command: str = "specsim calibrate",
    created: dt.date | None = None,
) -> Calibration:
    """Fit everything the artifacts at ``paths`` allow; ``labels`` name them in the provenance.

    ``parameters`` names the rows of :data:`calibration.parameters.PARAMETERS` a fit by
    simulation may free (all available ones by default).
    Raise CalibrationError if no input yields anything to fit (each reason is listed), a fit
    fails, aggregate runs of different models, GPUs or TP degrees are given together, or the data
    identify no parameter; a file that cannot be parsed is rejected with the parser's reason.
    """
    import time

    started = time.perf_counter()
    labels = list(labels) if labels is not None else [str(p) for p in paths]
    candidates = available_parameters(parameters)
    inputs: list[InputRecord] = []
    rejected: list[tuple[str, str]] = []
    acceptance: dict[str, AcceptanceFit] = {}
    engine: dict[str, Any] | None = None
    replay_fit: ReplayFit | None = None
    check_doc: dict[str, Any] | None = None
    aggregates: list[tuple[str, ParsedArtifact]] = []
    replays: list[Experiment] = []
    warnings: list[str] = []
    paths_by_label = dict(zip(labels, paths, strict=True))
    for label, runs in _grouped(paths, labels):
        if isinstance(runs, CalibrationError):
            path = paths_by_label.get(label, label)
            rejected.append((label, str(runs).removeprefix(f"{path}: ")))
            continue
        for index, artifact in enumerate(runs, start=1):
            run_label = _run_label(label, artifact, index, len(runs))
            used: list[str] = []
            reasons: list[str] = []
            if artifact.acceptance is not None:
                for method in artifact.acceptance.methods:
                    fit = fit_traces(artifact.acceptance, method)
                    acceptance[_unique(fit.method, acceptance)] = fit
                    used.append(f"acceptance:{fit.method}")
            elif artifact.spec_decode is not None:
                refusal = _several_k(artifact)
                try:
                    if refusal is not None:
                        raise CalibrationError(refusal)
                    fit = fit_counters(artifact)
                except CalibrationError as exc:
                    reasons.append(str(exc).removeprefix(f"{artifact.metadata.source_path}: "))
                else:
                    key = fit.method
                    if len(runs) > 1 and artifact.metadata.num_speculative_tokens is not None:
                        key = f"{fit.method}-k{artifact.metadata.num_speculative_tokens}"
                    acceptance[_unique(key, acceptance)] = fit
                    used.append(f"acceptance:{fit.method}")
            target = _target(artifact, gpu, model, tp)
            if artifact.steps is not None and engine is not None:
                warnings.append(
                    f"{run_label}: per-step timings not used: the engine was already fitted on "
                    f"{engine.get('fitted_on')}"
                )
            if artifact.steps is not None and engine is None:
                if isinstance(target, str):
                    reasons.append(target)
                else:
                    step_fit = fit_steps(artifact.steps, *target)
                    engine = step_engine_section(step_fit, *target, run_label)
                    used.append("engine:steps")
            elif (
                artifact.requests is not None
                and artifact.kind in _REPLAYABLE
                and not (is_aggregate_only(artifact))
            ):
                if engine is not None:
                    reasons.append("the engine was already fitted on an earlier input")
                elif isinstance(target, str):
                    reasons.append(target)
                elif parameters is not None:
                    # Named parameters: the replay joins the one fit by simulation.
                    run = read_measured_run(Path(paths_by_label[label]))
                    replays.append(replay_experiment(run, *target, run_label))
                    used.append("engine:replay")
                else:
                    path = Path(paths_by_label[label])
                    run = read_measured_run(path)
                    replay_fit = fit_overheads(run, *target)
                    engine = engine_section(replay_fit, run_label)
                    used.append("engine:replay")
                    if check:
                        check_doc = check_run(run, *target, replay_fit)
            elif is_aggregate_only(artifact):
                aggregates.append((run_label, artifact))
                used.append("engine:aggregate")
            if used:
                inputs.append(_record(label, run_label, artifact, used))
            else:
                reasons = reasons or [
                    f"nothing to fit in a {artifact.kind} artifact: no acceptance traces, "
                    "spec-decode counters, per-step timings or per-request latencies"
                ]
                rejected.append((run_label, "; ".join(reasons)))
    if aggregates or replays:
        engine = _fit_aggregates(
            aggregates, replays, engine, gpu, model, tp, candidates, inputs, rejected, warnings
        )
    title = name or (Path(labels[0]).stem if labels else "profile")
    document = profile_document(
        title, inputs, engine, acceptance, check_doc, rejected, command, created, warnings
    )
    return Calibration(document, replay_fit, time.perf_counter() - started, tuple(warnings))


def _fit_aggregates(
    aggregates: list[tuple[str, ParsedArtifact]],
    replays: list[Experiment],
    engine: dict[str, Any] | None,
    gpu: str | None,
    model: str | None,
    tp: int | None,
    candidates: Sequence[Any],
    inputs: list[InputRecord],
    rejected: list[tuple[str, str]],
    warnings: list[str],
) -> dict[str, Any] | None:
    """Fit the aggregate-only runs and the replays together (one fit); return the engine section.

    A run that cannot be rebuilt is moved from ``inputs`` to ``rejected`` with its reason.
    Raise CalibrationError if the runs are of different nodes or the given flags contradict
    them.
    """

    def drop(label: str, reason: str) -> None:
        for n, record in enumerate(inputs):
            run = record.metadata.get("run")
            if (f"{record.label} [{run}]" if run else record.label) == label:
                rest = tuple(use for use in record.used_for if use != "engine:aggregate")
                inputs[n] = replace(record, used_for=rest)
        inputs[:] = [record for record in inputs if record.used_for]
        rejected.append((label, reason))

    if engine is not None:
        for label, _ in aggregates:
            drop(label, "the engine was already fitted from per-request or per-step data")
        return engine
    check_same_node(aggregates, catalogue_model)
    for label, artifact in aggregates:
        meta = artifact.metadata
        stated = catalogue_model(meta.model)
        if model is not None and stated is not None and stated != model:
            raise CalibrationError(
                f"{label}: the run served {meta.model!r} ({stated}), not --model "
                f"{model}; calibrate each model on its own runs"
            )
        if gpu is not None and meta.gpu in gpu_names() and meta.gpu != gpu:
            raise CalibrationError(f"{label}: the run states GPU {meta.gpu!r}, not --gpu {gpu}")
        if tp is not None and meta.tensor_parallel_size not in (None, tp):
            raise CalibrationError(
                f"{label}: the run states TP {meta.tensor_parallel_size}, not --tp {tp}"
            )
    target: tuple[str, str, int] | str
    if aggregates:
        target = _target(aggregates[0][1], gpu, model, tp)
    else:  # replays are only made once their GPU and model are known
        node = replays[0].document
        target = (node["hardware"]["gpu"], node["model"], node["hardware"]["num_gpus"])
    if isinstance(target, str):
        for label, _ in aggregates:
            drop(label, target.replace("per-request timings", "an aggregate fit"))
        return None
    experiments: list[Experiment] = list(replays)
    for label, artifact in aggregates:
        try:
            experiments.append(aggregate_experiment(artifact, label, *target))
        except CalibrationError as exc:
            drop(label, str(exc).removeprefix(f"{label}: "))
    if not experiments:
        return None
    for experiment in experiments:
        warnings.extend(f"{experiment.label}: {note}" for note in experiment.notes)
    fit = fit_by_simulation(experiments, list(candidates), *target)
    warnings.extend(fit.warnings)
    return simulation_engine_section(fit, *target, [e.label for e in experiments])
