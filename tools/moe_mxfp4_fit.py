"""Fit the MXFP4 expert kernel of Hopper (triton_kernels' matmul_ogs) to its measured rows.

vLLM and SGLang both run gpt-oss's MXFP4 experts on H100/H200 through OpenAI's Triton MoE kernels
(``matmul_ogs``: bf16 activations times swizzled MXFP4 weights, upcast inside the kernel), not the
bf16 ``fused_moe`` kernel whose fit prices other weight-only formats. AIConfigurator measured that
kernel in vLLM 0.24.0 on an H100 and on an H200 for both gpt-oss shapes (H 2880, I 2880, top-4 of
128 or 32 experts); each GPU is fitted on its own rows. This fits the fused-MoE roofline of
:mod:`sim.moe_kernel` to those rows with the machinery of :mod:`tools.kernel_moe` (the collector's
own routing counts, soft-L1 least squares on log ratios, a 100-resample bootstrap over
configurations, each model shape held out in turn), with MXFP4's 4.25 bits a weight and the FLOPs
at the bf16 peak, and prints the ``mxfp4_matmul_ogs`` block of ``sim/data/moe_kernels.yaml``. Only
deployments of up to 8 GPUs (``moe_tp × moe_ep <= 8``) are fitted: those are the ones the
catalogue's gpt-oss runs on.

The rows fitted ship as ``tools/data/moe_matmul_ogs_<system>_vllm0.24.0.csv`` (:data:`EXTRACTS`:
the medians of the 378 balanced keys, milliseconds, taken unchanged from AIConfigurator's
``aic-core/src/aiconfigurator_core/systems/data/<system>/moe/vllm/0.24.0/moe_perf.parquet``,
``<system>`` ``h100_sxm`` or ``h200_sxm``, at the commit of :data:`tools.kernel_sources.COMMIT`,
Apache-2.0). The H200's rows take 0.98 of the H100's time (median over the keys): the kernel does
not speed up with the H200's HBM3e, so its fractions of peak are not carried from the H100.

Usage: ``python3 tools/moe_mxfp4_fit.py [--gpu h200]`` fits the shipped rows of that GPU (default
h100-sxm); ``--extract-from PARQUET`` first rewrites them from that file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.catalogue import get_gpu
from sim.moe_kernel import moe_activation_bytes
from sim.precision import WEIGHT_FORMATS
from tools.kernel_fits import (
    Roofline,
    agreement_fields,
    balanced_routing,
    fit_kernel,
    written,
)
from tools.kernel_moe import KEY, NAMES, SHAPE
from tools.kernel_sources import COMMIT, REPOSITORY

REL = "moe/vllm/0.24.0/moe_perf"
KERNEL_SOURCE = "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"
MAX_GPUS = 8
GPU = "h100-sxm"

#: Catalogue GPU -> AIConfigurator's system folder of its rows.
SYSTEMS = {"h100-sxm": "h100_sxm", "h200": "h200_sxm"}
#: The fitted rows of each GPU, shipped with the project (the module docstring gives the source).
EXTRACTS = {
    gpu: Path(__file__).resolve().parent
    / "data"
    / f"moe_matmul_ogs_{system.split('_')[0]}_vllm0.24.0.csv"
    for gpu, system in SYSTEMS.items()
}
EXTRACT = EXTRACTS[GPU]


def load_rows(path: Path = EXTRACT) -> pd.DataFrame:
    """The shipped rows: one median latency (ms) per kernel key."""
    return pd.read_csv(path)


def extract_rows(parquet: Path) -> pd.DataFrame:
    """The balanced matmul_ogs rows of up to :data:`MAX_GPUS` GPUs in AIConfigurator's collection
    ``parquet``, medians of repeated keys."""
    frame = pd.read_parquet(parquet)
    rows = frame[
        (frame.kernel_source == KERNEL_SOURCE)
        & (frame.moe_dtype == "w4a16_mxfp4")
        & (frame.distribution == "balanced")
    ]
    rows = rows[rows.moe_tp_size * rows.moe_ep_size <= MAX_GPUS]
    return rows.groupby(KEY, as_index=False).latency.median()


def roofline(rows: pd.DataFrame, gpu: str = GPU) -> Roofline:
    """The rows' bytes and FLOPs terms on ``gpu``'s peaks: MXFP4 weights of the experts the
    collector touched, bf16 activations (:func:`sim.moe_kernel.moe_activation_bytes`), FLOPs at
    the bf16 peak."""
    spec = get_gpu(gpu)
    weight_bytes = WEIGHT_FORMATS["mxfp4"].bytes_per_weight
    t = rows.num_tokens.to_numpy(dtype=np.float64)
    k = rows.topk.to_numpy()
    hidden = rows.hidden_size.to_numpy(dtype=np.float64)
    inter = rows.inter_size.to_numpy() / rows.moe_tp_size.to_numpy()
    keys = zip(rows.num_tokens, rows.num_experts, k, rows.moe_ep_size, strict=True)
    counts = np.array([balanced_routing(*key) for key in keys], dtype=np.float64)
    distinct, local = counts[:, 0], counts[:, 1]
    weight = distinct * 3.0 * hidden * inter * weight_bytes
    act = moe_activation_bytes(t * k, local, hidden, inter)
    config = rows.groupby([*SHAPE, "moe_tp_size", "moe_ep_size"]).ngroup().to_numpy()
    return Roofline(
        (weight + act) / spec.hbm_bandwidth_bytes_per_s,
        2.0 * local * 3.0 * hidden * inter / spec.bf16_dense_flops,
        rows.latency.to_numpy(dtype=np.float64) * 1e-3,
        config,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpu", choices=sorted(SYSTEMS), default=GPU)
    parser.add_argument(
        "--extract-from",
        type=Path,
        help=f"AIConfigurator's <system>/{REL}.parquet: rewrite the GPU's rows from it first",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.extract_from is not None:
        extract_rows(args.extract_from).to_csv(EXTRACTS[args.gpu], index=False)
    rows = load_rows(EXTRACTS[args.gpu])
    folds = rows.num_experts.astype("category").cat.codes.to_numpy()
    fitted = fit_kernel(roofline(rows, args.gpu), folds, args.seed)
    params, ci = written(fitted, NAMES)
    print(f"# {len(rows)} keys, shapes (experts): {sorted(rows.num_experts.unique())}")
    print(f"source: {REPOSITORY}@{COMMIT[:10]}: .../{SYSTEMS[args.gpu]}/{REL}.parquet")
    for name, value in params.items():
        print(f"{name}: {value}")
    print(f"ci95: {ci}")
    print(f"agreement: {agreement_fields(fitted)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
