"""Engine presets: what distinguishes vLLM V1 from SGLang for the simulator.

Each preset carries the engine's fixed per-step overhead (calibrated, with the measurement it was
calibrated on) and its scheduling defaults. A scenario's ``engine`` keys override any of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from sim.errors import ScenarioError

#: Preset fields a scenario's ``engine`` section can set (the rest describe the preset itself).
SETTINGS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "block_size",
    "gpu_memory_utilization",
    "chunked_prefill",
    "kv_rollback",
    "step_overhead_s",
    "per_sequence_overhead_s",
    "enable_prefix_caching",
)


@dataclass(frozen=True)
class EnginePreset:
    """Defaults and overheads of one serving engine."""

    name: str
    display_name: str
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    gpu_memory_utilization: float
    chunked_prefill: bool
    kv_rollback: str
    step_overhead_s: float
    per_sequence_overhead_s: float
    reserved_memory_bytes: float
    calibration: dict[str, Any]
    enable_prefix_caching: bool = True


@cache
def _presets() -> dict[str, EnginePreset]:
    text = resources.files("sim").joinpath("data/engine_presets.yaml").read_text("utf-8")
    data = yaml.safe_load(text)
    out: dict[str, EnginePreset] = {}
    for name, entry in data.items():
        out[name] = EnginePreset(
            name=name,
            display_name=entry["display_name"],
            max_num_seqs=int(entry["max_num_seqs"]),
            max_num_batched_tokens=int(entry["max_num_batched_tokens"]),
            block_size=int(entry["block_size"]),
            gpu_memory_utilization=float(entry["gpu_memory_utilization"]),
            chunked_prefill=bool(entry["chunked_prefill"]),
            kv_rollback=str(entry["kv_rollback"]),
            step_overhead_s=float(entry["step_overhead_s"]),
            per_sequence_overhead_s=float(entry["per_sequence_overhead_s"]),
            reserved_memory_bytes=float(entry["reserved_memory_bytes"]),
            calibration=dict(entry["calibration"]),
            enable_prefix_caching=bool(entry["enable_prefix_caching"]),
        )
    return out


def get_preset(name: str) -> EnginePreset:
    """The preset called ``name``.

    Raise ScenarioError naming the known presets if there is none.
    """
    presets = _presets()
    if name not in presets:
        raise ScenarioError(f"engine.preset: unknown preset {name!r}; known: {', '.join(presets)}")
    return presets[name]
