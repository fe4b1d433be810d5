"""The CPU-node rows of ``sim/data/validation_points.csv``: published llama.cpp token-generation
rates on named CPUs, transcribed below with their sources (``calibration/fit_cpu_efficiency.py``
reads them back from the CSV).

One row is the point the CPU bandwidth fraction is solved on (``fitted_by`` names the fit); the
others are out of sample. Each runs as the benchmark ran: one client, a one-token prompt (the
benchmarks generate from an empty context) and the benchmark's generated length.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CpuPoint:
    """One published llama.cpp token-generation rate on a named CPU (batch 1).

    ``generated_tokens``: the benchmark's tg length from an empty context (tg128 for llama-bench,
    tg16 for llamafile-bench): the mean context is half of it.
    """

    name: str
    cpu: str
    model: str
    weights: str
    tokens_per_s: float
    generated_tokens: int
    engine: str
    source: str

    @property
    def tpot_s(self) -> float:
        """The measured time per generated token."""
        return 1.0 / self.tokens_per_s


_EPYC = (
    "ahelpme.com/?p=6685 'CPU-only inference with AMD Epyc 9554' (llama.cpp llama-bench, default "
    "tg128; single EPYC 9554, 12 x DDR5 at 4800, 460.8 GB/s): Phi-4 14B {fmt} {size}, {tps} t/s"
)
#: The calibration point.
CALIBRATION = CpuPoint(
    "cpu-epyc9554-phi4-q8_0",
    "epyc-9554",
    "phi-4",
    "q8_0",
    19.194,
    128,
    "llama.cpp (llama-bench)",
    _EPYC.format(fmt="Q8_0", size="14.51 GiB", tps=19.194),
)
#: Points nothing is fitted on.
OUT_OF_SAMPLE = (
    CpuPoint(
        "cpu-epyc9554-phi4-q6_k",
        "epyc-9554",
        "phi-4",
        "q6_k",
        23.246,
        128,
        "llama.cpp (llama-bench)",
        _EPYC.format(fmt="Q6_K", size="11.20 GiB", tps=23.246),
    ),
    CpuPoint(
        "cpu-epyc9554-phi4-q5_0",
        "epyc-9554",
        "phi-4",
        "q5_0",
        25.444,
        128,
        "llama.cpp (llama-bench)",
        _EPYC.format(fmt="Q5_0", size="9.87 GiB", tps=25.444),
    ),
    CpuPoint(
        "cpu-7940hs-mistral7b-bf16",
        "ryzen9-7940hs",
        "mistral-7b",
        "bf16",
        4.00,
        16,
        "llamafile 0.8.6 (llamafile-bench)",
        "mozilla-ai/llamafile issue #441 (Djip007, 2024-05-25), llamafile-bench 0.8.6 on a Ryzen 9 "
        "7940HS: mistral-7b-instruct-v0.2.BF16 13.49 GiB tg16 4.00 t/s",
    ),
)

#: The ``fitted_by`` tag of the calibration row (calibration/fit_cpu_efficiency.py).
FIT = "cpu_efficiency"


def cpu_points(row: Callable[..., dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every CPU row, built with the dense builder's ``row`` (its columns and defaults)."""
    for point in (CALIBRATION, *OUT_OF_SAMPLE):
        yield row(
            point_id=point.name,
            source_group="cpu-llamacpp",
            engine=point.engine,
            preset="llamacpp",
            model=point.model,
            gpu=point.cpu,
            num_gpus=1,
            precision=point.weights,
            method="none",
            arrival="closed_loop",
            concurrency=1,
            prompt_tokens=1,
            output_tokens=point.generated_tokens,
            num_requests=2,
            quantity="tpot_ms",
            statistic="mean",
            measured=f"{point.tpot_s * 1e3:.5g}",
            unit="ms",
            source=point.source,
            fitted_by=FIT if point is CALIBRATION else "",
            notes=(
                f"{point.tokens_per_s} tokens/s at batch 1 (1000 / t/s: our arithmetic); "
                f"tg{point.generated_tokens} from an empty context"
            ),
        )
