"""The scenario file: one validated schema that holds every default.

``load_scenario`` reads YAML safely, applies ``--set key.path=value`` overrides, and validates the
whole document before any object is built. Every problem is reported at once, each as
``key.path: what is wrong, got VALUE``; unknown keys are errors, never ignored.

The schema's sections live in their own modules: the node (:mod:`.node`), the measurement window
(:mod:`.measurement`), the whole scenario (:mod:`.schema`); :mod:`.messages` words the errors and
:mod:`.loading` reads, overrides and validates. The workload, speculation and fleet sections are
:mod:`sim.workload.config`, :mod:`sim.speculation` and :mod:`sim.fleet.config`.
"""

from sim.scenario.loading import (
    apply_override,
    check_overrides,
    default_scenario_text,
    document_with_overrides,
    load_scenario,
    read_document,
    validate_document,
)
from sim.scenario.measurement import (
    DEFAULT_STEADY_TRIM_FRACTION,
    GOODPUT_METRICS,
    MAX_LATENCY_MS,
    MeasurementConfig,
)
from sim.scenario.node import (
    MAX_BATCH_SEQS,
    MAX_BLOCK_SIZE,
    MAX_OVERHEAD_S,
    EngineConfig,
    FrontendConfig,
    HardwareConfig,
    PrecisionConfig,
)
from sim.scenario.schema import SLO_METRICS, SLO_STATS, Scenario, scenario_json_schema
from sim.speculation import METHODS

__all__ = [
    "DEFAULT_STEADY_TRIM_FRACTION",
    "GOODPUT_METRICS",
    "MAX_BATCH_SEQS",
    "MAX_BLOCK_SIZE",
    "MAX_LATENCY_MS",
    "MAX_OVERHEAD_S",
    "METHODS",
    "SLO_METRICS",
    "SLO_STATS",
    "EngineConfig",
    "FrontendConfig",
    "HardwareConfig",
    "MeasurementConfig",
    "PrecisionConfig",
    "Scenario",
    "apply_override",
    "check_overrides",
    "default_scenario_text",
    "document_with_overrides",
    "load_scenario",
    "read_document",
    "scenario_json_schema",
    "validate_document",
]
