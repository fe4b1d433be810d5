"""Fit the fused-MoE roofline of :func:`sim.moe_kernel.moe_layer_s` to the collected MoE rows.

Rows: ``kernel_source == vllm_fused_moe``, ``distribution == balanced``, one dtype at a time
(bf16, fp8, fp8_block), the median of repeated keys. Each row is priced with the routing the
collector actually ran (its balanced routing touches ``min(E, T·k)`` experts, see
:func:`tools.kernel_fits.balanced_routing`), so the efficiencies are not biased by the routing
model; the simulator then applies them with uniform routing (``docs/kernels.md`` compares both).
Intervals: bootstrap over configurations (model shape × TP × EP); held out: each model shape in
turn (leave-one-shape-out).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.catalogue import get_gpu
from sim.kernels import WEIGHT_BYTES
from sim.moe_kernel import experts_touched, moe_activation_bytes
from tools.kernel_fits import (
    FittedKernel,
    Roofline,
    agreement,
    agreement_fields,
    balanced_routing,
    fit_kernel,
    predict,
    written,
)
from tools.kernel_sources import read_table

DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block"}
KEY = [
    "moe_dtype",
    "num_tokens",
    "hidden_size",
    "inter_size",
    "topk",
    "num_experts",
    "moe_tp_size",
    "moe_ep_size",
]
SHAPE = ["hidden_size", "inter_size", "topk", "num_experts"]
#: Model shapes as AIConfigurator's collector names them (collector/common_test_cases.py).
SHAPE_NAMES = {
    (4096, 14336, 2, 8): "Mixtral-8x7B",
    (6144, 16384, 2, 8): "Mixtral-8x22B",
    (7168, 2048, 8, 256): "DeepSeek-V3",
    (2048, 768, 8, 128): "Qwen3-30B-A3B",
    (4096, 1536, 8, 128): "Qwen3-235B-A22B",
    (6144, 2560, 8, 160): "Qwen3-Coder-480B",
    (7168, 2048, 8, 384): "Kimi-K2",
    (2688, 1856, 6, 128): "Nemotron-3-Nano",
    (4096, 2688, 22, 512): "Nemotron-3-Super",
}
TOKEN_RANGES = ((1, 16), (17, 256), (257, 2048), (2049, 16384))
NAMES = {
    "bandwidth": "bandwidth",
    "flops": "flops",
    "roofline_p": "roofline_p",
    "floor_us": "floor_s",
}
METHOD = (
    "least squares of log(predicted/measured), soft-L1 loss (5 % scale), of floor + smooth_max("
    "(D·3·H·I/tp·w + activation bytes)/(bandwidth·BW), 2·S·3·H·I/tp/(flops·F), p) with the "
    "collector's own routing counts D (distinct local experts) and S (local slots); F = bf16 peak "
    "for bf16, fp8 peak otherwise; 100-resample bootstrap over configurations (shape x TP x EP)"
)


def shape_name(shape: tuple[int, int, int, int]) -> str:
    """The model a (hidden, inter, top-k, experts) shape belongs to, or the shape itself."""
    return SHAPE_NAMES.get(shape, "H{}-I{}-k{}-E{}".format(*shape))


def _rows(frame: pd.DataFrame, dtype: str, distribution: str) -> pd.DataFrame:
    rows = frame[
        (frame.kernel_source == "vllm_fused_moe")
        & (frame.moe_dtype == dtype)
        & (frame.distribution == distribution)
    ]
    return rows.groupby(KEY, as_index=False).latency.median()


def _model(rows: pd.DataFrame, gpu: str, dtype: str, routing: str) -> Roofline:
    spec = get_gpu(gpu)
    peak = spec.bf16_dense_flops if dtype == "bf16" else spec.fp8_dense_flops
    assert peak is not None
    t = rows.num_tokens.to_numpy(dtype=np.float64)
    k, e = rows.topk.to_numpy(), rows.num_experts.to_numpy()
    ep = rows.moe_ep_size.to_numpy(dtype=np.float64)
    h = rows.hidden_size.to_numpy(dtype=np.float64)
    inter = rows.inter_size.to_numpy() / rows.moe_tp_size.to_numpy()
    if routing == "collector":
        cache: dict[tuple[int, int, int, int], tuple[int, int]] = {}
        counts = np.array(
            [
                cache.setdefault(key, balanced_routing(*key))
                for key in zip(rows.num_tokens, e, k, rows.moe_ep_size, strict=True)
            ],
            dtype=np.float64,
        )
        distinct, local = counts[:, 0], counts[:, 1]
    else:
        distinct = (
            np.array(
                [experts_touched(ti, int(ei), int(ki)) for ti, ei, ki in zip(t, e, k, strict=True)]
            )
            / ep
        )
        local = t * k / ep
    weight = distinct * 3.0 * h * inter * WEIGHT_BYTES[dtype]
    act = moe_activation_bytes(t * k, local, h, inter)
    config = rows.groupby([*SHAPE, "moe_tp_size", "moe_ep_size"]).ngroup().to_numpy()
    return Roofline(
        (weight + act) / spec.hbm_bandwidth_bytes_per_s,
        2.0 * local * 3.0 * h * inter / peak,
        rows.latency.to_numpy(dtype=np.float64) * 1e-3,
        config,
    )


def _by(rows: pd.DataFrame, fitted: FittedKernel, labels: np.ndarray) -> list[dict[str, Any]]:
    out = []
    for label in dict.fromkeys(labels):
        sel = labels == label
        a = agreement(fitted.predicted_s[sel], fitted.model.measured_s[sel])
        h = agreement(fitted.held_out_s[sel], fitted.model.measured_s[sel])
        out.append(
            {
                "label": label,
                "rows": a.num_rows,
                "in_mean": a.mean,
                "in_mean_abs": a.mean_abs,
                "out_mean": h.mean,
                "out_mean_abs": h.mean_abs,
            }
        )
    return out


def _token_labels(tokens: np.ndarray) -> np.ndarray:
    labels = np.empty(tokens.size, dtype=object)
    for lo, hi in TOKEN_RANGES:
        labels[(tokens >= lo) & (tokens <= hi)] = f"T {lo}-{hi}"
    return labels


def fit_moe(shared: Path, gpu: str, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``moe`` section of ``gpu``'s kernel file and the agreement tables of the report.

    Empty if nothing was collected for ``gpu``. Raise CalibrationError (from the reader) if the
    file is unreadable.
    """
    table = read_table(shared, gpu, "moe")
    if table is None:
        return {}, {}
    frame, path = table
    section: dict[str, Any] = {}
    report: dict[str, Any] = {}
    for index, (raw, dtype) in enumerate(DTYPES.items()):
        rows = _rows(frame, raw, "balanced")
        if rows.empty:
            continue
        shapes = np.array([shape_name(s) for s in rows[SHAPE].itertuples(index=False, name=None)])
        folds = pd.Series(shapes).astype("category").cat.codes.to_numpy()
        fitted = fit_kernel(_model(rows, gpu, dtype, "collector"), folds, seed + index)
        params, ci = written(fitted, NAMES)
        section[dtype] = {
            **params,
            "ci95": ci,
            "num_rows": len(rows),
            "agreement": agreement_fields(fitted),
            "source": path,
            "rows": f"kernel_source vllm_fused_moe, moe_dtype {raw}, distribution balanced; "
            f"medians of repeated keys; {len(rows)} keys, {len(set(shapes))} model shapes",
            "method": METHOD,
        }
        large = (rows.moe_ep_size.to_numpy() >= 16) | (rows.moe_tp_size.to_numpy() >= 16)
        uniform = predict(_model(rows, gpu, dtype, "uniform"), fitted.values)
        report[dtype] = {
            "by_shape": _by(rows, fitted, shapes),
            "by_tokens": _by(rows, fitted, _token_labels(rows.num_tokens.to_numpy())),
            "by_parallel": _by(rows, fitted, np.where(large, "TP or EP >= 16", "TP, EP <= 8")),
            "uniform_routing": _by_routing(rows, fitted, uniform),
            "power_law": _power_law(frame, raw, rows, gpu, dtype, fitted),
        }
    return section, report


def _by_routing(rows: pd.DataFrame, fitted: FittedKernel, uniform_s: np.ndarray) -> list[Any]:
    """The balanced rows priced with uniform routing (what the simulator assumes) instead."""
    labels = _token_labels(rows.num_tokens.to_numpy())
    out = []
    for label in dict.fromkeys(labels):
        sel = labels == label
        a = agreement(uniform_s[sel], fitted.model.measured_s[sel])
        out.append({"label": label, "rows": a.num_rows, "mean": a.mean, "mean_abs": a.mean_abs})
    return out


def _power_law(
    frame: pd.DataFrame,
    raw: str,
    balanced: pd.DataFrame,
    gpu: str,
    dtype: str,
    fitted: FittedKernel,
) -> list[dict[str, Any]]:
    """Measured power-law/balanced latency ratios and the fitted model's error on power-law rows."""
    out = []
    key = [c for c in KEY if c != "moe_dtype"]
    for alpha in sorted(d for d in frame.distribution.unique() if d.startswith("power_law")):
        rows = _rows(frame, raw, alpha)
        joined = rows.merge(balanced, on=[*key, "moe_dtype"], suffixes=("", "_balanced"))
        spread = predict(_model(joined, gpu, dtype, "collector"), fitted.values)
        labels = _token_labels(joined.num_tokens.to_numpy())
        ratio = (joined.latency / joined.latency_balanced).to_numpy()
        err = spread / (joined.latency.to_numpy() * 1e-3) - 1.0
        for label in dict.fromkeys(labels):
            sel = labels == label
            out.append(
                {
                    "alpha": alpha.removeprefix("power_law_"),
                    "label": label,
                    "rows": int(sel.sum()),
                    "median_ratio": float(np.median(ratio[sel])),
                    "model_mean": float(err[sel].mean()),
                }
            )
    return out
