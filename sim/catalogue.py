"""The hardware and model catalogue: sourced constants and the quantities derived from them.

The numbers live in ``sim/data/catalogue.yaml``, each entry with its source. This module reads
them into frozen value objects (:class:`~sim.gpu.GPU`; :class:`~sim.model_spec.Model`, which
derives what the cost model needs: parameter counts, bytes read per step, KV bytes per token) and
looks them up by name.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml
from pydantic import ValidationError

from sim.cpu_node import cpu_entry
from sim.errors import CatalogueError
from sim.gpu import GPU
from sim.model_spec import BF16_BYTES, Model, ModelSpec

__all__ = [
    "BF16_BYTES",
    "GPU",
    "Model",
    "ModelSpec",
    "get_gpu",
    "get_model",
    "gpu_names",
    "model_names",
]


def _load_yaml() -> dict[str, Any]:
    text = resources.files("sim").joinpath("data/catalogue.yaml").read_text(encoding="utf-8")
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _gpu(name: str, entry: dict[str, Any]) -> GPU:
    if entry.get("kind") == "cpu":
        return cpu_entry(name, entry)
    return GPU(
        name=name,
        display_name=entry["display_name"],
        memory_bytes=float(entry["memory_bytes"]),
        hbm_bandwidth_bytes_per_s=float(entry["hbm_bandwidth_bytes_per_s"]),
        bf16_dense_flops=float(entry["bf16_dense_flops"]),
        fp8_dense_flops=_optional_float(entry["fp8_dense_flops"]),
        interconnect_bus_bandwidth_bytes_per_s=float(
            entry["interconnect_bus_bandwidth_bytes_per_s"]
        ),
        allreduce_latency_s=tuple(
            sorted((int(k), float(v)) for k, v in entry["allreduce_latency_s"].items())
        ),
        source=tuple(entry["source"]),
        int8_dense_flops=_optional_float(entry.get("int8_dense_flops")),
        fp4_dense_flops=_optional_float(entry.get("fp4_dense_flops")),
        internode_bandwidth_bytes_per_s=float(entry["internode_bandwidth_bytes_per_s"]),
        internode_latency_s=float(entry["internode_latency_s"]),
        reported_memory_bytes=_optional_float(entry.get("reported_memory_bytes")),
    )


@cache
def _catalogue() -> tuple[dict[str, GPU], dict[str, Model]]:
    data = _load_yaml()
    gpus: dict[str, GPU] = {}
    for name, entry in data["gpus"].items():
        gpus[name] = _gpu(name, entry)
    models: dict[str, Model] = {}
    for name, entry in data["models"].items():
        spec = ModelSpec(**{**entry, "name": name})
        models[name] = Model.from_spec(spec, name)
    return gpus, models


def gpu_names() -> list[str]:
    """The catalogue's GPU names."""
    return sorted(_catalogue()[0])


def model_names() -> list[str]:
    """The catalogue's model names."""
    return sorted(_catalogue()[1])


def get_gpu(name: str) -> GPU:
    """The catalogue GPU called ``name``.

    Raise CatalogueError naming the known GPUs if there is none.
    """
    gpus = _catalogue()[0]
    if name not in gpus:
        raise CatalogueError(f"unknown GPU {name!r}; known: {', '.join(sorted(gpus))}")
    return gpus[name]


def get_model(name_or_spec: str | dict[str, Any] | ModelSpec) -> Model:
    """A catalogue model by name, or a model given inline as an architecture mapping.

    Raise CatalogueError naming the known models, or the bad key of an inline mapping.
    """
    if isinstance(name_or_spec, ModelSpec):
        return Model.from_spec(name_or_spec, name_or_spec.name)
    if isinstance(name_or_spec, dict):
        try:
            spec = ModelSpec(**name_or_spec)
        except ValidationError as exc:
            first = exc.errors()[0]
            path = ".".join(str(p) for p in first["loc"])
            raise CatalogueError(f"model.{path}: {first['msg']}") from None
        return Model.from_spec(spec, spec.name)
    models = _catalogue()[1]
    if name_or_spec not in models:
        raise CatalogueError(f"unknown model {name_or_spec!r}; known: {', '.join(sorted(models))}")
    return models[name_or_spec]
