"""An accelerator's peak figures as its vendor publishes them (:class:`GPU`), one entry of the
catalogue's ``gpus`` (``sim/data/catalogue.yaml``, each with its source).

A CPU node is an entry of ``kind: cpu``: its "HBM" bandwidth is the DRAM's peak, channels ×
transfer rate × 8 bytes (one 64-bit channel), and its dense throughputs are the cores' SIMD
rates (:mod:`sim.cpu_node`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class GPU:
    """One accelerator's peak figures, as the vendor publishes them."""

    name: str
    display_name: str
    memory_bytes: float
    hbm_bandwidth_bytes_per_s: float
    bf16_dense_flops: float
    fp8_dense_flops: float | None
    interconnect_bus_bandwidth_bytes_per_s: float
    allreduce_latency_s: tuple[tuple[int, float], ...]
    source: tuple[str, ...]
    int8_dense_flops: float | None = None
    fp4_dense_flops: float | None = None
    #: Effective per-GPU bandwidth and fixed latency of traffic between nodes (the NIC).
    internode_bandwidth_bytes_per_s: float = 5.0e10
    internode_latency_s: float = 2.0e-6
    #: ``gpu`` or ``cpu`` (a CPU socket whose DRAM is the memory the weights stream from).
    kind: str = "gpu"
    #: CPU only: physical cores, populated DRAM channels and their transfer rate (MT/s).
    num_cores: int | None = None
    memory_channels: int | None = None
    memory_transfer_rate_mt_s: float | None = None
    #: Device memory as the driver hands it out (``cudaMemGetInfo``'s total, what
    #: ``torch.cuda.mem_get_info`` reports), less than ``memory_bytes`` by what the driver
    #: keeps; ``None`` where no sourced figure was found. vLLM V1 sizes its request from it.
    reported_memory_bytes: float | None = None

    @property
    def engine_visible_memory_bytes(self) -> float:
        """The total an engine reads from the driver: the reported figure where the catalogue
        has one, else the published capacity."""
        return (
            self.memory_bytes if self.reported_memory_bytes is None else self.reported_memory_bytes
        )

    @property
    def is_cpu(self) -> bool:
        """Whether this entry is a CPU socket rather than an accelerator."""
        return self.kind == "cpu"

    def dense_flops(self, dtype: str) -> float | None:
        """Peak dense tensor throughput in ``dtype`` (bf16, fp8, int8, fp4); None if the GPU
        has no tensor cores for it. Raise ValueError for another datatype."""
        table = {
            "bf16": self.bf16_dense_flops,
            "fp8": self.fp8_dense_flops,
            "int8": self.int8_dense_flops,
            "fp4": self.fp4_dense_flops,
        }
        if dtype not in table:
            raise ValueError(f"unknown tensor datatype {dtype!r}; known: {', '.join(table)}")
        return table[dtype]

    def allreduce_latency_at(self, tp: int) -> float:
        """Small-message all-reduce latency at ``tp`` GPUs, interpolated linearly in log2(tp).

        The catalogue holds measured latencies at a few degrees (2 and 8 GPUs); between them the
        latency of tree/one-shot algorithms grows with the number of hops, i.e. with log2(tp).
        Raise ValueError if ``tp`` < 2.
        """
        if tp < 2:
            raise ValueError(f"all-reduce needs at least 2 GPUs, got {tp}")
        points = sorted(self.allreduce_latency_s)
        xs = [math.log2(n) for n, _ in points]
        ys = [lat for _, lat in points]
        x = math.log2(tp)
        if x <= xs[0]:
            return ys[0]
        if x >= xs[-1]:
            # Beyond the last measurement, extrapolate along the last segment.
            if len(xs) == 1:
                return ys[0]
            slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
            return ys[-1] + slope * (x - xs[-1])
        for (x0, y0), (x1, y1) in zip(
            zip(xs, ys, strict=True), zip(xs[1:], ys[1:], strict=True), strict=False
        ):
            if x0 <= x <= x1:
                return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        raise AssertionError("unreachable")  # pragma: no cover
