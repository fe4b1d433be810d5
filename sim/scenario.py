"""The scenario file: one validated schema that holds every default.

``load_scenario`` reads YAML safely, applies ``--set key.path=value`` overrides, and validates the
whole document before any object is built. Every problem is reported at once, each as
``key.path: what is wrong, got VALUE``; unknown keys are errors, never ignored.
"""

from __future__ import annotations

import copy
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sim.acceptance.config import AcceptanceConfig
from sim.catalogue import ModelSpec, gpu_names, model_names
from sim.engine.presets import aliases, known_names, preset_names
from sim.errors import ScenarioError
from sim.fleet.config import FleetConfig
from sim.workload import WorkloadConfig

_STRICT = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

#: Drafting strategies a scenario can name (``speculation.method``).
METHODS = (
    "none",
    "draft_model",
    "ngram",
    "medusa",
    "eagle",
    "eagle2",
    "eagle3",
    "mtp",
    "lookahead",
)
SLO_METRICS = ("ttft", "tpot", "itl", "e2e_latency")
SLO_STATS = ("mean", "p50", "p90", "p99")


class HardwareConfig(BaseModel):
    """The node: which GPU, and how many (the tensor-parallel degree)."""

    model_config = _STRICT
    gpu: str = "h100-sxm"
    num_gpus: int = Field(default=1, ge=1, le=8)

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, value: str) -> str:
        if value not in gpu_names():
            raise ValueError(f"unknown GPU; known: {', '.join(gpu_names())}")
        return value


class PrecisionConfig(BaseModel):
    """Storage precision of the target's linear-layer weights and of its KV cache.

    ``fp8`` weights: an FP8 checkpoint (vLLM ``--quantization fp8`` or an FP8 model): half the
    bytes per step and the GPU's FP8 tensor throughput for the decoder's GEMMs; ``fp8`` KV cache
    (vLLM ``--kv-cache-dtype fp8``): half the KV bytes read and twice the tokens per block pool.
    """

    model_config = _STRICT
    weights: Literal["bf16", "fp8"] = "bf16"
    kv_cache: Literal["bf16", "fp8"] = "bf16"


class FrontendConfig(BaseModel):
    """The serving front end (sim/engine/frontend.py); unset values take the preset's."""

    model_config = _STRICT
    enabled: bool | None = None
    ingress_fixed_s: float | None = Field(default=None, ge=0)
    ingress_per_prompt_token_s: float | None = Field(default=None, ge=0)
    egress_per_chunk_s: float | None = Field(default=None, ge=0)


class EngineConfig(BaseModel):
    """Engine preset and scheduling limits; unset limits take the preset's defaults."""

    model_config = _STRICT
    preset: str = Field(default="vllm-v1", json_schema_extra={"enum": list(known_names())})
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    block_size: int | None = Field(default=None, ge=1)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    chunked_prefill: bool | None = None
    kv_rollback: Literal["in_place", "scratch"] | None = None
    step_overhead_s: float | None = Field(default=None, ge=0)
    per_sequence_overhead_s: float | None = Field(default=None, ge=0)
    per_layer_overhead_s: float | None = Field(default=None, ge=0)
    per_token_overhead_s: float | None = Field(default=None, ge=0)
    enable_prefix_caching: bool | None = None
    mixed_batches: bool | None = None
    max_prefills_per_step: int | None = Field(default=None, ge=0)
    profile: str | None = None
    fast_forward: bool = True
    frontend: FrontendConfig = FrontendConfig()

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, value: str) -> str:
        if value not in known_names():
            described = ", ".join(f"{alias} (= {real})" for alias, real in aliases().items())
            raise ValueError(
                f"unknown preset; presets: {', '.join(preset_names())}; aliases: {described}"
            )
        return value


class TreeConfig(BaseModel):
    """A draft tree: a static shape (children per node at each depth) or an EAGLE-2 dynamic tree."""

    model_config = _STRICT
    shape: list[int] | None = None
    topk: int | None = Field(default=None, ge=1)
    depth: int | None = Field(default=None, ge=1)
    num_draft_tokens: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _one_form(self) -> TreeConfig:
        dynamic = (self.topk, self.depth, self.num_draft_tokens)
        if self.shape is not None:
            if any(v is not None for v in dynamic):
                raise ValueError("give either shape or topk/depth/num_draft_tokens, not both")
            if not self.shape or any(w < 1 for w in self.shape):
                raise ValueError("shape must be a non-empty list of widths >= 1")
        elif any(v is None for v in dynamic):
            raise ValueError("a dynamic tree needs topk, depth and num_draft_tokens")
        return self


class PolicyConfig(BaseModel):
    """How many drafts each verify step carries, chosen per step (:mod:`sim.acceptance.policy`):
    ``name`` one of its policies, ``params`` that policy's settings."""

    model_config = _STRICT
    name: str
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        from sim.acceptance.policy import POLICY_NAMES

        if value not in POLICY_NAMES:
            raise ValueError(f"unknown policy {value!r}; known: {', '.join(POLICY_NAMES)}")
        return value


class SpeculationConfig(BaseModel):
    """Which drafting strategy, how many tokens it drafts, and how often they are accepted."""

    model_config = _STRICT
    method: Literal[
        "none", "draft_model", "ngram", "medusa", "eagle", "eagle2", "eagle3", "mtp", "lookahead"
    ] = "none"
    num_speculative_tokens: int = Field(default=3, ge=1, le=32)
    draft_model: str | ModelSpec | None = None
    draft_tp: int | None = Field(default=None, ge=1, le=8)
    tree: TreeConfig | None = None
    acceptance: AcceptanceConfig | None = None
    #: k chosen per step by a policy; absent: ``num_speculative_tokens`` at every step. With a
    #: policy, ``num_speculative_tokens`` is the most drafts a step may carry.
    policy: PolicyConfig | None = None
    #: Run a method the chosen engine does not implement (a what-if study; results say so).
    allow_unsupported: bool = False

    @field_validator("draft_model")
    @classmethod
    def _known_draft(cls, value: str | ModelSpec | None) -> str | ModelSpec | None:
        if isinstance(value, str) and value not in model_names():
            raise ValueError(f"unknown model; known: {', '.join(model_names())}")
        return value


#: Per-request bounds ``vllm bench serve --goodput`` accepts (milliseconds).
GOODPUT_METRICS = ("ttft", "tpot", "e2el")
#: Share of requests a steady window drops at each end unless the scenario says otherwise.
DEFAULT_STEADY_TRIM_FRACTION = 0.1


class MeasurementConfig(BaseModel):
    """The measurement window and the per-request SLO behind goodput; the run always drains.

    ``window: full`` (the default) measures from the first measured arrival to the last finish,
    as ``vllm bench serve`` does. ``window: steady`` drops the first ``warmup_fraction`` and the
    last ``cooldown_fraction`` of requests (by arrival) and measures the requests that arrived
    between them, while arrivals still load the node: warm-up and drain are excluded.
    ``goodput`` bounds each request's TTFT, TPOT and end-to-end latency in ms, as
    ``vllm bench serve --goodput ttft:500 tpot:50`` does.
    """

    model_config = _STRICT
    warmup_requests: int = Field(default=0, ge=0)
    window: Literal["full", "steady"] = "full"
    warmup_fraction: float | None = Field(default=None, ge=0, lt=0.5)
    cooldown_fraction: float | None = Field(default=None, ge=0, lt=0.5)
    goodput: dict[str, float] | None = None

    @model_validator(mode="after")
    def _window_keys(self) -> MeasurementConfig:
        if self.window == "full" and (
            self.warmup_fraction is not None or self.cooldown_fraction is not None
        ):
            raise ValueError("warmup_fraction and cooldown_fraction need window: steady")
        if self.goodput is not None:
            if not self.goodput:
                raise ValueError("goodput needs at least one of ttft, tpot, e2el")
            for key, bound in self.goodput.items():
                if key not in GOODPUT_METRICS:
                    raise ValueError(f"unknown goodput metric {key!r}; use {GOODPUT_METRICS}")
                if not bound > 0:
                    raise ValueError(f"goodput {key} must be > 0 ms, got {bound}")
        return self

    @property
    def trim_fractions(self) -> tuple[float, float]:
        """Shares of requests dropped at the start and the end (0, 0 for the full window)."""
        if self.window == "full":
            return 0.0, 0.0
        return (
            DEFAULT_STEADY_TRIM_FRACTION if self.warmup_fraction is None else self.warmup_fraction,
            DEFAULT_STEADY_TRIM_FRACTION
            if self.cooldown_fraction is None
            else self.cooldown_fraction,
        )


class Scenario(BaseModel):
    """A whole scenario: node, model, engine, speculation, workload, SLO and seed."""

    model_config = _STRICT
    name: str = "default"
    seed: int = Field(default=0, ge=0)
    hardware: HardwareConfig = HardwareConfig()
    model: str | ModelSpec = "llama-3.1-8b"
    precision: PrecisionConfig = PrecisionConfig()
    engine: EngineConfig = EngineConfig()
    speculation: SpeculationConfig = SpeculationConfig()
    workload: WorkloadConfig = WorkloadConfig()
    slo: dict[str, float] | None = None
    measurement: MeasurementConfig = MeasurementConfig()
    #: Replicas of this node behind a router (sim/fleet); absent: one node.
    fleet: FleetConfig | None = None

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str | ModelSpec) -> str | ModelSpec:
        if isinstance(value, str) and value not in model_names():
            raise ValueError(f"unknown model; known: {', '.join(model_names())}")
        return value

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
            if not bound > 0:
                raise ValueError(f"SLO {key} must be > 0, got {bound}")
        return value

    @model_validator(mode="after")
    def _limits(self) -> Scenario:
        if (
            self.workload.num_requests is not None
            and self.measurement.warmup_requests >= self.workload.num_requests
        ):
            raise ValueError("measurement.warmup_requests must be < workload.num_requests")
        if self.fleet is not None and self.speculation.policy is not None:
            # A policy's state is one node's (its batch, its sequences' acceptance).
            raise ValueError("speculation.policy: adaptive policies run on one node, not a fleet")
        return self


# --- loading ---------------------------------------------------------------------------------
#: Union-member tags pydantic puts in error locations; they are not keys a user wrote.
_UNION_TAGS = {
    "poisson",
    "gamma",
    "closed_loop",
    "trace",
    "fixed",
    "uniform",
    "lognormal",
    "empirical",
    "str",
    "int",
    "float",
    "bool",
    "ModelSpec",
}


def _key_path(loc: tuple[int | str, ...]) -> str:
    parts = [str(p) for p in loc]
    kept = [
        p for p in parts if p not in _UNION_TAGS and "[" not in p and not p.startswith("function-")
    ]
    return ".".join(kept)


def _format_errors(exc: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid scenario"]
    for error in exc.errors():
        path = _key_path(error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        value = error.get("input")
        shown = repr(value) if not isinstance(value, dict) else "a mapping"
        lines.append(f"  {path or '(top level)'}: {message}, got {shown}")
    return "\n".join(lines)


def apply_override(document: dict[str, Any], assignment: str) -> None:
    """Apply one ``key.path=value`` override in place; the value is read as YAML.

    Raise ScenarioError if the assignment has no ``=`` or walks through a non-mapping.
    """
    if "=" not in assignment:
        raise ScenarioError(f"--set {assignment!r}: expected KEY.PATH=VALUE")
    path, raw = assignment.split("=", 1)
    keys = [k for k in path.strip().split(".") if k]
    if not keys:
        raise ScenarioError(f"--set {assignment!r}: empty key path")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"--set {path}: value is not valid YAML ({exc})") from None
    node = document
    for depth, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = {}
            node[key] = child
        if not isinstance(child, dict):
            where = ".".join(keys[: depth + 1])
            raise ScenarioError(f"--set {path}: {where} is {child!r}, not a mapping")
        node = child
    node[keys[-1]] = value


def default_scenario_text() -> str:
    """The embedded default scenario (chat on Llama-3.1-8B, one H100 SXM, Poisson arrivals)."""
    return resources.files("sim").joinpath("data/scenarios/default.yaml").read_text("utf-8")


def read_document(path: Path | None) -> tuple[dict[str, Any], Path, str]:
    """Read a scenario file (or the embedded default) into a plain mapping.

    Raise ScenarioError if the file is missing, is not YAML, or is not a mapping.
    """
    if path is None:
        text, base_dir, source = default_scenario_text(), Path.cwd(), "default scenario"
    else:
        if not path.is_file():
            raise ScenarioError(f"{path}: no such scenario file")
        text, base_dir, source = path.read_text(encoding="utf-8"), path.resolve().parent, str(path)
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ScenarioError(f"{source}:{where} not valid YAML: {exc}") from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise ScenarioError(
            f"{source}: a scenario must be a mapping, got {type(document).__name__}"
        )
    return document, base_dir, source


def validate_document(document: dict[str, Any], source: str) -> Scenario:
    """Validate a mapping as a scenario.

    Raise ScenarioError listing every invalid key path and value.
    """
    try:
        return Scenario.model_validate(document)
    except ValidationError as exc:
        raise ScenarioError(_format_errors(exc, source)) from None


def load_scenario(
    path: Path | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> tuple[Scenario, Path]:
    """Load, override and validate a scenario; return it with the folder its paths are relative to.

    Raise ScenarioError on any problem, naming the key path and the value.
    """
    document, base_dir, source = read_document(path)
    document = copy.deepcopy(document)
    for assignment in overrides:
        apply_override(document, assignment)
    return validate_document(document, source), base_dir


def scenario_json_schema() -> dict[str, Any]:
    """The JSON Schema of a scenario file, for editors' completion and validation."""
    schema = Scenario.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "specsim scenario"
    return schema
