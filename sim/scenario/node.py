"""The scenario's node sections: the hardware (GPU, count, parallel layout), the storage precision,
the front end and the engine's scheduling and memory settings, with the bounds that catch a unit
mistake.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from sim.catalogue import gpu_names
from sim.engine.presets import aliases, known_names, preset_names
from sim.inputs import SCHEMA_CONFIG
from sim.workload.config import MAX_TOKENS

_STRICT = SCHEMA_CONFIG


#: Host overheads (per step, sequence, layer, token; front-end terms) above one second are refused:
#: the presets and fits hold 1e-6 to 1e-2 s (sim/data/host_costs.yaml), so a second is a unit
#: mistake, and 1e308 s would make every duration infinite.
MAX_OVERHEAD_S = 1.0
#: vLLM's default max_num_seqs is in the hundreds; 65,536 sequences in one batch is no engine.
MAX_BATCH_SEQS = 65_536
#: vLLM's KV block sizes are 1 to 128 tokens; 4,096 leaves room for any engine's paging.
MAX_BLOCK_SIZE = 4096


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
        "bf16",
        "fp8",
        "int8",
        "int4-awq",
        "int4-gptq",
        "mxfp4",
        "nvfp4",
        "q8_0",
        "q6_k",
        "q5_0",
        "q4_0",
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
    async_scheduling: bool | None = None
    mixed_batches: bool | None = None
    max_prefills_per_step: int | None = Field(default=None, ge=0, le=MAX_BATCH_SEQS)
    profile: str | None = None
    moe_kernel: Literal["triton", "deepgemm", "matmul_ogs"] | None = None
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
