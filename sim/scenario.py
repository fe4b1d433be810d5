"""The scenario file: one validated schema that holds every default.

``load_scenario`` reads YAML safely, applies ``--set key.path=value`` overrides, and validates the
whole document before any object is built. Every problem is reported at once, each as
``key.path: what is wrong, got VALUE``; unknown keys are errors, never ignored.
"""

from __future__ import annotations

import copy
import difflib
import types
import typing
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from sim.catalogue import ModelSpec, gpu_names
from sim.engine.presets import aliases, known_names, preset_names
from sim.errors import ScenarioError
from sim.fleet.config import FleetConfig
from sim.inputs import SCHEMA_CONFIG, InputError, load_yaml, read_text
from sim.model_names import catalogue_model
from sim.speculation import (
    CHAIN_TAG,
    METHODS,
    TREE_TAG,
    UNKNOWN_METHOD,
    SpeculationConfig,
    no_speculation,
)
from sim.workload import WorkloadConfig
from sim.workload.config import MAX_REQUESTS, MAX_TOKENS

_STRICT = SCHEMA_CONFIG

#: Host overheads (per step, sequence, layer, token; front-end terms) above one second are refused:
#: the presets and fits hold 1e-6 to 1e-2 s (sim/data/host_costs.yaml), so a second is a unit
#: mistake, and 1e308 s would make every duration infinite.
MAX_OVERHEAD_S = 1.0
#: vLLM's default max_num_seqs is in the hundreds; 65,536 sequences in one batch is no engine.
MAX_BATCH_SEQS = 65_536
#: vLLM's KV block sizes are 1 to 128 tokens; 4,096 leaves room for any engine's paging.
MAX_BLOCK_SIZE = 4096
#: A latency bound above a day (in ms) is not a serving SLO.
MAX_LATENCY_MS = 86_400_000.0
SLO_METRICS = ("ttft", "tpot", "itl", "e2e_latency")
SLO_STATS = ("mean", "p50", "p90", "p99")


class HardwareConfig(BaseModel):
    """The deployment: which GPU, how many per node (the tensor-parallel degree by default),
    and, for large MoE models, how many nodes and how they are split (sim/parallel.py):
    ``tensor_parallel`` GPUs per attention group (within a node), the rest of the GPUs as
    data-parallel attention groups, and ``expert_parallel`` ranks for the MoE layers;
    ``pipeline_parallel`` stages of whole nodes, each holding a share of the layers
    (sim/pipeline.py)."""

    model_config = _STRICT
    gpu: str = "h100-sxm"
    num_gpus: int = Field(default=1, ge=1, le=8)
    num_nodes: int = Field(default=1, ge=1, le=16)
    tensor_parallel: int | None = Field(default=None, ge=1, le=8)
    expert_parallel: int = Field(default=1, ge=1, le=128)
    pipeline_parallel: int = Field(default=1, ge=1, le=16)

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
    ``int8`` (W8A8), ``int4-awq``/``int4-gptq`` (weight-only), ``mxfp4``, ``nvfp4``: their bytes
    per weight and tensor datatype are in :mod:`sim.precision`.
    """

    model_config = _STRICT
    weights: Literal[
        "bf16", "fp8", "int8", "int4-awq", "int4-gptq", "mxfp4", "nvfp4", "q8_0", "q4_0"
    ] = "bf16"
    kv_cache: Literal["bf16", "fp8"] = "bf16"


class FrontendConfig(BaseModel):
    """The serving front end (sim/engine/frontend.py); unset values take the preset's."""

    model_config = _STRICT
    enabled: bool | None = None
    ingress_fixed_s: float | None = Field(default=None, ge=0, le=MAX_OVERHEAD_S)
    ingress_per_prompt_token_s: float | None = Field(default=None, ge=0, le=MAX_OVERHEAD_S)
    egress_per_chunk_s: float | None = Field(default=None, ge=0, le=MAX_OVERHEAD_S)


class EngineConfig(BaseModel):
    """Engine preset and scheduling limits; unset limits take the preset's defaults."""

    model_config = _STRICT
    preset: str = Field(default="vllm-v1", json_schema_extra={"enum": list(known_names())})
    max_num_seqs: int | None = Field(default=None, ge=1, le=MAX_BATCH_SEQS)
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    block_size: int | None = Field(default=None, ge=1, le=MAX_BLOCK_SIZE)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    chunked_prefill: bool | None = None
    kv_rollback: Literal["in_place", "scratch"] | None = None
    step_overhead_s: float | None = Field(default=None, ge=0, le=MAX_OVERHEAD_S)
    per_sequence_overhead_s: float | None = Field(default=None, ge=0, le=MAX_OVERHEAD_S)
    per_layer_overhead_s: float | None = Field(default=None, ge=0, le=MAX_OVERHEAD_S)
    per_token_overhead_s: float | None = Field(default=None, ge=0, le=MAX_OVERHEAD_S)
    enable_prefix_caching: bool | None = None
    mixed_batches: bool | None = None
    max_prefills_per_step: int | None = Field(default=None, ge=0, le=MAX_BATCH_SEQS)
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
    ``vllm bench serve --goodput ttft:500 tpot:50`` does. ``percentile_metrics`` and
    ``metric_percentiles`` choose the percentile block of the run folder's ``vllm_bench.json``,
    as ``--percentile-metrics`` and ``--metric-percentiles`` do for the benchmark (its defaults:
    ``ttft, tpot, itl`` and ``99``).
    """

    model_config = _STRICT
    warmup_requests: int = Field(default=0, ge=0, le=MAX_REQUESTS)
    window: Literal["full", "steady"] = "full"
    warmup_fraction: float | None = Field(default=None, ge=0, lt=0.5)
    cooldown_fraction: float | None = Field(default=None, ge=0, lt=0.5)
    goodput: dict[str, float] | None = None
    percentile_metrics: list[Literal["ttft", "tpot", "itl", "e2el"]] = Field(
        default=["ttft", "tpot", "itl"], min_length=1
    )
    metric_percentiles: list[float] = Field(default=[99.0], min_length=1)

    @field_validator("metric_percentiles")
    @classmethod
    def _percentiles_inside(cls, value: list[float]) -> list[float]:
        outside = [p for p in value if not 0 < p < 100]
        if outside:
            raise ValueError(f"each percentile must be in (0, 100); {outside[0]:g} is not")
        return value

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
                if not 0 < bound <= MAX_LATENCY_MS:
                    raise ValueError(
                        f"goodput {key} must be > 0 and <= {MAX_LATENCY_MS:g} ms (a day), "
                        f"got {bound}"
                    )
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
        if self.fleet is not None and self.speculation.policy is not None:
            # A policy's state is one node's (its batch, its sequences' acceptance).
            raise ValueError("speculation.policy: adaptive policies run on one node, not a fleet")
        return self


# --- loading ---------------------------------------------------------------------------------
#: Union-member tags pydantic puts in error locations; they are not keys a user wrote.
_UNION_TAGS = {
    CHAIN_TAG,
    TREE_TAG,
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


#: Units read from a key's name (STYLE.md: names carry units), longest suffix first.
_UNIT_SUFFIXES = (
    ("_bytes_per_s", "bytes/s"),
    ("_per_s", "/s"),
    ("_ms", "ms"),
    ("_s", "s"),
    ("_tokens", "tokens"),
)
_BOUND_WORDS = {
    "greater_than": ">",
    "greater_than_equal": ">=",
    "less_than": "<",
    "less_than_equal": "<=",
}


def _unit(path: str) -> str:
    """The unit of the value at ``path``: from its own name, or the length it belongs to."""
    parts = path.split(".")
    for part in reversed(parts):
        for suffix, unit in _UNIT_SUFFIXES:
            if part.endswith(suffix):
                return unit
        if part not in ("value", "low", "high", "mean"):
            break
    return ""


def _annotation_models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through Optional, unions and Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    models: list[type[BaseModel]] = []
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, typing.Annotated):
        for arg in typing.get_args(annotation):
            models.extend(_annotation_models(arg))
    return models


def _keys_at(loc: tuple[int | str, ...]) -> list[str]:
    """The keys the schema allows in the mapping at ``loc`` (a pydantic error location)."""
    models: list[type[BaseModel]] = [Scenario]
    for part in loc:
        if not isinstance(part, str):
            continue
        inner = [m for m in models if part in m.model_fields]
        if inner:
            models = [
                nested
                for m in inner
                for nested in _annotation_models(m.model_fields[part].annotation)
            ]
    return sorted({key for m in models for key in m.model_fields})


def _message(error: Any, path: str) -> str:
    """One error as ``what is wrong, got VALUE``, with the unit and a close key where they help."""
    kind = error["type"]
    value = error.get("input")
    shown = repr(value) if not isinstance(value, dict) else "a mapping"
    if kind in _BOUND_WORDS:
        unit = _unit(path)
        bound = next(iter(error["ctx"].values()))
        unit_text = f" {unit}" if unit else ""
        return f"must be {_BOUND_WORDS[kind]} {bound:g}{unit_text}, got {shown}{unit_text}"
    if kind == "extra_forbidden":
        key = str(error["loc"][-1])
        close = difflib.get_close_matches(key, _keys_at(error["loc"][:-1]), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown key{hint}, got {shown}"
    if kind in ("int_type", "float_type", "bool_type", "string_type") and isinstance(value, bool):
        wanted = {"int_type": "a whole number", "float_type": "a number"}.get(kind, "text")
        return f"must be {wanted}, got {shown} (YAML reads yes/no/on/off/true/false as booleans)"
    message = error["msg"].removeprefix("Value error, ")
    # A model-level check names its own values; the whole mapping adds nothing.
    return message if isinstance(value, dict) else f"{message}, got {shown}"


def _format_errors(exc: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid scenario"]
    for error in exc.errors():
        path = _key_path(error["loc"])
        if error["type"] == UNKNOWN_METHOD:
            # The union picks the settings model by method: say what the method may be.
            value = error["input"]
            if not isinstance(value, dict):
                lines.append(f"  {path}: Input should be a mapping, got {value!r}")
                continue
            known = ", ".join(repr(m) for m in METHODS[:-1]) + f" or {METHODS[-1]!r}"
            got = value.get("method")
            lines.append(f"  {path}.method: Input should be {known}, got {got!r}")
            continue
        lines.append(f"  {path or '(top level)'}: {_message(error, path)}")
    return "\n".join(lines)


def check_overrides(overrides: list[str] | tuple[str, ...], scenario: Path | None = None) -> None:
    """Check that every ``--set`` is ``KEY.PATH=VALUE`` before any file is read.

    ``--set key 8`` gives the override ``key`` and the scenario ``8``: say so rather than
    complain that the scenario file ``8`` does not exist.
    Raise ScenarioError naming the first malformed override.
    """
    for assignment in overrides:
        if "=" not in assignment:
            hint = ""
            if scenario is not None and not scenario.exists():
                hint = f" (write --set {assignment}={scenario}, with '=' and no space)"
            raise ScenarioError(f"--set {assignment!r}: expected KEY.PATH=VALUE{hint}")
        path = assignment.split("=", 1)[0]
        if not [k for k in path.strip().split(".") if k]:
            raise ScenarioError(f"--set {assignment!r}: empty key path")


def apply_override(document: dict[str, Any], assignment: str) -> None:
    """Apply one ``key.path=value`` override in place; the value is read as bounded YAML.

    Raise ScenarioError if the assignment has no ``=``, its value is not valid YAML, or it walks
    through a non-mapping.
    """
    check_overrides([assignment])
    path, raw = assignment.split("=", 1)
    keys = [k for k in path.strip().split(".") if k]
    try:
        value = load_yaml(raw, f"--set {path}")
    except InputError as exc:
        raise ScenarioError(str(exc)) from None
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

    Raise ScenarioError if the file is missing, is not UTF-8 text, is not bounded YAML (too deep,
    an alias bomb, a repeated key), is empty, or is not a mapping.
    """
    if path is None:
        text, base_dir, source = default_scenario_text(), Path.cwd(), "default scenario"
    else:
        if not path.is_file():
            what = "a folder, not a scenario file" if path.is_dir() else "no such scenario file"
            raise ScenarioError(f"{path}: {what}")
        try:
            text = read_text(path)
        except InputError as exc:
            raise ScenarioError(str(exc)) from None
        base_dir, source = path.resolve().parent, str(path)
    try:
        document = load_yaml(text, source)
    except InputError as exc:
        raise ScenarioError(str(exc)) from None
    if document is None or document == {}:
        raise ScenarioError(
            f"{source}: the scenario is empty; give at least one key (omit the file to run the "
            "default scenario; `specsim schema` lists every key)"
        )
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


def document_with_overrides(
    path: Path | None, overrides: list[str] | tuple[str, ...] = ()
) -> tuple[dict[str, Any], Path, str]:
    """The scenario mapping with ``--set`` overrides applied (not yet validated), its folder and
    its name. Raise ScenarioError if an override or the file is invalid."""
    check_overrides(overrides, path)
    document, base_dir, source = read_document(path)
    document = copy.deepcopy(document)
    for assignment in overrides:
        apply_override(document, assignment)
    return document, base_dir, source


def load_scenario(
    path: Path | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> tuple[Scenario, Path]:
    """Load, override and validate a scenario; return it with the folder its paths are relative to.

    Raise ScenarioError on any problem, naming the key path and the value.
    """
    document, base_dir, source = document_with_overrides(path, overrides)
    return validate_document(document, source), base_dir


def scenario_json_schema() -> dict[str, Any]:
    """The JSON Schema of a scenario file, for editors' completion and validation."""
    schema = Scenario.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "specsim scenario"
    return schema
