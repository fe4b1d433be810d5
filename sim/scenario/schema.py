"""The whole scenario (:class:`Scenario`): its sections, the seed, the SLO, and its JSON Schema."""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidatorFunctionWrapHandler,
    field_serializer,
    field_validator,
    model_validator,
)

from sim.catalogue import ModelSpec
from sim.fleet.config import FleetConfig
from sim.inputs import SCHEMA_CONFIG
from sim.model_names import catalogue_model, checkpoint_precision_conflict, stated_weights
from sim.scenario.measurement import MAX_LATENCY_MS, MeasurementConfig
from sim.scenario.node import EngineConfig, HardwareConfig, PrecisionConfig
from sim.speculation import (
    SpeculationConfig,
    no_speculation,
)
from sim.workload import WorkloadConfig

_STRICT = SCHEMA_CONFIG


SLO_METRICS = ("ttft", "tpot", "itl", "e2e_latency")
SLO_STATS = ("mean", "p50", "p90", "p99")


class Scenario(BaseModel):
    """A whole scenario: node, model, engine, speculation, workload, SLO and seed."""

    model_config = _STRICT
    name: str = "default"
    seed: int = Field(default=0, ge=0, lt=2**63)
    hardware: HardwareConfig = HardwareConfig()
    model: str | ModelSpec = "llama-3.1-8b"
    precision: PrecisionConfig = PrecisionConfig()
    engine: EngineConfig = EngineConfig()
    speculation: SpeculationConfig = no_speculation()
    workload: WorkloadConfig = WorkloadConfig()
    slo: dict[str, float] | None = None
    measurement: MeasurementConfig = MeasurementConfig()
    #: Replicas of this node behind a router (sim/fleet); absent: one node.
    fleet: FleetConfig | None = None
    #: ``model`` as the user wrote it when it is not the catalogue name it resolves to (a
    #: Hugging Face id, a quantized checkpoint's included): what the run served, so what every
    #: output names (the dump below, hence the saved scenario and vllm_bench.json's model_id).
    _model_as_given: str | None = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_model_as_given(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Scenario:
        scenario: Scenario = handler(data)
        given = data.get("model") if isinstance(data, dict) else None
        # A catalogue name in other case is that name, not an id the user served.
        name = scenario.model if isinstance(scenario.model, str) else None
        if isinstance(given, str) and name and given.strip().lower() != name.lower():
            scenario._model_as_given = given.strip()
        return scenario

    @field_serializer("model", mode="wrap")
    def _dump_model_as_given(self, value: Any, handler: SerializerFunctionWrapHandler) -> Any:
        # Validating the dump again gives the same catalogue entry and precision.
        return self._model_as_given if self._model_as_given is not None else handler(value)

    @property
    def model_as_given(self) -> str | ModelSpec:
        """``model`` as the user wrote it (the catalogue entry's name when they wrote that)."""
        return self._model_as_given if self._model_as_given is not None else self.model

    @model_validator(mode="before")
    @classmethod
    def _checkpoint_precision(cls, data: Any) -> Any:
        # A quantized checkpoint's id (sim/model_names.py) states its weight format: it becomes
        # precision.weights, and another explicit one is refused.
        if not isinstance(data, dict) or not isinstance(data.get("model"), str):
            return data
        weights = stated_weights(data["model"])
        precision = data.get("precision")
        if weights is None or not isinstance(precision, dict | PrecisionConfig | None):
            return data
        if isinstance(precision, PrecisionConfig):
            precision = precision.model_dump(exclude_unset=True)
        given = (precision or {}).get("weights")
        if isinstance(given, str) and (
            conflict := checkpoint_precision_conflict(data["model"], given)
        ):
            raise ValueError(conflict)
        return {**data, "precision": {**(precision or {}), "weights": weights}}

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str | ModelSpec) -> str | ModelSpec:
        # A path ending in .json is a Hugging Face config.json, read when the run is built.
        if isinstance(value, str) and value.endswith(".json"):
            return value
        return catalogue_model(value) or value

    @field_validator("slo")
    @classmethod
    def _slo_keys(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is None:
            return value
        allowed = {f"{m}_{s}_ms" for m in SLO_METRICS for s in SLO_STATS}
        for key, bound in value.items():
            if key not in allowed:
                raise ValueError(
                    f"unknown SLO key {key!r}; use <metric>_<stat>_ms with metric in "
                    f"{SLO_METRICS} and stat in {SLO_STATS}"
                )
            if not 0 < bound <= MAX_LATENCY_MS:
                raise ValueError(
                    f"SLO {key} must be > 0 and <= {MAX_LATENCY_MS:g} ms (a day), got {bound}"
                )
        return value

    @model_validator(mode="after")
    def _limits(self) -> Scenario:
        if (
            self.workload.num_requests is not None
            and self.measurement.warmup_requests >= self.workload.num_requests
        ):
            raise ValueError("measurement.warmup_requests must be < workload.num_requests")
        if self.measurement.warmup_drained:
            if self.measurement.warmup_requests == 0:
                raise ValueError("measurement.warmup_drained needs measurement.warmup_requests > 0")
            if self.workload.arrival.process != "closed_loop" or self.workload.sessions:
                raise ValueError(
                    "measurement.warmup_drained: only closed-loop clients without sessions wait "
                    "for the warm-up to drain (workload.arrival.process: closed_loop)"
                )
        if self.fleet is not None and self.speculation.policy is not None:
            # A policy's state is one node's (its batch, its sequences' acceptance).
            raise ValueError("speculation.policy: adaptive policies run on one node, not a fleet")
        return self


def scenario_json_schema() -> dict[str, Any]:
    """The JSON Schema of a scenario file, for editors' completion and validation."""
    schema = Scenario.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "specsim scenario"
    return schema
