"""Write the measured GEMM grid of each GPU that has GEMM microbenchmarks (``sim/gemm_grid.py``).

For every dtype the cost model prices from a grid (bf16, per-tensor fp8) the median latency of
each measured (m, n, k) is kept on the full grid of n and k sizes at the row counts m = 1-16 and
every measured multiple of 16 (the odd sizes 17, 33, ... just past a tile edge are dropped: they
measure the padding step, which the interpolation between tile multiples would turn into a ramp).
Along m the latency is made non-decreasing (more rows never take less time: a kernel for fewer rows
could run padded) by the least-squares non-decreasing fit of the log latencies (pool-adjacent-
violators, :func:`monotone_in_m`). Where readings fall with m (the H200's per-tensor fp8 readings
from 17 to 64 rows; docs/kernels.md, "The H200's tables against the H100's") the run is set to its
mean. A running maximum, used before, carried each slow reading up to every larger m (a third of
the cells lifted by more than 2 %, biased slow by the readings' noise); on the rows the grid
leaves out (odd m sizes) the fit's median error is 3.2 / 4.1 % (H100 bf16 / fp8) and 3.9 / 5.1 %
(H200) against the running maximum's 3.7 / 4.6 and 4.5 / 5.5 %. The one missing cell
(65536 × 65536 at some m) is extrapolated from its neighbours along k. Usage::

    python -m tools.kernel_gemm_grid --shared PATH [--write]

Without ``--write`` the grid's size and its agreement with the rows it was built from are printed.
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import isotonic_regression

from sim.gemm_grid import GRID_FILE, GemmGrid
from tools.kernel_sources import COMMIT, GPUS, REPOSITORY, read_table

#: The table's dtype names -> the grid's keys.
DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}
SIM_DIR = Path(__file__).resolve().parents[1] / "sim"


def kept_rows(m: np.ndarray) -> np.ndarray:
    """The row counts the grid keeps: 1-16 and multiples of 16."""
    return np.array(sorted({int(x) for x in m if x <= 16 or x % 16 == 0}), dtype=np.int64)


def monotone_in_m(cube: np.ndarray) -> np.ndarray:
    """The least-squares non-decreasing fit along m (axis 0) of the log latencies, per (n, k).

    Pool-adjacent-violators (Barlow, Bartholomew, Bremner and Brunk, *Statistical Inference under
    Order Restrictions*, 1972; ``scipy.optimize.isotonic_regression``): where a reading is slower
    than a later one, the run of readings that violates the order is replaced by its mean, so a
    slow reading and the faster ones after it meet in the middle instead of the slow one being
    carried up to every larger m (a running maximum) or the fast one down (a running minimum).
    Fitting the logarithm weighs a violation by its relative size, as the noise of a latency is.
    """
    logs = np.log(cube)
    fitted = np.empty_like(logs)
    for b in range(cube.shape[1]):
        for c in range(cube.shape[2]):
            fitted[:, b, c] = isotonic_regression(logs[:, b, c], increasing=True).x
    return np.exp(fitted)


def build(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """The grid arrays (``m``, ``n``, ``k`` and one latency cube per dtype, seconds)."""
    out: dict[str, np.ndarray] = {}
    for raw, key in DTYPES.items():
        rows = frame[frame.gemm_dtype == raw]
        medians = rows.groupby(["m", "n", "k"]).latency.median() * 1e-3  # ms -> s
        m = kept_rows(medians.index.get_level_values(0).unique().to_numpy())
        n = np.sort(medians.index.get_level_values(1).unique().to_numpy())
        k = np.sort(medians.index.get_level_values(2).unique().to_numpy())
        full = pd.MultiIndex.from_product([m, n, k], names=["m", "n", "k"])
        cube = medians.reindex(full).to_numpy().reshape(m.size, n.size, k.size).copy()
        # A missing cell: log-log extrapolation along k from the two cells below it.
        for a, b, c in zip(*np.nonzero(~np.isfinite(cube)), strict=True):
            slope = np.log(cube[a, b, c - 1] / cube[a, b, c - 2]) / np.log(k[c - 1] / k[c - 2])
            cube[a, b, c] = cube[a, b, c - 1] * (k[c] / k[c - 1]) ** slope
        out.update(m=m, n=n, k=k)
        out[key] = monotone_in_m(cube)
    return out


def agreement(
    gpu_arrays: dict[str, np.ndarray], frame: pd.DataFrame, key: str
) -> tuple[float, float]:
    """Median and 95th percentile of |relative error| of the grid against every measured row at
    off-grid m sizes."""
    raw = {v: k for k, v in DTYPES.items()}[key]
    rows = frame[(frame.gemm_dtype == raw) & ~frame.m.isin(gpu_arrays["m"])]
    rows = rows.groupby(["m", "n", "k"], as_index=False).latency.median()
    grid = _grid_from(gpu_arrays, key)
    errors = []
    for (n, k), part in rows.groupby(["n", "k"]):
        curve = grid.curve_s(float(n), float(k))
        log_m = np.log(grid.m)
        predicted = np.exp(np.interp(np.log(part.m.to_numpy()), log_m, np.log(curve)))
        errors.append(np.abs(predicted / (part.latency.to_numpy() * 1e-3) - 1))
    every = np.concatenate(errors)
    return float(np.median(every)), float(np.percentile(every, 95))


def _grid_from(arrays: dict[str, np.ndarray], key: str) -> GemmGrid:
    return GemmGrid(
        arrays["m"].astype(float),
        arrays["n"].astype(float),
        arrays["k"].astype(float),
        np.log(arrays[key]),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--shared", type=Path, required=True, help="the data folder's parent")
    parser.add_argument("--write", action="store_true", help="write sim/data/gemm_grid_*.npz")
    args = parser.parse_args(argv)
    for gpu in GPUS:
        found = read_table(args.shared, gpu, "gemm")
        if found is None:
            print(f"{gpu}: no GEMM table collected; the roofline prices its linear layers")
            continue
        frame, upstream = found
        arrays = build(frame)
        meta = {
            "gpu": gpu,
            "dtypes": sorted(DTYPES.values()),
            "source": upstream,
            "repository": REPOSITORY,
            "commit": COMMIT,
            "rows": "median latency per (m, n, k); m = 1-16 and multiples of 16; non-decreasing "
            "in m (least-squares isotonic fit of the log latencies)",
            "written_by": "python -m tools.kernel_gemm_grid --shared PATH --write",
        }
        for key in sorted(DTYPES.values()):
            median, p95 = agreement(arrays, frame, key)
            meta[f"{key}_off_grid_median_abs_error"] = round(median, 4)
            meta[f"{key}_off_grid_p95_abs_error"] = round(p95, 4)
        shape = (arrays["m"].size, arrays["n"].size, arrays["k"].size)
        print(f"{gpu}: grid {shape} from {upstream}; {json.dumps(meta)}")
        if args.write:
            buffer = io.BytesIO()
            np.savez_compressed(
                buffer,
                meta=np.array(json.dumps(meta)),
                m=arrays["m"],
                n=arrays["n"],
                k=arrays["k"],
                **{key: arrays[key].astype(np.float64) for key in DTYPES.values()},
            )
            path = SIM_DIR / GRID_FILE.format(gpu=gpu)
            temporary = path.with_suffix(".tmp")
            temporary.write_bytes(buffer.getvalue())
            temporary.replace(path)
            print(f"  wrote {path.relative_to(SIM_DIR.parent)}")


if __name__ == "__main__":
    main()
