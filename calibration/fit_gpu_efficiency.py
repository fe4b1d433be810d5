"""Fit the RTX PRO 6000's linear-layer efficiency to its measured operator timings.

LLMServingSim's RTX PRO 6000 Blackwell Server Edition bundle (``dense.csv``, vLLM 0.19, Llama-3.1-8B
bf16, TP1) times the fused GEMMs vLLM runs — ``qkv_proj``, ``o_proj``, ``gate_up_proj``,
``down_proj`` — for one layer at each token count 1..2048. One forward's body is 32 layers of their
sum; the lm_head is profiled per sequence in another file and left out, so the profile is priced as
a body-only forward (:func:`calibration.operator_fit.predict_s`). The four fields of
:class:`sim.cost_model.Efficiency` are then fitted by the same joint soft-L1 least squares, octave
weights and bootstrap as the H100 SXM (:func:`calibration.operator_fit.fit_efficiency`), against the
catalogue's published peaks (1597 GB/s, 503.8 dense bf16 TFLOPS). Run
``python -m calibration.fit_gpu_efficiency`` to print the entry of ``hardware_efficiency.yaml``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from calibration.hardware_efficiency import FIELDS, default_shared, round_field
from calibration.operator_fit import (
    NUM_BOOTSTRAP,
    ForwardProfile,
    OperatorFit,
    fit_efficiency,
    range_errors,
)
from sim.catalogue import get_gpu, get_model
from sim.errors import CalibrationError

GPU_NAME = "rtx-pro-6000"
BUNDLE_DIR = Path(
    "data/gpu-profiles/llmservingsim/profiler/perf/RTXPRO6000/meta-llama/Llama-3.1-8B/bf16/tp1"
)
FUSED_GEMMS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
BOOTSTRAP_SEED = 20260
SOURCE = (
    "Fitted by calibration/fit_gpu_efficiency.py to LLMServingSim RTX PRO 6000 Blackwell Server "
    "Edition fused-GEMM latencies, vLLM 0.19, Llama-3.1-8B bf16 TP1 (casys-kaist/LLMServingSim "
    "5daddb2, MIT)"
)


def load_dense_profile(shared: Path) -> ForwardProfile:
    """One Llama-3.1-8B forward's body GEMM time per token count from the bundle's ``dense.csv``.

    Raise CalibrationError if the file is missing, unreadable or lacks one of the fused GEMMs.
    """
    path = shared / BUNDLE_DIR / "dense.csv"
    try:
        table = pd.read_csv(path)
    except (OSError, pd.errors.ParserError) as exc:
        raise CalibrationError(f"{path}: cannot read operator profile ({exc})") from None
    wide = table.pivot_table(index="tokens", columns="layer", values="time_us") * 1e-6
    missing = sorted(set(FUSED_GEMMS) - set(wide.columns))
    if missing:
        raise CalibrationError(f"{path}: operators {missing} not profiled")
    model = get_model("llama-3.1-8b")
    body_s = model.spec.num_layers * wide[list(FUSED_GEMMS)].sum(axis=1)
    return ForwardProfile(
        "LLMServingSim RTX PRO 6000 Llama-3.1-8B TP1",
        model,
        1,
        wide.index.to_numpy(np.float64),
        body_s.to_numpy(np.float64),
        includes_lm_head=False,
    )


def fit_rtx_pro_6000(shared: Path, num_bootstrap: int = NUM_BOOTSTRAP) -> OperatorFit:
    """The RTX PRO 6000's Efficiency with bootstrap 95 % intervals.

    Raise CalibrationError if the profile cannot be read or the optimiser fails.
    """
    profile = load_dense_profile(shared)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    return fit_efficiency(profile, get_gpu(GPU_NAME), rng, num_bootstrap)


def efficiency_entry(fit: OperatorFit) -> dict[str, Any]:
    """The ``hardware_efficiency.yaml`` entry of a fit, rounded as the table stores it."""
    errors = range_errors(fit.profile, fit.efficiency, get_gpu(GPU_NAME))
    worst = max(abs(row.mean) for row in errors)
    return {
        **{f: round_field(f, getattr(fit.efficiency, f)) for f in FIELDS},
        "ci95": {f: [round_field(f, v) for v in fit.ci95[f]] for f in FIELDS},
        "method": (
            "joint least squares of all four fields on the relative error of the body GEMMs "
            "(fused qkv, o, gate_up, down; lm_head not profiled per token), soft_l1 loss (scale "
            f"0.05), 1/N weights, N = 1..2048; {NUM_BOOTSTRAP}-resample bootstrap over N (seed "
            f"{BOOTSTRAP_SEED}); mean error per token range within {worst:.1%}; rounded"
        ),
        "source": [SOURCE],
    }


def main(argv: list[str] | None = None) -> int:
    """Print the fitted entry as YAML."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shared", type=Path, default=default_shared())
    args = parser.parse_args(argv)
    fit = fit_rtx_pro_6000(args.shared)
    print(yaml.safe_dump({GPU_NAME: efficiency_entry(fit)}, sort_keys=False, width=100))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
