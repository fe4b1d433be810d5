"""The step-cost parameters a fit by simulation may free: one declared row per parameter.

Each :class:`FitParameter` says what the parameter is (name, unit), the range a fit may move it in,
the magnitude the optimiser and the identifiability check measure it in (``scale``), and where it
goes in the simulation: ``engine.<key>`` is a key of the scenario's ``engine`` section, and
``efficiency.<field>`` a field of the profile's ``efficiency`` override of the GPU's shipped
:class:`sim.cost_model.Efficiency` (the other efficiency fields keep their shipped values). A row is
*available* only when the simulator knows its target, so a term the cost model gains (a per-token
CPU overhead ``per_token_overhead_s``) becomes fittable by its row alone, once the scenario accepts
the key. Shipped values come from the engine preset (``sim/data/engine_presets.yaml``) and the
GPU's efficiency entry (``sim/data/hardware_efficiency.yaml``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sim.efficiency import EFFICIENCY_FIELDS, load_efficiency
from sim.engine.presets import get_preset
from sim.errors import CalibrationError
from sim.host_costs import engine_overheads_s
from sim.scenario import EngineConfig


@dataclass(frozen=True)
class FitParameter:
    """One fittable step-cost parameter and how it is applied to the scenario or profile."""

    name: str
    unit: str
    lower: float
    upper: float
    scale: float
    applies_to: str
    description: str

    @property
    def section(self) -> str:
        """``engine`` or ``efficiency``: where the value is written."""
        return self.applies_to.split(".", 1)[0]

    @property
    def key(self) -> str:
        """The key inside :attr:`section`."""
        return self.applies_to.split(".", 1)[1]


#: The declared table. Bounds: overheads from 0 to well above any measured engine (vLLM V1 step
#: overhead about 1.4 ms at batch 1, engine preset); efficiencies are fractions of peak in (0, 1].
#: ``scale`` is the parameter's typical magnitude (tens of µs per sequence, a few per token, a
#: ms per step, a few points of efficiency): the unit of the optimiser and of the
#: identifiability check, not a value used by the model.
PARAMETERS: tuple[FitParameter, ...] = (
    FitParameter(
        "step_overhead_s",
        "s per engine step",
        0.0,
        0.03,
        1e-3,
        "engine.step_overhead_s",
        "fixed CPU time of every engine step (scheduling, input preparation, output processing)",
    ),
    FitParameter(
        "per_sequence_overhead_s",
        "s per scheduled sequence per step",
        0.0,
        2e-3,
        5e-5,
        "engine.per_sequence_overhead_s",
        "CPU time per sequence in the step's batch",
    ),
    FitParameter(
        "per_token_overhead_s",
        "s per scheduled token per step",
        0.0,
        1e-4,
        1e-6,
        "engine.per_token_overhead_s",
        "CPU time per token in the step (sampling, logits, detokenisation)",
    ),
    FitParameter(
        "bandwidth",
        "fraction of peak HBM bandwidth",
        0.05,
        1.0,
        0.05,
        "efficiency.bandwidth",
        "achieved fraction of the GPU's peak memory bandwidth",
    ),
    FitParameter(
        "flops",
        "fraction of peak dense tensor throughput",
        0.05,
        1.0,
        0.05,
        "efficiency.flops",
        "achieved fraction of the GPU's peak dense tensor throughput",
    ),
)
PARAMETER_NAMES = tuple(p.name for p in PARAMETERS)


def is_available(parameter: FitParameter) -> bool:
    """Whether the simulator accepts the parameter's target (scenario engine key or efficiency
    field)."""
    if parameter.section == "engine":
        return parameter.key in EngineConfig.model_fields
    return parameter.key in EFFICIENCY_FIELDS


def available_parameters(names: Sequence[str] | None = None) -> tuple[FitParameter, ...]:
    """The rows named by ``names`` (all available ones by default), in table order.

    Raise CalibrationError if a name is not in the table or its target is not known to the
    simulator.
    """
    if names is None:
        return tuple(p for p in PARAMETERS if is_available(p))
    by_name = {p.name: p for p in PARAMETERS}
    for name in names:
        if name not in by_name:
            raise CalibrationError(
                f"--fit: unknown parameter {name!r}; known: {', '.join(PARAMETER_NAMES)}"
            )
        if not is_available(by_name[name]):
            raise CalibrationError(
                f"--fit: {name} ({by_name[name].applies_to}) is not a setting this simulator "
                "accepts"
            )
    return tuple(p for p in PARAMETERS if p.name in names)


def shipped_values(
    parameters: Sequence[FitParameter], gpu: str, preset: str = "vllm-v1"
) -> dict[str, float]:
    """The value each parameter has when nothing is fitted: the preset's or the GPU's.

    Raise CalibrationError if the preset or the GPU's efficiency entry cannot be read.
    """
    try:
        engine = get_preset(preset)
        efficiency = load_efficiency(gpu)
    except Exception as exc:  # CatalogueError, ScenarioError: all user-facing
        raise CalibrationError(f"--gpu {gpu}: {exc}") from None
    # The engine's overheads in force: the host-cost fit's where it has them (sim.host_costs).
    overheads = engine_overheads_s(engine.name, engine.step_overhead_s)
    values: dict[str, float] = {}
    for parameter in parameters:
        if parameter.section == "engine":
            values[parameter.name] = float(overheads.get(parameter.key, 0.0))
        else:
            values[parameter.name] = float(getattr(efficiency, parameter.key, 0.0))
    return values


def efficiency_override(gpu: str, values: Mapping[str, float]) -> dict[str, float] | None:
    """The profile's ``efficiency`` section for ``values`` (all four fields, the unfitted ones at
    the GPU's shipped values), or None when no efficiency parameter is in ``values``."""
    fields = {
        p.key: values[p.name] for p in PARAMETERS if p.section == "efficiency" and p.name in values
    }
    if not fields:
        return None
    shipped = load_efficiency(gpu)
    return {name: float(fields.get(name, getattr(shipped, name))) for name in EFFICIENCY_FIELDS}


def engine_settings(values: Mapping[str, float]) -> dict[str, float]:
    """The scenario ``engine`` keys for the engine parameters in ``values``."""
    return {
        p.key: float(values[p.name])
        for p in PARAMETERS
        if p.section == "engine" and p.name in values
    }
