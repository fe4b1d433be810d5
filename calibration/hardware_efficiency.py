"""The shipped hardware-efficiency table: the H100 SXM fit and the rules carrying it to other GPUs.

``calibration.operator_fit`` fits the four fields of :class:`sim.cost_model.Efficiency` on one H100
SXM; this module rounds them and writes ``sim/data/hardware_efficiency.yaml``, which
:func:`sim.efficiency.load_efficiency` reads. Only the H100 SXM is measured. Every other catalogue
GPU carries the fit over by a stated rule, with its source, and its interval is the H100's (scaled
where the value is), so it leaves out the error of the transfer itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from sim.cost_model import Efficiency

#: The GPU the fit is made on.
FIT_GPU = "h100-sxm"
#: GPUs with a fit of their own (not carried over from the H100), and the module that makes it.
SEPARATELY_FITTED = {
    "rtx-pro-6000": "calibration/fit_gpu_efficiency.py",
    **{
        cpu: "calibration/fit_cpu_efficiency.py"
        for cpu in ("epyc-9554", "epyc-9654", "epyc-9374f", "ryzen9-5950x", "ryzen9-7940hs")
    },
}
#: Decimals each shipped field is rounded to (the floor, in seconds, to 0.01 µs).
ROUND_DECIMALS = {"bandwidth": 3, "flops": 3, "roofline_p": 2, "gemm_floor_s": 8}
FIELDS = tuple(ROUND_DECIMALS)

#: Measured fractions of peak used to carry the H100 fit to other GPUs (hardware reference):
#: best-shape bf16 matmul (MAMF, ml-engineering table) over dense peak, and gpt-fast's A100 decode.
MAMF_FRACTION = {
    "h100-sxm": 794.5 / 989.0,
    "a100-80gb": 271.2 / 312.0,
    "b200": 1745.0 / 2250.0,
    "mi300x": 781.9 / 1300.0,
}
A100_BW_FRACTION, A100_PEAK_BW_FRACTION = 1397.31 / 2039.0, 1700.0 / 2039.0
FIT_SOURCE = (
    "Fitted by calibration/operator_fit.py to LLMServingSim H100 per-operator latencies, "
    "Llama-3.1-8B TP1 (casys-kaist/LLMServingSim 5daddb2, MIT)"
)
MAMF_SOURCE = "stas00/ml-engineering 'Maximum Achievable Matmul FLOPS' (MAMF) table"
CARRIED = "the interval is the H100 SXM fit's and omits the transfer error"
SHAPE_CARRIED = (
    "roofline_p and gemm_floor_s carried over from the h100-sxm fit (kernel shape and launch "
    "cost, not measured on this GPU)"
)


def round_field(name: str, value: float) -> float:
    """``value`` rounded as the shipped table stores the field ``name``.

    Raise KeyError if ``name`` is not an :class:`Efficiency` field.
    """
    return round(value, ROUND_DECIMALS[name])


def rounded(efficiency: Efficiency) -> Efficiency:
    """``efficiency`` with every field rounded as shipped."""
    return Efficiency(*(round_field(f, getattr(efficiency, f)) for f in FIELDS))


def efficiency_entries(
    efficiency: Efficiency, ci95: Mapping[str, tuple[float, float]], method: str
) -> dict[str, dict[str, Any]]:
    """The shipped table: the H100 SXM fit, and what each other catalogue GPU carries over.

    ``efficiency`` and ``ci95`` (one interval per field) are the H100 SXM fit, ``method`` says how
    it was made. The flops fraction moves between GPUs by the ratio of their best-shape matmul
    fractions (MAMF/peak): the fit's shortfall below the H100's MAMF comes from the model's GEMM
    shapes and is kept. A100 bandwidth is gpt-fast's Llama-2-7B batch-1 decode, 1397 GB/s of 2039.
    The roofline's p and the per-GEMM floor carry over unchanged everywhere.
    Raise KeyError if ``ci95`` lacks a field.
    """

    def entry(
        bw: float, bw_ci: tuple[float, float], flops_ratio: float, how: str, source: list[str]
    ) -> dict[str, Any]:
        values = {
            "bandwidth": bw,
            "flops": efficiency.flops * flops_ratio,
            "roofline_p": efficiency.roofline_p,
            "gemm_floor_s": efficiency.gemm_floor_s,
        }
        intervals = {
            "bandwidth": bw_ci,
            "flops": (ci95["flops"][0] * flops_ratio, ci95["flops"][1] * flops_ratio),
            "roofline_p": ci95["roofline_p"],
            "gemm_floor_s": ci95["gemm_floor_s"],
        }
        return {
            **{f: round_field(f, values[f]) for f in FIELDS},
            "ci95": {f: [round_field(f, v) for v in intervals[f]] for f in FIELDS},
            "method": how,
            "source": source,
        }

    bw, bw_ci = efficiency.bandwidth, ci95["bandwidth"]

    def mamf(gpu: str, text: str) -> tuple[float, str]:
        return MAMF_FRACTION[gpu] / MAMF_FRACTION[FIT_GPU], (
            f"flops = h100-sxm fit x (MAMF/peak {text}) / (MAMF/peak 794.5/989 of h100-sxm)"
        )

    a100_ratio, a100_text = mamf("a100-80gb", "271.2/312")
    b200_ratio, b200_text = mamf("b200", "1745/2250")
    return {
        FIT_GPU: entry(bw, bw_ci, 1.0, method, [FIT_SOURCE]),
        "h100-sxm-94gb": entry(
            bw,
            bw_ci,
            1.0,
            "all four fields carried over from h100-sxm (same GH100 SXM5 module, HBM2e in place "
            f"of HBM3); {CARRIED}; no measured GEMM grid (the h100-sxm grid times HBM3 at 3.35 "
            "TB/s and no clock or memory figure of this part would rescale it), so its GEMMs are "
            "priced by the roofline with these fields",
            [FIT_SOURCE, "no H100 SXM5 94GB operator profile available"],
        ),
        "h100-pcie": entry(
            bw,
            bw_ci,
            1.0,
            f"all four fields carried over from h100-sxm (same GH100 die); {CARRIED}",
            [FIT_SOURCE, "no H100 PCIe operator profile available"],
        ),
        "h200": entry(
            bw,
            bw_ci,
            1.0,
            f"all four fields carried over from h100-sxm (same GH100 compute); {CARRIED}",
            [FIT_SOURCE, f"{MAMF_SOURCE}: H200 bf16 listed as the same as H100 SXM"],
        ),
        "a100-80gb": entry(
            A100_BW_FRACTION,
            (A100_BW_FRACTION, A100_PEAK_BW_FRACTION),
            a100_ratio,
            "bandwidth = gpt-fast Llama-2-7B bf16 batch-1 decode 1397.31 GB/s / 2039 "
            "(a whole step, so a lower bound for the linear layers); its interval "
            "brackets it by the 1700 GB/s empirical peak, not a statistical "
            f"interval; {a100_text}; {SHAPE_CARRIED}",
            [FIT_SOURCE, "pytorch-labs/gpt-fast README Benchmarks (A100-80GB, 330 W)", MAMF_SOURCE],
        ),
        "b200": entry(
            bw,
            bw_ci,
            b200_ratio,
            f"bandwidth carried over from h100-sxm (no B200 measurement); {b200_text}; "
            f"{SHAPE_CARRIED}; {CARRIED}",
            [FIT_SOURCE, MAMF_SOURCE],
        ),
        **_later_gpus(entry, bw, bw_ci, b200_ratio, b200_text, mamf("mi300x", "781.9/1300")),
    }


def _later_gpus(
    entry: Any,
    bw: float,
    bw_ci: tuple[float, float],
    b200_ratio: float,
    b200_text: str,
    mi300x: tuple[float, str],
) -> dict[str, dict[str, Any]]:
    """GB200, B300, the AMD Instinct parts and the L40S: none has an operator profile, so each
    carries the fit over from its closest measured relative, by the rule and source stated."""
    mi_ratio, mi_text = mi300x
    blackwell = (
        f"carried over from b200 (same Blackwell tensor cores; no profile of this GPU): "
        f"bandwidth from h100-sxm, {b200_text}; {SHAPE_CARRIED}; {CARRIED}"
    )
    cdna = (
        f"bandwidth carried over from h100-sxm (no Instinct profile); {mi_text} (the MI300X "
        f"measurement, used for every CDNA part as none other is published); {SHAPE_CARRIED}; "
        f"{CARRIED}"
    )
    return {
        "gb200": entry(bw, bw_ci, b200_ratio, blackwell, [FIT_SOURCE, MAMF_SOURCE]),
        "b300": entry(bw, bw_ci, b200_ratio, blackwell, [FIT_SOURCE, MAMF_SOURCE]),
        "mi300x": entry(bw, bw_ci, mi_ratio, cdna, [FIT_SOURCE, MAMF_SOURCE]),
        "mi325x": entry(bw, bw_ci, mi_ratio, cdna, [FIT_SOURCE, MAMF_SOURCE]),
        "mi355x": entry(bw, bw_ci, mi_ratio, cdna, [FIT_SOURCE, MAMF_SOURCE]),
        **{
            gpu: entry(
                bw,
                bw_ci,
                1.0,
                f"all four fields carried over from h100-sxm (no {label} profile or MAMF "
                f"figure); {CARRIED}",
                [FIT_SOURCE],
            )
            for gpu, label in (("l40s", "L40S"), ("rtx-4090", "RTX 4090"))
        },
    }


def efficiency_yaml(
    efficiency: Efficiency,
    ci95: Mapping[str, tuple[float, float]],
    method: str,
    separate: Mapping[str, dict[str, Any]] | None = None,
) -> str:
    """The text of ``sim/data/hardware_efficiency.yaml`` for the H100 SXM fit given.

    ``separate`` holds the entries of the GPUs in :data:`SEPARATELY_FITTED`, kept as they are.
    """
    header = (
        "# Per GPU, the four fields of sim.cost_model.Efficiency: achieved fractions of peak HBM\n"
        "# bandwidth and dense bf16 tensor throughput, the p of the rounded linear-layer roofline\n"
        "# and the fixed time per GEMM kernel (seconds). Generated by\n"
        "# `python -m calibration.operator_fit --write`; see docs/cost-model.md.\n"
    )
    table = efficiency_entries(efficiency, ci95, method)
    table.update(separate or {})
    return header + yaml.safe_dump(table, sort_keys=False, width=100, allow_unicode=True)


def shipped_path() -> Path:
    """Where the checkout keeps the shipped table (``sim/data/hardware_efficiency.yaml``)."""
    return Path(__file__).resolve().parents[1] / "sim" / "data" / "hardware_efficiency.yaml"


def default_shared() -> Path:
    """The shared data folder beside the checkout (``../shared`` from the repository root)."""
    return Path(__file__).resolve().parents[1] / ".." / "shared"
