"""Storage formats of weights and KV cache, and the tensor throughput each one computes at.

A weight format fixes two things the cost model needs: the bytes one parameter occupies (scale
factors included, since a decode step reads them too) and the tensor-core datatype its GEMMs run
in. A weight-only format (AWQ/GPTQ int4) is dequantised to bf16 inside the GEMM, so it reads 4-bit
weights but computes at the bf16 rate (Marlin kernels, Frantar et al., arXiv:2408.11743); a
W8A8/W-FP8/FP4 format computes in its own datatype on GPUs that have it.

Bits per weight, with their sources:

* ``bf16`` 16; ``fp8`` 8 (per-tensor or 128×128-block fp32 scales: under 0.01 %, omitted);
* ``int8`` 8 (W8A8, per-channel scales: vLLM compressed-tensors, SmoothQuant arXiv:2211.10438);
* ``int4-awq``, ``int4-gptq`` 4 + 16/128 + 4/128 = 4.156: a fp16 scale and a 4-bit zero point per
  group of 128 weights (AutoAWQ / GPTQ checkpoint format, group size 128 as vLLM's defaults);
* ``mxfp4`` 4 + 8/32 = 4.25: FP4 E2M1 elements in blocks of 32 sharing one E8M0 scale (OCP
  Microscaling Formats (MX) Specification v1.0, 2023);
* ``nvfp4`` 4 + 8/16 = 4.5: FP4 E2M1 in blocks of 16 sharing one FP8 E4M3 scale, plus one fp32
  scale per tensor (NVIDIA, "Introducing NVFP4 for efficient and accurate low-precision
  inference", 2025).

* ``q8_0``, ``q4_0`` (llama.cpp GGUF): blocks of 32 weights with one fp16 scale, 8 + 16/32 = 8.5
  and 4 + 16/32 = 4.5 bits (ggml ``block_q8_0``/``block_q4_0``); llama.cpp quantises the
  activations to 8 bits and multiplies with int8 dot products (CUDA MMQ/MMVQ kernels,
  ggml-org/llama.cpp PR #7860), dequantising to bf16 where the GPU has no int8 path.
* ``q5_0`` (GGUF): 32 weights with one fp16 scale and 32 high bits, 22 bytes per 32 weights =
  5.5 bits (ggml ``block_q5_0``); ``q6_k``: super-blocks of 256 weights in 210 bytes (128 bytes
  of low 4 bits, 64 of high 2 bits, 16 int8 sub-block scales, one fp16 scale) = 6.5625 bits
  (ggml ``block_q6_K``). Both multiply with int8 dot products on the CPU backend
  (``ggml_vec_dot_q5_0_q8_0``, ``ggml_vec_dot_q6_K_q8_K``).

GPUs without FP4 tensor cores run ``mxfp4`` weight-only (bf16 activations), as vLLM does for
gpt-oss on Hopper and Ampere (vLLM gpt-oss recipe: Marlin/Triton MXFP4 kernels); ``nvfp4`` has no
such path here and needs FP4 tensor cores (Blackwell). KV cache: ``bf16`` or ``fp8``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from sim.errors import CatalogueError


@dataclass(frozen=True)
class WeightFormat:
    """A weight storage format: bits per weight (scales included) and its GEMM datatype.

    ``compute``: the tensor datatype of its GEMMs where the GPU has it; ``fallback``: the datatype
    it runs at weight-only on a GPU that lacks ``compute`` (None: the format cannot run there).
    """

    name: str
    bits_per_weight: float
    compute: str
    fallback: str | None

    @property
    def bytes_per_weight(self) -> float:
        """Bytes one stored parameter occupies."""
        return self.bits_per_weight / 8.0


#: Weight formats by the name a scenario's ``precision.weights`` gives (sources: module docstring).
WEIGHT_FORMATS: dict[str, WeightFormat] = {
    f.name: f
    for f in (
        WeightFormat("bf16", 16.0, "bf16", None),
        WeightFormat("fp8", 8.0, "fp8", None),
        WeightFormat("int8", 8.0, "int8", None),
        WeightFormat("int4-awq", 4.0 + 16.0 / 128 + 4.0 / 128, "bf16", None),
        WeightFormat("int4-gptq", 4.0 + 16.0 / 128 + 4.0 / 128, "bf16", None),
        WeightFormat("mxfp4", 4.0 + 8.0 / 32, "fp4", "bf16"),
        WeightFormat("nvfp4", 4.0 + 8.0 / 16, "fp4", None),
        WeightFormat("q8_0", 8.0 + 16.0 / 32, "int8", "bf16"),
        WeightFormat("q4_0", 4.0 + 16.0 / 32, "int8", "bf16"),
        WeightFormat("q5_0", 22.0 * 8 / 32, "int8", "bf16"),
        WeightFormat("q6_k", 210.0 * 8 / 256, "int8", "bf16"),
    )
}

#: Bytes per element of each KV-cache format (vLLM ``--kv-cache-dtype auto|fp8``).
KV_FORMAT_BYTES: dict[str, float] = {"bf16": 2.0, "fp8": 1.0}

#: Tensor datatypes a GPU entry may list a dense throughput for.
TENSOR_DTYPES = ("bf16", "fp8", "int8", "fp4")


class HasTensorThroughput(Protocol):
    """What :func:`compute_dtype` needs of a GPU."""

    @property
    def name(self) -> str: ...

    def dense_flops(self, dtype: str) -> float | None: ...


def _known(table: dict[str, Any], key: str, name: str) -> Any:
    if name not in table:
        raise CatalogueError(
            f"precision.{key}: unknown precision {name!r}; known: {', '.join(table)}"
        )
    return table[name]


def weight_format(name: str) -> WeightFormat:
    """The weight format called ``name``.

    Raise CatalogueError naming ``precision.weights`` and the known formats if there is none.
    """
    fmt: WeightFormat = _known(WEIGHT_FORMATS, "weights", name)
    return fmt


def kv_bytes_per_element(name: str) -> float:
    """Bytes per cached K or V element in format ``name``.

    Raise CatalogueError naming ``precision.kv_cache`` and the known formats if there is none.
    """
    return float(_known(KV_FORMAT_BYTES, "kv_cache", name))


def compute_dtype(weights: str, gpu: HasTensorThroughput) -> str:
    """The tensor datatype GEMMs on ``weights``-format weights run at on ``gpu``.

    Raise CatalogueError naming ``precision.weights`` and what the GPU supports if the GPU has
    neither the format's datatype nor a weight-only path for it.
    """
    fmt = weight_format(weights)
    if gpu.dense_flops(fmt.compute) is not None:
        return fmt.compute
    if fmt.fallback is not None and gpu.dense_flops(fmt.fallback) is not None:
        return fmt.fallback
    have = ", ".join(d for d in TENSOR_DTYPES if gpu.dense_flops(d) is not None)
    raise CatalogueError(
        f"precision.weights: {weights} needs {fmt.compute.upper()} tensor cores, which "
        f"{gpu.name} does not have (its tensor datatypes: {have}); choose another precision "
        "or GPU"
    )
