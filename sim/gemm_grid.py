"""Linear layers priced from measured GEMM latencies over (m, n, k), where the GPU has them.

One roofline ``smooth_max(bytes/(η_bw·BW), FLOPs/(η_fl·F), p)`` with one set of efficiencies for
every GEMM shape misprices the shapes that decide serving under load. On the H100's measured vLLM
0.19 GEMMs (ai-dynamo/aiconfigurator ``gemm_perf``) the bf16 fit of ``hardware_efficiency.yaml``
prices Llama-2-70B's TP4 layer GEMMs 19 % too high at 256 tokens (17.5 vs 14.6 ms for 80 layers),
where a decode batch carries a prefill chunk, and the FP8 fit prices large FP8 GEMMs 20 % too high
(m = 4096, n = 6144, k = 4096: 214 vs 185 µs) and small-n ones up to 45 % too low. Real kernels
leave the memory-bound regime later and reach a higher fraction of peak on large tiles than a
single rounded roofline allows (tile and wave quantisation: NVIDIA, "Matrix Multiplication
Background User's Guide", GPU performance docs).

``sim/data/gemm_grid_<gpu>.npz`` (written by ``python -m calibration.gemm_grid``) holds the median
measured latency per (m, n, k) on the measured grid. A GEMM is priced by interpolating
``log t`` linearly in ``(log n, log k)`` at each grid m and then in ``log m``; beyond the grid the
last segment's log-log slope carries on (slope ≈ 1 in m, n and k once compute-bound). A model's
decoder is priced as ``L`` layers of its tensor-parallel shards (QKV ``(n_h + 2·n_kv)·d/tp × H``,
O ``H × n_h·d/tp``, gate-up ``2·I/tp × H``, down ``H × I/tp``; Megatron-LM sharding, Shoeybi et
al. arXiv:1909.08053) and the lm_head as one ``V/tp × H`` GEMM over the rows whose logits are
needed (vLLM shards the vocabulary, ``VocabParallelEmbedding``). Each is summed once per model on
the grid's m values, so a step costs one interpolation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sim.catalogue import Model
from sim.errors import CatalogueError

FloatArray = NDArray[np.float64]
#: The packaged grid of ``gpu``, relative to the ``sim`` package.
GRID_FILE = "data/gemm_grid_{gpu}.npz"
#: Weight precisions of a model -> the grid's dtype key.
GRID_DTYPES = {"bf16": "bf16", "fp8": "fp8"}


def _segment(x: FloatArray, grid: FloatArray) -> tuple[NDArray[np.int64], FloatArray]:
    """Index of the grid segment each ``x`` falls in (the first or last one outside the grid)
    and the position in it; the position runs past 0 or 1 outside, which extrapolates."""
    i = np.clip(np.searchsorted(grid, x, side="right") - 1, 0, grid.size - 2)
    w = (x - grid[i]) / (grid[i + 1] - grid[i])
    return i, w


@dataclass(frozen=True)
class GemmGrid:
    """Measured GEMM latency of one dtype on one GPU over a full (m, n, k) grid.

    ``log_t[a, b, c]`` is ``log`` seconds of one call with ``m[a]`` rows, ``n[b]`` outputs and
    ``k[c]`` inputs.
    """

    m: FloatArray
    n: FloatArray
    k: FloatArray
    log_t: FloatArray

    def curve_s(self, n: float, k: float) -> FloatArray:
        """Seconds of one ``n × k`` GEMM at every grid m (interpolated in log n and log k)."""
        if n <= 0 or k <= 0:
            raise ValueError(f"GEMM shape must be positive, got n={n}, k={k}")
        (i,), (u,) = _segment(np.log([float(n)]), np.log(self.n))
        (j,), (v,) = _segment(np.log([float(k)]), np.log(self.k))
        t = self.log_t
        log_t = (
            (1 - u) * (1 - v) * t[:, i, j]
            + u * (1 - v) * t[:, i + 1, j]
            + (1 - u) * v * t[:, i, j + 1]
            + u * v * t[:, i + 1, j + 1]
        )
        return np.asarray(np.exp(log_t), dtype=np.float64)


@dataclass(frozen=True)
class LinearCurve:
    """Total seconds of a set of GEMMs against the rows ``m`` they multiply, on the grid's m."""

    m: FloatArray
    seconds: FloatArray

    def __call__(self, rows: ArrayLike) -> FloatArray:
        """Seconds at ``rows`` (array): log-log interpolation, extrapolated beyond the grid; 0
        where no row is computed."""
        r = np.asarray(rows, dtype=np.float64)
        safe = np.maximum(r, 1.0)
        log_m, log_s = np.log(self.m), np.log(self.seconds)
        i, w = _segment(np.log(safe), log_m)
        out = np.exp(log_s[i] + w * (log_s[i + 1] - log_s[i]))
        return np.where(r > 0, out, 0.0)


@cache
def _load(gpu: str) -> dict[str, Any] | None:
    # Parsed once per process: package data does not change while running.
    path = resources.files("sim").joinpath(GRID_FILE.format(gpu=gpu))
    if not path.is_file():
        return None
    with path.open("rb") as handle:
        data = np.load(handle, allow_pickle=False)
        loaded = {name: np.asarray(data[name]) for name in data.files}
    where = f"sim/{GRID_FILE.format(gpu=gpu)}"
    meta = json.loads(str(loaded.pop("meta")))
    if meta.get("gpu") != gpu:
        raise CatalogueError(f"{where}: meta.gpu names {meta.get('gpu')!r}")
    for axis in ("m", "n", "k"):
        values = loaded[axis]
        if values.ndim != 1 or values.size < 2 or np.any(np.diff(values) <= 0):
            raise CatalogueError(f"{where}: {axis} must be an increasing list of 2 or more sizes")
    shape = (loaded["m"].size, loaded["n"].size, loaded["k"].size)
    for dtype in meta["dtypes"]:
        table = loaded[dtype]
        if table.shape != shape or not np.all(np.isfinite(table)) or np.any(table <= 0):
            raise CatalogueError(f"{where}: {dtype} must be {shape} positive latencies")
    return {"meta": meta, **loaded}


def gemm_grid(gpu: str, dtype: str) -> GemmGrid | None:
    """The measured grid of ``dtype`` (``bf16``, ``fp8``) on ``gpu``, or None if not measured.

    Raise CatalogueError if the packaged file is malformed.
    """
    data = _load(gpu)
    if data is None or dtype not in data["meta"]["dtypes"]:
        return None
    return GemmGrid(
        np.asarray(data["m"], np.float64),
        np.asarray(data["n"], np.float64),
        np.asarray(data["k"], np.float64),
        np.log(np.asarray(data[dtype], np.float64)),
    )


def grid_source(gpu: str) -> dict[str, Any] | None:
    """The provenance written with ``gpu``'s grid (source, rows, method), or None."""
    data = _load(gpu)
    return None if data is None else dict(data["meta"])


def decoder_shapes(model: Model, tp: int) -> tuple[tuple[int, int], ...]:
    """(n, k) of one dense decoder layer's GEMMs on one of ``tp`` GPUs: QKV, O, gate-up, down."""
    s = model.spec
    qkv = (s.num_heads + 2 * s.num_kv_heads) * s.head_dim
    return (
        (max(1, qkv // tp), s.hidden_size),
        (s.hidden_size, max(1, s.num_heads * s.head_dim // tp)),
        (max(1, 2 * s.intermediate_size // tp), s.hidden_size),
        (s.hidden_size, max(1, s.intermediate_size // tp)),
    )


def dense_linear_curves(
    model: Model, tp: int, body: GemmGrid, head: GemmGrid
) -> tuple[LinearCurve, LinearCurve]:
    """The decoder's GEMMs (``L`` layers, ``body``'s dtype) and the lm_head (``head``'s dtype)
    of a dense ``model`` at ``tp``, each against its rows. Raise ValueError for an MoE model."""
    if model.spec.num_experts > 1:
        raise ValueError(f"{model.name} is a mixture of experts: its experts are fused-MoE kernels")
    layer = sum(body.curve_s(n, k) for n, k in decoder_shapes(model, tp))
    s = model.spec
    lm_head = head.curve_s(max(1, s.vocab_size // tp), s.hidden_size)
    return (
        LinearCurve(body.m, s.num_layers * np.asarray(layer, dtype=np.float64)),
        LinearCurve(head.m, lm_head),
    )
