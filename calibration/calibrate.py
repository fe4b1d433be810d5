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
  ``--model`` or the artifact's metadata).

An input with none of these is listed under ``provenance.rejected`` with the reason; a profile with
nothing fitted at all is an error.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calibration.check import check_run
from calibration.fit_acceptance import AcceptanceFit, fit_counters, fit_traces
from calibration.fit_replay import ReplayFit, fit_overheads, read_measured_run
from calibration.fit_step_cost import fit_steps
from calibration.parsers import parse_runs
from calibration.profile import (
    InputRecord,
    engine_section,
    input_record,
    profile_document,
    step_engine_section,
)
from calibration.schema import ParsedArtifact
from sim.catalogue import gpu_names, model_names
from sim.errors import CalibrationError

_REPLAYABLE = ("vllm_bench_json", "sglang_bench_jsonl", "vllm_request_timings")


@dataclass(frozen=True)
class Calibration:
    """The assembled profile document and the replay fit behind its engine section, if any."""

    document: dict[str, Any]
    replay_fit: ReplayFit | None
    seconds: float


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
    name: str | None = None,
    command: str = "specsim calibrate",
    created: dt.date | None = None,
) -> Calibration:
    """Fit everything the artifacts at ``paths`` allow; ``labels`` name them in the provenance.

    Raise CalibrationError if no input yields anything to fit (each reason is listed), or a fit
    fails; a file that cannot be parsed is rejected with the parser's reason.
    """
    import time

    started = time.perf_counter()
    labels = list(labels) if labels is not None else [str(p) for p in paths]
    inputs: list[InputRecord] = []
    rejected: list[tuple[str, str]] = []
    acceptance: dict[str, AcceptanceFit] = {}
    engine: dict[str, Any] | None = None
    replay_fit: ReplayFit | None = None
    check_doc: dict[str, Any] | None = None
    for path, label in zip(paths, labels, strict=True):
        try:
            runs = parse_runs(Path(path))
        except CalibrationError as exc:
            rejected.append((label, str(exc).removeprefix(f"{path}: ")))
            continue
        for artifact in runs:
            used: list[str] = []
            reasons: list[str] = []
            if artifact.acceptance is not None:
                for method in artifact.acceptance.methods:
                    fit = fit_traces(artifact.acceptance, method)
                    acceptance[_unique(fit.method, acceptance)] = fit
                    used.append(f"acceptance:{fit.method}")
            elif artifact.spec_decode is not None:
                try:
                    fit = fit_counters(artifact)
                except CalibrationError as exc:
                    reasons.append(str(exc).removeprefix(f"{artifact.metadata.source_path}: "))
                else:
                    acceptance[_unique(fit.method, acceptance)] = fit
                    used.append(f"acceptance:{fit.method}")
            target = _target(artifact, gpu, model, tp)
            if artifact.steps is not None and engine is None:
                if isinstance(target, str):
                    reasons.append(target)
                else:
                    step_fit = fit_steps(artifact.steps, *target)
                    engine = step_engine_section(step_fit, *target, label)
                    used.append("engine:steps")
            elif artifact.requests is not None and artifact.kind in _REPLAYABLE:
                if engine is not None:
                    reasons.append("the engine was already fitted on an earlier input")
                elif isinstance(target, str):
                    reasons.append(target)
                else:
                    run = read_measured_run(Path(path))
                    replay_fit = fit_overheads(run, *target)
                    engine = engine_section(replay_fit, label)
                    used.append("engine:replay")
                    if check:
                        check_doc = check_run(run, *target, replay_fit)
            if used:
                inputs.append(input_record(label, artifact, used))
            else:
                reasons = reasons or [
                    f"nothing to fit in a {artifact.kind} artifact: no acceptance traces, "
                    "spec-decode counters, per-step timings or per-request latencies"
                ]
                rejected.append((label, "; ".join(reasons)))
    title = name or (Path(labels[0]).stem if labels else "profile")
    document = profile_document(
        title, inputs, engine, acceptance, check_doc, rejected, command, created
    )
    return Calibration(document, replay_fit, time.perf_counter() - started)
