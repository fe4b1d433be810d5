"""The calibrated profile document: provenance, fitted values, intervals and residuals.

:func:`profile_document` assembles what :mod:`calibration.calibrate` fitted into the layout
:mod:`sim.calibrated_profiles` reads back; :func:`write_profile` writes it as YAML. Inputs are
recorded as the caller names them (never resolved to absolute paths) with their SHA-256, so a
profile can be traced to the exact files without exposing the machine it was made on.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from calibration.fit_acceptance import AcceptanceFit
from calibration.fit_replay import ReplayFit
from calibration.fit_simulation import SimulationFit
from calibration.fit_step_cost import StepFit
from calibration.parameters import PARAMETERS, efficiency_override
from sim import __version__
from sim.artifacts.schema import ParsedArtifact
from sim.calibrated_profiles import FORMAT_VERSION
from sim.errors import CalibrationError
from sim.output import atomic_write


@dataclass(frozen=True)
class InputRecord:
    """One input file as the profile records it."""

    label: str
    sha256: str
    kind: str
    used_for: tuple[str, ...]
    metadata: dict[str, Any]


def input_record(label: str, artifact: ParsedArtifact, used_for: Sequence[str]) -> InputRecord:
    """The record of ``artifact`` read from the file the user called ``label``."""
    meta = artifact.metadata
    fields = {
        "engine": meta.engine,
        "engine_version": meta.engine_version or meta.engine_era,
        "method": meta.method,
        "num_speculative_tokens": meta.num_speculative_tokens,
        "model": meta.model,
        "tensor_parallel_size": meta.tensor_parallel_size,
        "gpu": meta.gpu,
    }
    return InputRecord(
        label=label,
        sha256=meta.source_sha256,
        kind=artifact.kind,
        used_for=tuple(used_for),
        metadata={k: v for k, v in fields.items() if v is not None},
    )


def _rounded(value: float) -> float:
    return float(f"{value:.6g}")


def engine_section(fit: ReplayFit, label: str) -> dict[str, Any]:
    """The ``engine`` section from a replay fit of the run in ``label``."""
    settings = fit.settings
    return {
        "gpu": settings.get("gpu"),
        "model": settings.get("model"),
        "tensor_parallel_size": settings.get("tp"),
        "preset": "vllm-v1",
        "max_num_seqs": settings.get("max_num_seqs"),
        "max_num_batched_tokens": settings.get("max_num_batched_tokens"),
        "step_overhead_s": _rounded(fit.values["step_overhead_s"]),
        "per_sequence_overhead_s": _rounded(fit.values["per_sequence_overhead_s"]),
        "ci95": {k: [_rounded(lo), _rounded(hi)] for k, (lo, hi) in fit.ci95.items()},
        "efficiency": None,
        "fitted_on": label,
        "method": fit.method,
        "num_simulations": fit.num_simulations,
        "residuals": {k: _rounded(v) for k, v in fit.residuals.items()},
    }


def step_engine_section(fit: StepFit, gpu: str, model: str, tp: int, label: str) -> dict[str, Any]:
    """The ``engine`` section from a per-step regression on the steps logged in ``label``."""
    return {
        "gpu": gpu,
        "model": model,
        "tensor_parallel_size": tp,
        "preset": "vllm-v1",
        "step_overhead_s": _rounded(fit.values["step_overhead_s"]),
        "per_sequence_overhead_s": _rounded(fit.values["per_sequence_overhead_s"]),
        "ci95": {k: [_rounded(lo), _rounded(hi)] for k, (lo, hi) in fit.ci95.items()},
        "efficiency": None,
        "fitted_on": label,
        "method": fit.method,
        "residuals": {"rms_s": _rounded(fit.residual_rms_s), "num_steps": fit.num_steps},
    }


def simulation_engine_section(
    fit: SimulationFit, gpu: str, model: str, tp: int, labels: Sequence[str]
) -> dict[str, Any]:
    """The ``engine`` section from a fit by simulation of the runs in ``labels``: the fitted
    values, the efficiency override when an efficiency was freed, and the parameter table (each
    row fitted with its interval, or fixed at its shipped value with the reason)."""
    table: dict[str, Any] = {}
    for parameter in PARAMETERS:
        if parameter.name not in fit.values:
            continue
        row: dict[str, Any] = {
            "value": _rounded(fit.values[parameter.name]),
            "unit": parameter.unit,
            "applies_to": parameter.applies_to,
            "shipped": _rounded(fit.shipped[parameter.name]),
            "bounds": [parameter.lower, parameter.upper],
        }
        if parameter.name in fit.free:
            low, high = fit.ci95[parameter.name]
            row.update(status="fitted", ci95=[_rounded(low), _rounded(high)])
        else:
            row.update(status="fixed", reason=fit.fixed.get(parameter.name, ""))
        table[parameter.name] = row
    fitted_efficiency = {n: v for n, v in fit.values.items() if n in fit.free}
    efficiency = efficiency_override(gpu, fitted_efficiency)
    section: dict[str, Any] = {
        "gpu": gpu,
        "model": model,
        "tensor_parallel_size": tp,
        "preset": "vllm-v1",
        "step_overhead_s": _rounded(
            fit.values.get("step_overhead_s", fit.shipped.get("step_overhead_s", 0.0))
        ),
        "per_sequence_overhead_s": _rounded(
            fit.values.get(
                "per_sequence_overhead_s", fit.shipped.get("per_sequence_overhead_s", 0.0)
            )
        ),
    }
    for name in ("per_token_overhead_s",):
        if name in fit.values:
            section[name] = _rounded(fit.values[name])
    section.update(
        {
            "ci95": {k: [_rounded(lo), _rounded(hi)] for k, (lo, hi) in fit.ci95.items()},
            "efficiency": None
            if efficiency is None
            else {k: _rounded(v) for k, v in efficiency.items()},
            "parameters": table,
            "fitted_on": list(labels),
            "method": fit.method,
            "num_simulations": fit.num_simulations,
            "condition_number": None
            if fit.condition_number is None
            else _rounded(fit.condition_number),
            "comparison": {
                label: {
                    stat: {k: _rounded(v) for k, v in row.items()} for stat, row in stats.items()
                }
                for label, stats in fit.comparison.items()
            },
        }
    )
    return section


def profile_document(
    name: str,
    inputs: Sequence[InputRecord],
    engine: dict[str, Any] | None,
    acceptance: dict[str, AcceptanceFit],
    check: dict[str, Any] | None,
    rejected: Sequence[tuple[str, str]],
    command: str,
    created: dt.date | None = None,
    warnings: Sequence[str] = (),
) -> dict[str, Any]:
    """The whole profile as a plain mapping.

    ``created`` defaults to today (UTC); pass a fixed date for a reproducible file.
    Raise CalibrationError if nothing was fitted.
    """
    if engine is None and not acceptance:
        raise CalibrationError(
            "nothing to fit in the inputs: "
            + "; ".join(f"{label}: {reason}" for label, reason in rejected)
        )
    day = created or dt.datetime.now(dt.UTC).date()
    document = {
        "specsim_profile": FORMAT_VERSION,
        "name": name,
        "provenance": {
            "created": day.isoformat(),
            "specsim_version": __version__,
            "command": command,
            "inputs": [
                {
                    "file": record.label,
                    "sha256": record.sha256,
                    "kind": record.kind,
                    "used_for": list(record.used_for),
                    **record.metadata,
                }
                for record in inputs
            ],
            "rejected": [{"file": label, "reason": reason} for label, reason in rejected],
        },
        "engine": engine,
        "acceptance": {method: fit.as_document() for method, fit in acceptance.items()} or None,
        "check": check,
    }
    if warnings:
        document["warnings"] = list(warnings)
    return document


def profile_yaml(document: dict[str, Any]) -> str:
    """The profile as YAML text (keys in the order assembled)."""
    header = (
        "# specsim calibrated profile, written by `specsim calibrate`; see docs/calibration.md\n"
    )
    return header + yaml.safe_dump(document, sort_keys=False, width=100, allow_unicode=True)


def write_profile(document: dict[str, Any], path: Path) -> None:
    """Write the profile to ``path`` atomically, creating its folder.

    Raise CalibrationError naming the path if it cannot be written.
    """
    text = profile_yaml(document)
    try:
        atomic_write(path, lambda handle: handle.write(text))
    except OSError as exc:
        raise CalibrationError(
            f"{path}: cannot write the profile ({exc.strerror or exc})"
        ) from None
