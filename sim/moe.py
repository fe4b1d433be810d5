"""The grouped-GEMM (fused-MoE) cost of a model's expert layers on any catalogue GPU.

A fused-MoE kernel is not a dense GEMM: each touched expert is a small GEMM over the few tokens
routed to it, with its own tile overheads, so it reaches a lower fraction of peak and pays a fixed
time per layer (vLLM ``fused_experts``; measured on the H100 in ``sim/data/kernels/``,
docs/kernels.md). Where the GPU has its own fused-MoE fit for the weights' datatype, that fit is
used (:func:`sim.moe_kernel.moe_layer`). Where it has none, the H100 SXM fit of the same datatype is
carried over as fractions of this GPU's own peaks (bandwidth and tensor throughput) with the same
fixed time: the kernel's efficiency, not its absolute speed, is what transfers (the rule
``sim/data/hardware_efficiency.yaml`` uses for dense GEMMs). Formats without a measured fused-MoE
kernel (native FP4) keep the dense roofline; weight-only formats (int4 AWQ/GPTQ, MXFP4 on GPUs
without FP4 tensor cores) dequantise inside a bf16 grouped GEMM (Marlin/Triton MoE kernels) and
take the bf16 fit with their own bytes.

FP8 checkpoints scaled per 128×128 block (DeepSeek-V3, Qwen3-FP8, GLM-4.5-FP8: config.json
``weight_block_size``) run the block-scaled kernel (``fp8_block``), the others the per-tensor one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sim.catalogue import BF16_BYTES, GPU, Model
from sim.errors import CatalogueError
from sim.moe_kernel import MoeLayer, moe_efficiency, moe_layer
from sim.precision import compute_dtype

#: The GPU whose fused-MoE fits are carried to GPUs without their own.
REFERENCE_GPU = "h100-sxm"


def moe_kernel_dtype(model: Model, gpu: GPU) -> str | None:
    """The fused-MoE kernel table that prices ``model``'s experts on ``gpu``, or None.

    FP8 has its own tables; bf16, and every format that runs weight-only at bf16 on this GPU
    (int4 AWQ/GPTQ, MXFP4 without FP4 tensor cores), the bf16 kernel's, whose bytes term is
    then scaled to the format's bytes per weight. Native FP4 has no measured kernel.
    """
    precision = model.weight_precision
    if precision == "fp8":
        return "fp8_block" if model.spec.fp8_weight_block_size else "fp8"
    if compute_dtype(precision, gpu) == "bf16":
        return "bf16"
    return None


def grouped_gemm_layer(model: Model, gpu: GPU, tp: int = 1, ep: int = 1) -> MoeLayer | None:
    """One MoE layer of ``model`` split ``tp`` × ``ep`` ways on ``gpu``, priced by a measured
    fused-MoE fit (the GPU's own, else the reference GPU's as fractions of peak); None when no
    fit covers the weights' format."""
    dtype = moe_kernel_dtype(model, gpu)
    if dtype is None or model.spec.num_experts == 1:
        return None
    layer = _fused_moe(model, gpu, dtype, tp, ep)
    if layer is None or dtype != "bf16" or model.weight_precision == "bf16":
        return layer
    # A weight-only format streams its own bytes through the bf16 kernel.
    scale = model.weight_bytes_per_param / BF16_BYTES
    return replace(layer, weight_s_per_expert=layer.weight_s_per_expert * scale)


def _fused_moe(model: Model, gpu: GPU, dtype: str, tp: int, ep: int) -> MoeLayer | None:
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
