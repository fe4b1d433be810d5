"""Predicted against measured: how well a fitted engine profile replays a real run.

:func:`compare` simulates the run with given overheads and sets mean, median and p99 TTFT and TPOT
of a subset of its requests beside the measured ones. :func:`check_run` reports that for every
request with the profile fitted on all of them (in sample), and separately for a random half of the
requests when the overheads are refitted on the other half only (out of sample). All requests are
always simulated together — they share the batch — and the halves only choose which are compared.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from calibration.fit_replay import MeasuredRun, ReplayFit, fit_overheads, simulate
from sim.vllm_bench import vllm_key

SPLIT_SEED = 20263
STATS = ("mean", "p50", "p99")


def _stat(values: np.ndarray, name: str) -> float:
    finite = values[np.isfinite(values)]
    if name == "mean":
        return float(finite.mean())
    return float(np.percentile(finite, 50 if name == "p50" else 99))


def compare(
    run: MeasuredRun,
    gpu: str,
    model: str,
    tp: int,
    overheads_s: tuple[float, float],
    index: np.ndarray,
) -> dict[str, dict[str, dict[str, float]]]:
    """Predicted and measured TTFT and TPOT statistics (ms) over the requests ``index``.

    Raise CalibrationError if the replay cannot run.
    """
    ttft, tpot = simulate(run, gpu, model, tp, overheads_s)
    table: dict[str, dict[str, dict[str, float]]] = {}
    for metric, predicted, measured in (
        ("ttft_ms", ttft, run.ttft_s),
        ("tpot_ms", tpot, run.tpot_s),
    ):
        table[metric] = {}
        for name in STATS:
            p, m = 1e3 * _stat(predicted[index], name), 1e3 * _stat(measured[index], name)
            table[metric][name] = {
                "predicted": round(p, 3),
                "measured": round(m, 3),
                "rel_error": round(p / m - 1.0, 4),
            }
    return table


def _overheads(fit: ReplayFit) -> tuple[float, float]:
    return fit.values["step_overhead_s"], fit.values["per_sequence_overhead_s"]


def check_run(run: MeasuredRun, gpu: str, model: str, tp: int, fit: ReplayFit) -> dict[str, Any]:
    """In-sample agreement of ``fit`` and out-of-sample agreement of a half-split refit.

    Raise CalibrationError if a replay or the refit fails.
    """
    every = np.arange(run.num_requests)
    rng = np.random.default_rng(SPLIT_SEED)
    order = rng.permutation(run.num_requests)
    fit_half, held_out = (
        np.sort(order[: run.num_requests // 2]),
        np.sort(order[run.num_requests // 2 :]),
    )
    half_fit = fit_overheads(run, gpu, model, tp, fit_half)
    return {
        "in_sample": {
            "requests": int(every.size),
            **compare(run, gpu, model, tp, _overheads(fit), every),
        },
        "out_of_sample": {
            "split": f"random half (seed {SPLIT_SEED}): fitted on {fit_half.size} requests, "
            f"compared on the other {held_out.size}",
            "fitted": {k: float(f"{v:.6g}") for k, v in half_fit.values.items()},
            "fit_half": compare(run, gpu, model, tp, _overheads(half_fit), fit_half),
            "held_out": compare(run, gpu, model, tp, _overheads(half_fit), held_out),
        },
    }


def format_check(check: dict[str, Any]) -> list[str]:
    """Text lines of a check: one line per metric and statistic, named by the keys of a
    ``vllm bench serve`` result file (``median_ttft_ms``), values in ms."""
    lines = []
    sections = (
        ("in sample", check["in_sample"]),
        ("held out", check["out_of_sample"]["held_out"]),
    )
    for title, section in sections:
        lines.append(f"{title}:")
        for metric in ("ttft_ms", "tpot_ms"):
            for name in STATS:
                row = section[metric][name]
                lines.append(
                    f"  {vllm_key(metric, name):16} predicted {row['predicted']:10.2f}  "
                    f"measured {row['measured']:10.2f}  error {row['rel_error']:+7.1%}"
                )
    return lines
