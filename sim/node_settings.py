"""The engine settings in force for a scenario, and the resolved document saved with its run.

The scenario's ``engine`` keys win over a calibrated profile's overheads (``engine.profile``),
which win over the preset's defaults; a method can impose its own engine limits
(``sim/data/host_costs.yaml``). :func:`resolved_document` writes every default out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sim.calibrated_profiles import EngineProfile, load_engine_profile
from sim.engine.frontend import FRONTEND_FIELDS
from sim.engine.presets import SETTINGS, EnginePreset, get_preset
from sim.errors import ScenarioError
from sim.host_costs import HostProfile, load_host_profile
from sim.scenario import Scenario


def resolve_engine(scenario: Scenario, base_dir: Path | None = None) -> EnginePreset:
    """The engine settings in force: the scenario's keys over the calibrated profile's overheads
    (if ``engine.profile`` is set) over the preset's defaults.

    Raise ScenarioError if ``engine.profile`` cannot be loaded or was fitted for another GPU,
    model or TP degree.
    """
    e = scenario.engine
    preset = get_preset(e.preset)
    host = load_host_profile(preset.name)
    # The per-sequence overhead fitted under load (sim/data/host_costs.yaml) is the engine's.
    preset = replace(preset, per_sequence_overhead_s=host.costs.per_sequence_overhead_s)
    if scenario.speculation.method != "none":
        # What the engine itself changes for this method (e.g. SGLang's smaller batch cap).
        method_costs, imposed, _ = host.for_method(scenario.speculation.method)
        if not method_costs.cpu_overlap:
            # vLLM runs async scheduling only for the methods it supports it with.
            preset = replace(preset, async_scheduling=False)
        if "max_num_seqs" in imposed:
            preset = replace(preset, max_num_seqs=int(imposed["max_num_seqs"]))
        if "chunked_prefill" in imposed:
            preset = replace(preset, chunked_prefill=bool(imposed["chunked_prefill"]))
    if e.profile is not None:
        profile = load_engine_profile(e.profile, base_dir or Path.cwd())
        _check_profile_target(scenario, profile)
        preset = replace(
            preset,
            step_overhead_s=profile.step_overhead_s,
            per_sequence_overhead_s=profile.per_sequence_overhead_s,
        )
    written = {key: getattr(e, key) for key in SETTINGS if getattr(e, key) is not None}
    frontend = {
        key: getattr(e.frontend, key)
        for key in ("enabled", *FRONTEND_FIELDS)
        if getattr(e.frontend, key) is not None
    }
    return replace(preset, frontend=replace(preset.frontend, **frontend), **written)


@dataclass(frozen=True)
class Batching:
    """How the engine forms batches (``SchedulerConfig.mixed_batches``, ``max_prefills_per_step``):
    the engine's own rule for the method, unless the scenario sets it."""

    mixed_batches: bool
    max_prefills_per_step: int


def batching_of(scenario: Scenario, host: HostProfile) -> Batching:
    """The batching in force for ``scenario`` on the engine described by ``host``."""
    mixed = host.mixed_batches
    limit = 0
    if scenario.speculation.method != "none":
        limit = int(host.for_method(scenario.speculation.method)[1].get("max_prefills_per_step", 0))
    e = scenario.engine
    return Batching(
        mixed_batches=mixed if e.mixed_batches is None else e.mixed_batches,
        max_prefills_per_step=limit if e.max_prefills_per_step is None else e.max_prefills_per_step,
    )


def _check_profile_target(scenario: Scenario, profile: EngineProfile) -> None:
    model = scenario.model if isinstance(scenario.model, str) else None
    mismatches = [
        f"{what} {fitted!r} (scenario: {actual!r})"
        for what, fitted, actual in (
            ("GPU", profile.gpu, scenario.hardware.gpu),
            ("model", profile.model, model),
            ("TP", profile.tensor_parallel_size, scenario.hardware.num_gpus),
        )
        if fitted is not None and actual is not None and fitted != actual
    ]
    if mismatches:
        raise ScenarioError(
            f"engine.profile: {profile.name} was fitted for another node: {', '.join(mismatches)}"
        )


def resolved_document(scenario: Scenario, engine: EnginePreset) -> dict[str, Any]:
    """The scenario with every default written out, as saved beside the results."""
    document = scenario.model_dump(mode="json")
    document["engine"].update({key: getattr(engine, key) for key in SETTINGS})
    document["engine"]["preset"] = engine.name  # an alias written out as the preset it meant
    document["engine"]["frontend"] = {
        key: getattr(engine.frontend, key) for key in ("enabled", *FRONTEND_FIELDS)
    }
    return document
