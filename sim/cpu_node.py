"""A CPU socket as the serving device: llama.cpp streaming GGUF weights from DRAM.

A decode step on a CPU is bound by how fast the cores read the weights from memory, like a GPU's
(llama.cpp issue #34 and #6434: token generation stops scaling with threads once DRAM is
saturated). A catalogue entry of ``kind: cpu`` therefore plays the GPU's part with:

* bandwidth: the DRAM's peak, ``channels × transfer rate (MT/s) × 8 bytes`` (one 64-bit DDR4/DDR5
  channel moves 8 bytes per transfer; JEDEC JESD79-4 / JESD79-5), the figure AMD's datasheets
  quote (12 × DDR5-4800 = 460.8 GB/s for EPYC 9004);
* dense throughput: ``cores × base clock × SIMD operations per cycle and core``, per datatype:
  ``bf16`` is what llama.cpp's F16/BF16 matmuls run at (fp32 FMAs on AVX2, ``vdpbf16ps`` on
  AVX512-BF16), ``int8`` what its quantised dot products run at (``vpmaddubsw`` on AVX2,
  ``vpdpbusd`` on AVX512-VNNI); there is no fp8 or fp4;
* no interconnect: one llama.cpp process on one socket (``num_gpus`` 1, one node, no tensor
  parallelism).

Its achieved fraction of that bandwidth is a CPU's own, fitted on one published llama-bench point
(``calibration/fit_cpu_efficiency.py``; ``sim/data/hardware_efficiency.yaml``). There is no CUDA on
a CPU node: the llama.cpp preset's CUDA-graph and kernel-launch terms do not apply
(:func:`host_costs_on`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from sim.errors import ScenarioError
from sim.gpu import GPU
from sim.host_costs import HostCosts

#: Bytes one DDR channel moves per transfer (a 64-bit channel; DDR5's two 32-bit subchannels).
BYTES_PER_TRANSFER = 8
#: The weight formats llama.cpp's CPU backend runs that specsim prices (GGUF tensor types).
CPU_WEIGHT_FORMATS = ("bf16", "q8_0", "q6_k", "q5_0", "q4_0")
#: The engine presets that run on a CPU node.
CPU_PRESETS = ("llamacpp",)


def dram_bandwidth_bytes_per_s(channels: int, transfer_rate_mt_s: float) -> float:
    """Peak DRAM bandwidth: ``channels × MT/s × 10⁶ × 8`` bytes per second.

    Raise ValueError if either is not positive.
    """
    if channels < 1 or not transfer_rate_mt_s > 0:
        raise ValueError(
            f"memory channels and transfer rate must be > 0, got {channels}, {transfer_rate_mt_s}"
        )
    return channels * transfer_rate_mt_s * 1e6 * BYTES_PER_TRANSFER


def cpu_entry(name: str, entry: dict[str, Any]) -> GPU:
    """The catalogue entry ``name`` of ``kind: cpu`` as the device the cost model runs on.

    ``simd_ops_per_cycle`` gives, per datatype (``bf16``, ``int8``), the operations one core
    completes per cycle (a fused multiply-add counts two). Raise KeyError for a missing key.
    """
    cores = int(entry["num_cores"])
    clock_hz = float(entry["base_clock_hz"])
    per_cycle = {k: float(v) for k, v in entry["simd_ops_per_cycle"].items()}
    channels = int(entry["memory_channels"])
    rate = float(entry["memory_transfer_rate_mt_s"])
    int8 = per_cycle.get("int8")
    return GPU(
        name=name,
        display_name=entry["display_name"],
        memory_bytes=float(entry["memory_bytes"]),
        hbm_bandwidth_bytes_per_s=dram_bandwidth_bytes_per_s(channels, rate),
        bf16_dense_flops=cores * clock_hz * per_cycle["bf16"],
        fp8_dense_flops=None,
        # No interconnect: a CPU node is one socket (check_cpu_scenario refuses more); an
        # infinite bus makes the unused collective terms zero rather than a division by zero.
        interconnect_bus_bandwidth_bytes_per_s=math.inf,
        allreduce_latency_s=(),
        source=tuple(entry["source"]),
        int8_dense_flops=None if int8 is None else cores * clock_hz * int8,
        fp4_dense_flops=None,
        internode_bandwidth_bytes_per_s=math.inf,
        internode_latency_s=0.0,
        kind="cpu",
        num_cores=cores,
        memory_channels=channels,
        memory_transfer_rate_mt_s=rate,
    )


def check_cpu_scenario(
    gpu: GPU,
    *,
    num_gpus: int,
    num_nodes: int,
    tensor_parallel: int | None,
    preset: str,
    weights: str,
) -> None:
    """Refuse what a CPU node cannot run, naming the key: more than one device or node, tensor
    parallelism, an engine other than llama.cpp, a weight format llama.cpp's CPU backend has no
    kernels for. Does nothing for a GPU.

    Raise ScenarioError with the key path and what would run.
    """
    if not gpu.is_cpu:
        return
    if num_gpus != 1 or num_nodes != 1 or (tensor_parallel or 1) != 1:
        key, value = (
            ("hardware.num_gpus", num_gpus)
            if num_gpus != 1
            else ("hardware.num_nodes", num_nodes)
            if num_nodes != 1
            else ("hardware.tensor_parallel", tensor_parallel)
        )
        raise ScenarioError(
            f"{key}: {value}, but {gpu.name} is a CPU: a CPU node runs one llama.cpp process on "
            "one socket (num_gpus 1, one node, no tensor parallelism)"
        )
    if preset not in CPU_PRESETS:
        raise ScenarioError(
            f"engine.preset: {preset} runs on GPUs; on the CPU {gpu.name} choose "
            f"{' or '.join(CPU_PRESETS)}"
        )
    if weights not in CPU_WEIGHT_FORMATS:
        raise ScenarioError(
            f"precision.weights: llama.cpp has no CPU kernels for {weights} weights on "
            f"{gpu.name}; choose one of {', '.join(CPU_WEIGHT_FORMATS)} (GGUF)"
        )


def host_costs_on(gpu: GPU, host: HostCosts) -> HostCosts:
    """``host`` as it applies on ``gpu``: on a CPU node nothing is launched on a device, so
    there are no CUDA graphs and no per-layer launch time (ggml's CPU backend runs the graph's
    operators on its own thread pool)."""
    if not gpu.is_cpu:
        return host
    return replace(host, cuda_graph_max_tokens=0, eager_launch_s_per_layer=0.0)
