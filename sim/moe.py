"""The grouped-GEMM (fused-MoE) cost of a model's expert layers on any catalogue GPU.

A fused-MoE kernel is not a dense GEMM: each touched expert is a small GEMM over the few tokens
routed to it, with its own tile overheads, so it reaches a lower fraction of peak and pays a fixed
time per layer (vLLM ``fused_experts``; measured on the H100 in ``sim/data/kernels/``,
docs/kernels.md). Where the GPU has its own fused-MoE fit for the weights' datatype, that fit is
used (:func:`sim.kernels.moe_layer`). Where it has none, the H100 SXM fit of the same datatype is
carried over as fractions of this GPU's own peaks (bandwidth and tensor throughput) with the same
fixed time: the kernel's efficiency, not its absolute speed, is what transfers (the rule
``sim/data/hardware_efficiency.yaml`` uses for dense GEMMs). Formats without a measured fused-MoE
kernel (weight-only int4, MXFP4, NVFP4, bf16 off the H100) keep the dense roofline.

FP8 checkpoints scaled per 128×128 block (DeepSeek-V3, Qwen3-FP8, GLM-4.5-FP8: config.json
``weight_block_size``) run the block-scaled kernel (``fp8_block``), the others the per-tensor one.
"""

from __future__ import annotations

from typing import Any

from sim.catalogue import GPU, Model
from sim.errors import CatalogueError
from sim.kernels import MoeLayer, moe_efficiency, moe_layer

#: The GPU whose fused-MoE fits are carried to GPUs without their own.
REFERENCE_GPU = "h100-sxm"


def moe_kernel_dtype(model: Model) -> str | None:
    """The fused-MoE kernel table that prices ``model``'s experts, or None if none applies."""
    precision = model.weight_precision
    if precision == "fp8":
        return "fp8_block" if model.spec.fp8_weight_block_size else "fp8"
    if precision == "bf16":
        return "bf16"
    return None


def grouped_gemm_layer(model: Model, gpu: GPU, tp: int = 1, ep: int = 1) -> MoeLayer | None:
    """One MoE layer of ``model`` split ``tp`` × ``ep`` ways on ``gpu``, priced by a measured
    fused-MoE fit (the GPU's own, else the reference GPU's as fractions of peak); None when no
    fit covers the weights' format."""
    dtype = moe_kernel_dtype(model)
    if dtype is None or model.spec.num_experts == 1:
        return None
    spec = model.spec
    shape: dict[str, Any] = {
        "hidden_size": spec.hidden_size,
        "inter_size": model.expert_params_per_layer // (3 * spec.hidden_size),
        "num_experts": spec.num_experts,
        "topk": spec.experts_per_token,
        "tp": tp,
        "ep": ep,
    }
    try:
        return moe_layer(gpu.name, dtype, **shape)
    except CatalogueError:
        pass
    try:
        # The reference fit's fractions of peak, applied to this GPU's own peaks.
        return moe_layer(gpu.name, dtype, efficiency=moe_efficiency(REFERENCE_GPU, dtype), **shape)
    except CatalogueError:
        return None
