"""The ``fleet:`` section of a scenario: replicas of the node behind a router.

A fleet is data parallelism: N serving nodes (replicas), each an engine as the scenario's own node,
and a router that sends every arriving request to one of them. Two shapes:

- colocated: ``replicas`` is a count (N copies of the scenario's node) or a list of groups, each
  ``{count, hardware, engine}`` whose keys override the scenario's for that group;
- prefill/decode disaggregation: ``disaggregation: {prefill: ..., decode: ..., link: ...}``, each
  side a count or a list of groups as above; a request prefills on a prefill replica, its KV
  crosses the link, and it decodes on a decode replica.

Routers (``router``, a name or ``{policy, ...}``): ``round_robin``, ``least_outstanding``,
``least_kv``, ``session_affinity``. Every default is here; unknown keys are errors.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from sim.inputs import SCHEMA_CONFIG

_STRICT = SCHEMA_CONFIG


def _nested(value: Any, model: str) -> Any:
    """Validate a partial ``hardware``/``engine`` mapping with the scenario's own schema.

    Raise ValueError naming the first bad key if it does not validate.
    """
    if value is None:
        return None
    from sim import scenario  # the scenario module imports this one: resolve at validation time

    schema = getattr(scenario, model)
    try:
        schema.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(mapping)"
        message = first["msg"].removeprefix("Value error, ")
        raise ValueError(f"{where}: {message} ({first.get('input')!r})") from None
    return dict(value)


class ReplicaGroupConfig(BaseModel):
    """``count`` identical replicas; ``hardware``/``engine`` keys override the scenario's."""

    model_config = _STRICT
    count: int = Field(default=1, ge=1, le=4096)
    hardware: dict[str, Any] | None = None
    engine: dict[str, Any] | None = None

    @field_validator("hardware")
    @classmethod
    def _hardware(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return _nested(value, "HardwareConfig")

    @field_validator("engine")
    @classmethod
    def _engine(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return _nested(value, "EngineConfig")


Replicas = list[ReplicaGroupConfig]


def _as_groups(value: Any) -> Any:
    """A count N stands for one group of N copies of the scenario's node."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ValueError("must be >= 1")
        return [{"count": value}]
    return value


class RouterConfig(BaseModel):
    """How the router picks a replica.

    ``session_affinity`` hashes each request's session id to a replica and falls back to
    ``least_outstanding`` when that replica is overloaded: when its outstanding requests exceed
    the least-loaded replica's by more than ``balance_abs_threshold`` AND by a factor of more than
    ``balance_rel_threshold`` (SGLang router's imbalance rule and defaults, 64 and 1.5:
    sgl-project/sglang, sgl-router py_src/sglang_router/router_args.py). Without session ids in
    the workload, ``num_sessions`` sessions are drawn uniformly per request (stream
    ``fleet.sessions``).
    """

    model_config = _STRICT
    policy: Literal["round_robin", "least_outstanding", "least_kv", "session_affinity"] = (
        "round_robin"
    )
    num_sessions: int | None = Field(default=None, ge=1)
    balance_abs_threshold: int = Field(default=64, ge=0)
    balance_rel_threshold: float = Field(default=1.5, ge=1.0)


class LinkConfig(BaseModel):
    """The KV-transfer link between a prefill and a decode replica, per GPU.

    Unset figures come from ``sim/data/fleet_links.yaml`` for the prefill replica's GPU.
    """

    model_config = _STRICT
    # From 1 MB/s (a slow WAN) to 10 TB/s (past NVLink 5's 1.8 TB/s per GPU); latency under 10 s.
    bandwidth_bytes_per_s: float | None = Field(default=None, ge=1e6, le=1e13)
    latency_s: float | None = Field(default=None, ge=0, le=10.0)


class DisaggregationConfig(BaseModel):
    """Prefill replicas, decode replicas, and the link the KV crosses between them."""

    model_config = _STRICT
    prefill: Replicas = Field(default_factory=lambda: [ReplicaGroupConfig()])
    decode: Replicas = Field(default_factory=lambda: [ReplicaGroupConfig()])
    link: LinkConfig = LinkConfig()

    @field_validator(
        "prefill", "decode", mode="before", json_schema_input_type=int | list[ReplicaGroupConfig]
    )
    @classmethod
    def _count(cls, value: Any) -> Any:
        return _as_groups(value)

    @field_validator("prefill", "decode")
    @classmethod
    def _not_empty(cls, value: Replicas) -> Replicas:
        if not value:
            raise ValueError("must list at least one replica group")
        return value


class FleetConfig(BaseModel):
    """Replicas behind a router, optionally split into prefill and decode replicas."""

    model_config = _STRICT
    replicas: Replicas | None = None
    router: RouterConfig = RouterConfig()
    disaggregation: DisaggregationConfig | None = None
    #: Price of one GPU-hour in US dollars, for cost answers (``--price-per-gpu-hour`` wins).
    price_per_gpu_hour: float | None = Field(default=None, gt=0, le=10_000.0)

    @field_validator("router", mode="before", json_schema_input_type=str | RouterConfig)
    @classmethod
    def _router_name(cls, value: Any) -> Any:
        return {"policy": value} if isinstance(value, str) else value

    @field_validator(
        "replicas", mode="before", json_schema_input_type=int | list[ReplicaGroupConfig] | None
    )
    @classmethod
    def _count(cls, value: Any) -> Any:
        return _as_groups(value)

    @field_validator("replicas")
    @classmethod
    def _not_empty(cls, value: Replicas | None) -> Replicas | None:
        if value is not None and not value:
            raise ValueError("must list at least one replica group")
        return value

    @model_validator(mode="after")
    def _one_shape(self) -> FleetConfig:
        if self.replicas is not None and self.disaggregation is not None:
            raise ValueError("give either replicas or disaggregation, not both")
        if self.replicas is None and self.disaggregation is None:
            raise ValueError("give replicas (a count or groups) or disaggregation")
        return self


def num_replicas(groups: Replicas) -> int:
    """How many replicas the groups hold."""
    return sum(group.count for group in groups)
