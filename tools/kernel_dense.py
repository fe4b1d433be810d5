"""Fit the FP8 GEMM efficiencies and the decode/prefill attention models to the collected rows.

GEMM (``gemm_perf``): the :class:`sim.cost_model.Efficiency` form per GEMM kernel,
``smooth_max(n·k·w/(η_bw·BW), 2·m·n·k/(η_fl·F), p) + floor``, weights 1 byte per parameter and F
the fp8 peak for ``fp8`` and ``fp8_block``; rows with n and k ≥ 512 (every linear layer of a served
LLM; smaller shapes are launch-bound and not model layers); intervals by bootstrap over (n, k)
shapes, held out in 5 folds of whole (n, k) shapes. The shipped bf16 efficiency is only checked.

Decode attention (``generation_attention_perf``, ``window_size`` 0): ``floor + B·n_kv·c +
B·L·2·n_kv·d·w/(η·BW)`` with L = ``step`` (the sequence length, new token included, as the
collector sets it). Prefill (``context_attention_perf``, ``window_size`` 0): ``floor + B·S·n_h·c +
4·n_h·d·B·S(S+1)/2/(η·F)``. Both: intervals by bootstrap over head configurations (n_h, n_kv, d),
held out in 5 folds of whole head configurations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sim.catalogue import get_gpu
from sim.efficiency import load_efficiency
from tools.kernel_fits import (
    Roofline,
    agreement,
    agreement_fields,
    fit,
    fit_kernel,
    predict,
    sig,
    written,
)
from tools.kernel_sources import read_table

GEMM_DTYPES = {"fp8": "fp8", "fp8_block": "fp8_block"}
MIN_NK = 512
NUM_FOLDS = 5
M_RANGES = ((1, 16), (17, 128), (129, 512), (513, 2048), (2049, 32768))
HEADS = ["num_heads", "num_key_value_heads", "head_dim"]
KV_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}
LOSS_NOTE = "least squares of log(predicted/measured), soft-L1 loss (5 % scale)"


def _labels(values: np.ndarray, ranges: tuple[tuple[int, int], ...], name: str) -> np.ndarray:
    out = np.empty(values.size, dtype=object)
    for lo, hi in ranges:
        out[(values >= lo) & (values <= hi)] = f"{name} {lo}-{hi}"
    return out


def _table(
    labels: np.ndarray, pred: np.ndarray, held: np.ndarray | None, measured: np.ndarray
) -> list[dict[str, Any]]:
    out = []
    for label in dict.fromkeys(labels):
        sel = labels == label
        a = agreement(pred[sel], measured[sel])
        row = {"label": label, "rows": a.num_rows, "in_mean": a.mean, "in_mean_abs": a.mean_abs}
        if held is not None:
            h = agreement(held[sel], measured[sel])
            row |= {"out_mean": h.mean, "out_mean_abs": h.mean_abs}
        out.append(row)
    return out


def fit_gemm(shared: Path, gpu: str, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``gemm`` section of ``gpu``'s kernel file and the report tables (empty if none)."""
    table = read_table(shared, gpu, "gemm")
    if table is None:
        return {}, {}
    frame, path = table
    spec = get_gpu(gpu)
    frame = frame[(frame.n >= MIN_NK) & (frame.k >= MIN_NK)]
    section: dict[str, Any] = {}
    report: dict[str, Any] = {}
    names = {
        "bandwidth": "bandwidth",
        "flops": "flops",
        "roofline_p": "roofline_p",
        "floor_us": "gemm_floor_s",
    }
    for index, raw in enumerate(("fp8", "fp8_block", "bfloat16")):
        rows = (
            frame[frame.gemm_dtype == raw].groupby(["m", "n", "k"], as_index=False).latency.median()
        )
        if rows.empty:
            continue
        m, n, k = (rows[c].to_numpy(dtype=np.float64) for c in ("m", "n", "k"))
        bf16 = raw == "bfloat16"
        peak = spec.bf16_dense_flops if bf16 else spec.fp8_dense_flops
        assert peak is not None
        shapes = rows.groupby(["n", "k"]).ngroup().to_numpy()
        model = Roofline(
            n * k * (2 if bf16 else 1) / spec.hbm_bandwidth_bytes_per_s,
            2.0 * m * n * k / peak,
            rows.latency.to_numpy() * 1e-3,
            shapes,
        )
        labels = _labels(m.astype(int), M_RANGES, "m")
        if bf16:
            shipped = load_efficiency(gpu)
            values = {
                "bandwidth": shipped.bandwidth,
                "flops": shipped.flops,
                "roofline_p": shipped.roofline_p,
                "floor_us": shipped.gemm_floor_s * 1e6,
            }
            pred = predict(model, values)
            refit = {key: sig(v) for key, v in fit(model).items()}
            report["bf16_check"] = {
                "by_m": _table(labels, pred, None, model.measured_s),
                "all": agreement(pred, model.measured_s).__dict__,
                "refit_for_comparison": refit,
                "rows": len(rows),
            }
            continue
        folds = (
            np.random.default_rng(seed + index).permutation(shapes.max() + 1)[shapes] % NUM_FOLDS
        )
        fitted = fit_kernel(model, folds, seed + index)
        params, ci = written(fitted, names)
        dtype = GEMM_DTYPES[raw]
        section[dtype] = {
            **params,
            "ci95": ci,
            "num_rows": len(rows),
            "agreement": agreement_fields(fitted),
            "source": path,
            "rows": f"gemm_dtype {raw}, n and k >= {MIN_NK}; {len(rows)} (m, n, k), "
            f"{shapes.max() + 1} (n, k) shapes",
            "method": f"{LOSS_NOTE} of sim.cost_model.Efficiency per GEMM (weights 1 byte per "
            "parameter, F = fp8 peak); 100-resample bootstrap over (n, k) shapes; held out: "
            "5 folds of whole (n, k) shapes",
        }
        report[dtype] = {
            "by_m": _table(labels, fitted.predicted_s, fitted.held_out_s, fitted.model.measured_s)
        }
    return section, report


def fit_attention(shared: Path, gpu: str, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``decode_attention`` and ``prefill_attention`` sections and their report tables."""
    sections: dict[str, Any] = {}
    report: dict[str, Any] = {}
    spec = get_gpu(gpu)
    for phase in ("decode_attention", "prefill_attention"):
        table = read_table(shared, gpu, phase)
        if table is None:
            continue
        frame, path = table
        frame = frame[frame.window_size == 0]
        decode = phase == "decode_attention"
        if decode and (frame.isl != 1).any():
            raise AssertionError("decode rows with a query length > 1 need their own model")
        length = "step" if decode else "isl"
        key = ["batch_size", length, *HEADS, "kv_cache_dtype"]
        for index, (raw, kv) in enumerate(KV_DTYPES.items()):
            rows = frame[frame.kv_cache_dtype == raw].groupby(key, as_index=False).latency.median()
            if rows.empty:
                continue
            b, s = rows.batch_size.to_numpy(float), rows[length].to_numpy(float)
            nh, nkv, d = (rows[c].to_numpy(float) for c in HEADS)
            heads = rows.groupby(HEADS).ngroup().to_numpy()
            measured = rows.latency.to_numpy() * 1e-3
            if decode:
                kv_bytes = b * s * 2.0 * nkv * d * (2 if kv == "bf16" else 1)
                model = Roofline(
                    kv_bytes / spec.hbm_bandwidth_bytes_per_s, None, measured, heads, units=b * nkv
                )
                names = {
                    "bandwidth": "bandwidth",
                    "unit_ns": "per_seq_kv_head_s",
                    "floor_us": "floor_s",
                }
                form = "floor + B·n_kv·per_seq_kv_head + B·L·2·n_kv·d·w/(bandwidth·BW)"
            else:
                flops = 4.0 * nh * d * b * s * (s + 1.0) / 2.0
                model = Roofline(
                    None, flops / spec.bf16_dense_flops, measured, heads, units=b * s * nh
                )
                names = {"flops": "flops", "unit_ns": "per_token_head_s", "floor_us": "floor_s"}
                form = "floor + B·S·n_h·per_token_head + 4·n_h·d·B·S(S+1)/2/(flops·F_bf16)"
            fold_seed = seed + 10 * index + (0 if decode else 5)
            folds = np.random.default_rng(fold_seed).permutation(heads.max() + 1)[heads] % NUM_FOLDS
            fitted = fit_kernel(model, folds, fold_seed)
            params, ci = written(fitted, names)
            sections.setdefault(phase, {})[kv] = {
                **params,
                "ci95": ci,
                "num_rows": len(rows),
                "agreement": agreement_fields(fitted),
                "source": path,
                "rows": f"kv_cache_dtype {raw}, window_size 0, isl 1 (one query per sequence); "
                f"{len(rows)} keys, {heads.max() + 1} head configurations"
                if decode
                else f"kv_cache_dtype {raw}, window_size 0; {len(rows)} keys, "
                f"{heads.max() + 1} head configurations",
                "method": f"{LOSS_NOTE} of {form}; 100-resample bootstrap over head configurations;"
                " held out: 5 folds of whole head configurations",
            }
            ranges = (
                ((1, 4), (8, 32), (64, 256), (512, 2048))
                if decode
                else ((1, 4), (8, 32), (64, 256))
            )
            lengths = (
                ((1, 63), (64, 1023), (1024, 16383), (16384, 131071))
                if decode
                else ((1, 127), (128, 1023), (1024, 4095), (4096, 16384))
            )
            pred, held = fitted.predicted_s, fitted.held_out_s
            report.setdefault(phase, {})[kv] = {
                "by_batch": _table(_labels(b.astype(int), ranges, "batch"), pred, held, measured),
                "by_length": _table(
                    _labels(s.astype(int), lengths, "KV" if decode else "isl"), pred, held, measured
                ),
            }
    return sections, report
