"""All-reduce latency tables from the collected vLLM custom all-reduce and nccl-tests rows.

Per GPU, path (``graph``/``eager``/``nccl``) and TP degree: the median latency of each message size
(repeated keys are repeated collections), sizes converted from elements to bytes (bf16/half: 2
bytes; the collectors' ``message_size`` counts elements), then made non-decreasing by isotonic
regression (pool adjacent violators) so that the log-log interpolation of
:class:`sim.kernels.AllReduceTable` is monotone. The measured sizes are already log-spaced
(factor 2), so every one is kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.kernels import AllReduceTable
from tools.kernel_fits import isotonic, sig
from tools.kernel_sources import read_nccl, read_table

ELEMENT_BYTES = 2
MODES = {"graph": "vLLM_custom_graph", "eager": "vLLM_custom_eager"}
#: Messages at most this large define the small-message latency; its interval is a bootstrap.
SMALL_MESSAGE_BYTES = 16 * 1024
NUM_BOOTSTRAP, SEED = 1000, 20261201
METHOD = (
    "median latency per message size (repeated keys pooled), message_size elements x 2 bytes, "
    "isotonic (non-decreasing) in size; evaluated log-log between sizes, the smallest latency "
    "below the first size and the last segment's bandwidth above the last"
)


@dataclass(frozen=True)
class TableCheck:
    """Agreement of one table with its medians: in sample, and with every other size held out."""

    gpu: str
    mode: str
    tp: int
    num_sizes: int
    in_sample_max_abs: float
    held_out_mean_abs: float
    held_out_max_abs: float


def _tables(rows: pd.DataFrame, seed: int) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for tp, group in rows.groupby("num_gpus"):
        medians = group.groupby("message_size").latency.median().sort_index()
        message_bytes = medians.index.to_numpy(dtype=np.float64) * ELEMENT_BYTES
        measured_s = medians.to_numpy(dtype=np.float64) * 1e-3
        latency_s = isotonic(measured_s)
        out[int(tp)] = {
            "message_bytes": message_bytes,
            "measured_s": measured_s,
            "latency_s": latency_s,
            "summary": _summary(message_bytes, measured_s, latency_s, seed + int(tp)),
        }
    return out


def _summary(
    message_bytes: np.ndarray, measured_s: np.ndarray, latency_s: np.ndarray, seed: int
) -> dict[str, Any]:
    small = measured_s[message_bytes <= SMALL_MESSAGE_BYTES]
    rng = np.random.default_rng(seed)
    draws = np.median(rng.choice(small, size=(NUM_BOOTSTRAP, small.size)), axis=1)
    seg_bw = np.diff(message_bytes[-4:]) / np.maximum(np.diff(latency_s[-4:]), 1e-300)
    return {
        "small_message_latency_s": sig(float(np.median(small))),
        "small_message_latency_ci95": [
            sig(float(np.percentile(draws, 2.5))),
            sig(float(np.percentile(draws, 97.5))),
        ],
        "small_message_sizes": f"{int(message_bytes[0])}-{SMALL_MESSAGE_BYTES} bytes",
        "large_message_bytes_per_s": sig(float(seg_bw[-1])),
        "large_message_range": [sig(float(seg_bw.min())), sig(float(seg_bw.max()))],
        "large_message_note": "bandwidth (bytes/latency increment) of the last segment; range over "
        "the last three segments",
    }


def _check(gpu: str, mode: str, tp: int, t: dict[str, Any]) -> TableCheck:
    b, measured, smooth = t["message_bytes"], t["measured_s"], t["latency_s"]
    full = AllReduceTable(tp, b, smooth)
    in_err = full(b) / measured - 1.0
    keep = np.ones(b.size, dtype=bool)
    keep[1:-1:2] = False  # hold out every other interior size
    thinned = AllReduceTable(tp, b[keep], isotonic(measured[keep]))
    out_err = thinned(b[~keep]) / measured[~keep] - 1.0
    return TableCheck(
        gpu,
        mode,
        tp,
        int(b.size),
        float(np.abs(in_err).max()),
        float(np.abs(out_err).mean()),
        float(np.abs(out_err).max()),
    )


def fit_collectives(shared: Path, gpu: str) -> tuple[dict[str, Any], list[TableCheck]]:
    """The ``allreduce`` section of ``gpu``'s kernel file and the agreement of every table.

    An empty section if nothing was collected for ``gpu``. Raise CalibrationError (from the
    reader) if a file is unreadable.
    """
    section: dict[str, Any] = {}
    checks: list[TableCheck] = []
    custom = read_table(shared, gpu, "custom_allreduce")
    sources: dict[str, tuple[pd.DataFrame, str, str]] = {}
    if custom is not None:
        frame, path = custom
        for mode, kernel in MODES.items():
            rows = frame[(frame.kernel_source == kernel) & (frame.allreduce_dtype == "bfloat16")]
            sources[mode] = (rows, path, f"kernel_source == {kernel}, allreduce_dtype bfloat16")
    nccl = read_nccl(shared, gpu)
    if nccl is not None:
        frame, path = nccl
        rows = frame[(frame.op_name == "all_reduce") & (frame.nccl_dtype == "half")]
        folders = path.count(";") + 1
        sources["nccl"] = (
            rows,
            path,
            f"op_name all_reduce, nccl_dtype half ({folders} folder(s) "
            "pooled; every row says version 2.29.2)",
        )
    for index, (mode, (rows, path, which)) in enumerate(sources.items()):
        if rows.empty:
            continue
        tables = _tables(rows, SEED + 100 * index)
        section[mode] = {
            "source": path,
            "rows": f"{which}: {len(rows)} rows, {rows.message_size.nunique()} sizes",
            "method": METHOD,
            "tp": {
                tp: {
                    "message_bytes": [int(v) for v in t["message_bytes"]],
                    "latency_s": [sig(float(v)) for v in t["latency_s"]],
                    "summary": t["summary"],
                }
                for tp, t in tables.items()
            },
        }
        checks.extend(_check(gpu, mode, tp, t) for tp, t in tables.items())
    return section, checks
