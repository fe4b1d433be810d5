"""Where the kernel microbenchmarks live, locally and upstream, and how to read them.

The measurements are AIConfigurator's collections of vLLM 0.19.0 kernels on H100 SXM and H200 SXM
(ai-dynamo/aiconfigurator, Apache-2.0). Locally they sit under ``--shared`` as CSV conversions of
the upstream parquet files; every table written cites the upstream path and commit.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.errors import CalibrationError

REPOSITORY = "ai-dynamo/aiconfigurator"
COMMIT = "095f58a51c4ca8e61b66ec108d86f223f8d559ce"
LICENCE = "Apache-2.0"
ENGINE = "vLLM 0.19.0"
LOCAL_ROOT = Path("data/under-load/aiconfigurator")
#: Catalogue GPU -> (local folder, upstream system folder, device string of the rows).
GPUS = {
    "h100-sxm": ("h100_sxm_kernels", "h100_sxm", "NVIDIA H100 80GB HBM3"),
    "h200": ("h200_sxm_kernels", "h200_sxm", "NVIDIA H200"),
}
TABLES = {
    "custom_allreduce": "comm/vllm/0.19.0/custom_allreduce_perf",
    "moe": "moe/vllm/0.19.0/moe_perf",
    "gemm": "gemm/vllm/0.19.0/gemm_perf",
    "decode_attention": "attention/vllm/0.19.0/generation_attention_perf",
    "prefill_attention": "attention/vllm/0.19.0/context_attention_perf",
}
NCCL_VERSIONS = ("2.27.3", "2.29.2")
#: Tables collected for a GPU that are not fitted, each with the reason written under
#: ``not_measured``: the H200's attention rows contradict the GPU they were measured on.
SET_ASIDE = {
    ("h200", "prefill_attention"): (
        "collected but set aside: 5,801 of the 18,716 full-attention keys of the H200's "
        "context_attention_perf imply more than the H200's 989 TFLOPS dense bf16 peak (up to "
        "257 PFLOPS: 0.075 ms for the 17.6 TFLOP of batch 4 x 16,384 tokens x 64 heads, which the "
        "H100 measured at 28.9 ms); the fit ends on its bound with a 427 % mean error"
    ),
    ("h200", "decode_attention"): (
        "collected but set aside: at 8,191 cached tokens or more the H200's "
        "generation_attention_perf rows take 1.42x the H100's time on the same keys (median of "
        "2,888 keys; fp8 KV at batch 4 x 131,071 tokens reads 0.40 TB/s against the H100's 2.11), "
        "against the H200's 1.43x the bandwidth; up to 511 tokens the two GPUs agree (0.995x, "
        "10-90 % 0.956-1.026x, 15,212 keys)"
    ),
}


def upstream(gpu: str, rel: str) -> str:
    """The upstream path of a table, with the commit, as cited in the written files."""
    system = GPUS[gpu][1]
    return (
        f"{REPOSITORY}@{COMMIT[:10]}: aic-core/src/aiconfigurator_core/systems/data/"
        f"{system}/{rel}.parquet"
    )


def _read(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise CalibrationError(f"{path}: cannot be read as CSV ({exc})") from None


def read_table(shared: Path, gpu: str, name: str) -> tuple[pd.DataFrame, str] | None:
    """The rows of table ``name`` for ``gpu`` and their upstream path, or None if not collected
    or set aside (:data:`SET_ASIDE`).

    Raise CalibrationError if a file exists but cannot be read or holds another device's rows.
    """
    if (gpu, name) in SET_ASIDE:
        return None
    rel = TABLES[name]
    base = shared / LOCAL_ROOT / GPUS[gpu][0] / rel
    for path in (base.with_suffix(".csv"), Path(f"{base}.csv.gz")):
        if path.is_file():
            frame = _read(path)
            _check_device(frame, path, gpu)
            return frame, upstream(gpu, rel)
    return None


def read_nccl(shared: Path, gpu: str) -> tuple[pd.DataFrame, str] | None:
    """nccl-tests rows of every collected NCCL folder of ``gpu``, pooled, and their paths.

    The H100 folder named 2.27.3 carries version 2.29.2 in its rows, as upstream; both are pooled
    and repeated keys reduced to their median by the caller. Raise CalibrationError as above.
    """
    frames, paths = [], []
    for version in NCCL_VERSIONS:
        rel = f"comm/nccl/{version}/nccl_perf"
        path = shared / LOCAL_ROOT / GPUS[gpu][0] / f"{rel}.csv"
        if path.is_file():
            frame = _read(path)
            _check_device(frame, path, gpu)
            frames.append(frame)
            paths.append(upstream(gpu, rel))
    if not frames:
        return None
    return pd.concat(frames, ignore_index=True), "; ".join(paths)


def _check_device(frame: pd.DataFrame, path: Path, gpu: str) -> None:
    devices = set(frame.get("device", pd.Series(dtype=str)).unique())
    if devices != {GPUS[gpu][2]}:
        raise CalibrationError(f"{path}: expected device {GPUS[gpu][2]!r} only, found {devices}")
