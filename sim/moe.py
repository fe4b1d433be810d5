"""The grouped-GEMM (fused-MoE) cost of a model's expert layers on any catalogue GPU.

A fused-MoE kernel is not a dense GEMM: each touched expert is a small GEMM over the few tokens
routed to it, with its own tile overheads, so it reaches a lower fraction of peak and pays a fixed
time per layer (vLLM ``fused_experts``; measured on the H100 in ``sim/data/kernels/``,
docs/kernels.md). Where the GPU has its own fused-MoE fit for the weights' datatype, that fit is
used (:func:`sim.moe_kernel.moe_layer`). Where it has none, the H100 SXM fit of the same datatype is
carried over as fractions of this GPU's own peaks (bandwidth and tensor throughput) with the same
fixed time: the kernel's efficiency, not its absolute speed, is what transfers (the rule
``sim/data/hardware_efficiency.yaml`` uses for dense GEMMs). Formats without a measured fused-MoE
kernel (native FP4) keep the dense roofline; weight-only formats (int4 AWQ/GPTQ) dequantise inside
a bf16 grouped GEMM (Marlin/Triton MoE kernels) and take the bf16 fit with their own bytes, as do
MXFP4 experts on GPUs without FP4 tensor cores, except under ``engine.moe_kernel: matmul_ogs``
(the default of the SGLang presets on Hopper): triton_kernels' matmul_ogs, priced by that
kernel's own measured fit (``mxfp4_matmul_ogs`` in ``sim/data/moe_kernels.yaml``: the GPU's own
where it measured the kernel, the H200's, else the H100 SXM's fractions of peak) with MXFP4 bytes.

FP8 checkpoints scaled per 128×128 block (DeepSeek-V3, Qwen3-FP8, GLM-4.5-FP8: config.json
``weight_block_size``) run the block-scaled kernel (``fp8_block``), the others the per-tensor one.

``engine.moe_kernel: deepgemm`` prices those block-FP8 experts as vLLM 0.11.1-0.12.0 runs them
on Hopper instead: DeepGEMM's grouped GEMM over vLLM's worst-case padded layout
(:class:`sim.moe_kernel.DeepGemmMoeLayer`); :func:`engine_moe_kernel` says which engine releases
do so by default (``sim/data/moe_kernels.yaml``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sim.catalogue import BF16_BYTES, GPU, Model
from sim.errors import CatalogueError
from sim.moe_kernel import (
    DeepGemmMoeLayer,
    MoeEfficiency,
    MoeLayer,
    deepgemm_layer,
    moe_efficiency,
    moe_kernels_document,
    moe_layer,
)
from sim.precision import compute_dtype

#: The GPU whose fused-MoE fits are carried to GPUs without their own.
REFERENCE_GPU = "h100-sxm"

#: The expert kernels ``engine.moe_kernel`` can name.
MOE_KERNELS = ("triton", "deepgemm", "matmul_ogs")


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


def grouped_gemm_layer(
    model: Model, gpu: GPU, tp: int = 1, ep: int = 1, kernel: str = "triton"
) -> MoeLayer | DeepGemmMoeLayer | None:
    """One MoE layer of ``model`` split ``tp`` × ``ep`` ways on ``gpu``, priced by a measured
    fused-MoE fit (the GPU's own, else the reference GPU's as fractions of peak); None when no
    fit covers the weights' format. ``kernel="deepgemm"`` prices vLLM's DeepGEMM path
    (:class:`sim.moe_kernel.DeepGemmMoeLayer`) with the block-FP8 fit's floor and bandwidth.

    Raise CatalogueError if ``kernel`` is unknown, or is deepgemm for weights that are not
    block-scaled FP8 (:func:`deepgemm_refusal`).
    """
    if kernel not in MOE_KERNELS:
        raise CatalogueError(f"unknown MoE kernel {kernel!r}; known: {', '.join(MOE_KERNELS)}")
    dtype = moe_kernel_dtype(model, gpu)
    if dtype is None or model.spec.num_experts == 1:
        return None
    if kernel == "deepgemm":
        refusal = deepgemm_refusal(model, gpu)
        if refusal:
            raise CatalogueError(refusal)
        fit = _fused_moe(model, gpu, dtype, tp, ep)
        assert fit is not None  # fp8_block is measured on the reference GPU
        return deepgemm_layer(
            gpu.name,
            hidden_size=model.spec.hidden_size,
            inter_size=model.expert_params_per_layer // (3 * model.spec.hidden_size),
            num_experts=model.spec.num_experts,
            topk=model.spec.experts_per_token,
            tp=tp,
            ep=ep,
            efficiency=fit.efficiency,
        )
    ogs = None
    if kernel == "matmul_ogs":
        refusal = matmul_ogs_refusal(model, gpu)
        if refusal:
            raise CatalogueError(refusal)
        ogs = matmul_ogs_efficiency(gpu.name)
    layer = _fused_moe(model, gpu, dtype, tp, ep, ogs)
    if layer is None or dtype != "bf16" or model.weight_precision == "bf16":
        return layer
    # A weight-only format streams its own bytes through the bf16 kernel.
    scale = model.weight_bytes_per_param / BF16_BYTES
    return replace(layer, weight_s_per_expert=layer.weight_s_per_expert * scale)


def matmul_ogs_efficiency(gpu_name: str = REFERENCE_GPU) -> MoeEfficiency:
    """The measured fit of triton_kernels' matmul_ogs with MXFP4 weights on ``gpu_name``: its own
    fit where it measured the kernel (``own_fits``: the H200), else the H100 SXM's, whose fractions
    of peak are carried to the other Hopper GPUs as every fused-MoE fit is."""
    entry = moe_kernels_document()["mxfp4_matmul_ogs"]
    entry = entry.get("own_fits", {}).get(gpu_name, entry)
    return MoeEfficiency(
        float(entry["bandwidth"]),
        float(entry["flops"]),
        float(entry["roofline_p"]),
        float(entry["floor_s"]),
    )


def matmul_ogs_refusal(model: Model, gpu: GPU) -> str:
    """Why ``model``'s experts cannot be priced as matmul_ogs on ``gpu``, or "" if they can: the
    fit is of MXFP4 weights upcast in the kernel, measured on Hopper."""
    if model.spec.num_experts == 1:
        return f"{model.name} has no routed experts"
    if model.weight_precision != "mxfp4":
        return (
            f"matmul_ogs runs MXFP4 experts (precision.weights: mxfp4), {model.name} has "
            f"{model.weight_precision} weights"
        )
    hopper = moe_kernels_document()["mxfp4_matmul_ogs"]["gpus"]
    if gpu.name not in hopper or compute_dtype("mxfp4", gpu) != "bf16":
        return (
            f"matmul_ogs with MXFP4 weights is priced on Hopper GPUs ({', '.join(hopper)}), where "
            f"it was measured; {gpu.name} is not one"
        )
    return ""


def default_moe_kernel(preset: str, model: Model, gpu: GPU) -> str:
    """The expert kernel engine preset ``preset`` runs by default for ``model`` on ``gpu``:
    matmul_ogs for MXFP4 experts on Hopper under a preset listed in ``sim/data/moe_kernels.yaml``
    (``mxfp4_matmul_ogs.presets``: SGLang, whose server picks triton_kernels for gpt-oss there),
    triton otherwise (DeepGEMM releases are set per validation row: :func:`engine_moe_kernel`)."""
    presets = moe_kernels_document()["mxfp4_matmul_ogs"]["presets"]
    if preset in presets and not matmul_ogs_refusal(model, gpu):
        return "matmul_ogs"
    return "triton"


def _fused_moe(
    model: Model,
    gpu: GPU,
    dtype: str,
    tp: int,
    ep: int,
    efficiency: MoeEfficiency | None = None,
) -> MoeLayer | None:
    spec = model.spec
    shape: dict[str, Any] = {
        "hidden_size": spec.hidden_size,
        "inter_size": model.expert_params_per_layer // (3 * spec.hidden_size),
        "num_experts": spec.num_experts,
        "topk": spec.experts_per_token,
        "tp": tp,
        "ep": ep,
    }
    if efficiency is not None:
        return moe_layer(gpu.name, dtype, efficiency=efficiency, **shape)
    try:
        return moe_layer(gpu.name, dtype, **shape)
    except CatalogueError:
        pass
    try:
        # The reference fit's fractions of peak, applied to this GPU's own peaks.
        return moe_layer(gpu.name, dtype, efficiency=moe_efficiency(REFERENCE_GPU, dtype), **shape)
    except CatalogueError:
        return None


def deepgemm_refusal(model: Model, gpu: GPU) -> str:
    """Why ``model``'s experts cannot be priced through DeepGEMM on ``gpu``, or "" if they can:
    the kernel multiplies 128×128 block-scaled FP8 weights, and its throughput is Hopper's."""
    if model.spec.num_experts == 1:
        return f"{model.name} has no routed experts"
    if moe_kernel_dtype(model, gpu) != "fp8_block":
        return (
            f"deepgemm runs block-scaled FP8 experts (config.json weight_block_size), "
            f"{model.name} has {model.weight_precision} weights"
            + ("" if model.weight_precision != "fp8" else " scaled per tensor")
        )
    hopper = moe_kernels_document()["deepgemm"]["gpus"]
    if gpu.name not in hopper:
        return (
            f"deepgemm is priced on Hopper GPUs ({', '.join(hopper)}), whose FP8 peak its "
            f"published throughput was measured at; {gpu.name} is not one"
        )
    return ""


def engine_moe_kernel(
    engine: str, gpu: GPU, model: Model, moe_tp: int, expert_parallel: int = 1
) -> str:
    """The expert kernel an engine release named ``engine`` ("vllm 0.12.0") runs by default for
    ``model`` on ``gpu`` with ``moe_tp``-way split experts (``sim/data/moe_kernels.yaml``):
    deepgemm for vLLM 0.11.1-0.12.0 on Hopper with block-FP8 experts (0.12.0: MoE TP below 8),
    where every decode batch computes DeepGEMM's whole worst-case layout; matmul_ogs for MXFP4
    experts on Hopper without expert parallelism under the vLLM releases read from their wheel
    (``mxfp4_matmul_ogs.vllm_releases``); triton otherwise, including 0.13-0.14, whose DeepGEMM
    skips the unused layout (not priced here)."""
    rule = moe_kernels_document()["vllm_deepgemm_decode"]
    name, _, version = engine.strip().lower().partition(" ")
    ogs_releases = moe_kernels_document()["mxfp4_matmul_ogs"].get("vllm_releases", [])
    if (
        name == rule["engine"]
        and version in ogs_releases
        and expert_parallel == 1
        and not matmul_ogs_refusal(model, gpu)
    ):
        return "matmul_ogs"
    if name != rule["engine"] or not version or deepgemm_refusal(model, gpu):
        return "triton"
    try:
        release = _release(version)
    except ValueError:
        return "triton"
    for span in rule["releases"]:
        inside = _release(span["from_version"]) <= release <= _release(span["to_version"])
        limit = span["max_moe_tp"]
        if inside and (limit is None or moe_tp <= int(limit)):
            return "deepgemm"
    return "triton"


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:3])
