"""Transcribe the measured points of ``specsim validate``'s under-load rows into
``sim/data/validation_points.csv``.

Maintainer script: it reads the public measurements gathered in a data folder (``--shared PATH``,
the folder that holds ``data/under-load/``) and writes one CSV row per measured point, each with its
setup, value, unit and public source. The AIConfigurator and ISPASS rows are read here, the others
in a module per source (``blis_validation_points``, ``moe_validation_points``; the points quoted
from papers and threads, with their citation, in ``quoted_validation_points``). The simulator never
reads the data folder; it reads the CSV this script writes.

Run ``python tools/build_validation_points.py --shared PATH``.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

try:
    from tools.blis_validation_points import blis_sim_to_real, blis_training
    from tools.cpu_validation_points import cpu_points
    from tools.moe_validation_points import (
        AIC_ROUNDS,
        AIC_WARMUP_ROUNDS,
        aic_closed_loop,
        layout_of,
        moe_serving_points,
    )
    from tools.quoted_validation_points import (
        eagle3_tables,
        quoted_points,
        specdecode_bench_points,
        vllm_blog_points,
        vllm_v0_points,
    )
    from tools.sweep_validation_points import sweep_points
    from tools.validation_rows import COLUMNS, _read, _row
except ModuleNotFoundError:  # run as a script: tools/ itself is on the path
    from blis_validation_points import blis_sim_to_real, blis_training  # type: ignore[no-redef]
    from cpu_validation_points import cpu_points  # type: ignore[no-redef]
    from moe_validation_points import (  # type: ignore[no-redef]
        AIC_ROUNDS,
        AIC_WARMUP_ROUNDS,
        aic_closed_loop,
        layout_of,
        moe_serving_points,
    )
    from quoted_validation_points import (  # type: ignore[no-redef]
        eagle3_tables,
        quoted_points,
        specdecode_bench_points,
        vllm_blog_points,
        vllm_v0_points,
    )
    from sweep_validation_points import sweep_points  # type: ignore[no-redef]
    from validation_rows import COLUMNS, _read, _row  # type: ignore[no-redef]

OUT = Path(__file__).resolve().parents[1] / "sim" / "data" / "validation_points.csv"

AIC = (
    "ai-dynamo/aiconfigurator @ 095f58a51c4ca8e61b66ec108d86f223f8d559ce, "
    "aic-core/src/aiconfigurator_core/systems/silicon_sample.csv, row id {id}"
)
#: Hugging Face ids of the silicon rows and their catalogue names.
AIC_MODELS = {
    "Qwen/Qwen3-32B": "qwen3-32b",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
}
ISPASS = (
    "casys-kaist/LLMServingSim @ 04bdeb8b6fb3 (ISPASS 2026 artifact), "
    "evaluation/figure_8/reference/{scenario}_latency.tsv, row framework=vLLM"
)
#: Qwen3-32B (bf16) shapes kept: (prompt, output) tokens per engine.
VLLM_QWEN_SHAPES = ((1024, 512), (1024, 1024), (4096, 512), (4096, 1024))
SGLANG_QWEN_SHAPES = ((1024, 256), (1024, 512), (2048, 256), (2048, 512))
#: The TPOT rows calibration/host_cost_fit.py fits each preset's host costs on (its FIT_SETS).
HOST_FIT_ROWS = {
    ("vllm", "0.12.0"): ((1024, 512), (1024, 1024)),
    ("sglang", "0.5.1.post1"): ((1024, 256), (1024, 512)),
}


def host_fit_of(row: dict[str, str]) -> str:
    """``host_cost_fit`` for a silicon row the host-cost fit uses, else ``""``."""
    if row["model_path"] != "Qwen/Qwen3-32B" or row["precision"] or row["system"] != "h100_sxm":
        return ""
    shapes = HOST_FIT_ROWS.get((row["backend"], row["backend_version"]), ())
    return "host_cost_fit" if (int(row["isl"]), int(row["osl"])) in shapes else ""


#: The source's benchmark harness per concurrency c (ai-dynamo/aiconfigurator @ 095f58a51c,
#: src/aiconfigurator/generator/config/backend_templates/benchmark/bench_run.sh.j2):
#: ``aiperf profile --concurrency c --num-requests c*MULTI_ROUND`` with MULTI_ROUND 20 by default,
#: after ``--warmup-request-count 2*c`` that aiperf leaves out of its statistics; random synthetic
#: prompts, ignore_eos, fixed lengths. Its sflow variant (src/aiconfigurator/generator/sflow.py)
#: measures the same c*20 after a warm-up of c requests; the template's 2*c is used. Its
#: deployment guide (docs/dynamo_deployment_guide.md, since 2025-10) gives the reason: many
#: requests per client "to reduce the impact of first batch of requests", and prefix cache reuse
#: deliberately disabled. The silicon rows do not record their own request counts.
AIC_HARNESS_NOTE = (
    "requests per run not recorded with the row: the source's aiperf harness simulated "
    f"({AIC_WARMUP_ROUNDS} x concurrency warm-up left out, then {AIC_ROUNDS} x concurrency "
    "measured; bench_run.sh.j2 @ 095f58a51c); prefix cache reuse disabled by the source "
    "(docs/dynamo_deployment_guide.md)"
)


#: Checkpoints whose quantization config asks for an FP8 KV cache. The source's own tooling runs
#: them so: aiconfigurator infers the KV-cache mode from the checkpoint's ``hf_quant_config.json``
#: (``kv_cache_quant_algo``; aic-core/src/aiconfigurator_core/sdk/utils.py @ 095f58a51c) and its
#: deployment generator passes it as ``--kv-cache-dtype`` (src/aiconfigurator/generator/
#: module_bridge.py, config/backend_config_mapping.yaml). NVIDIA's ModelOpt FP8 Llama-3.1
#: checkpoints state ``"kv_cache_quant_algo": "FP8"`` (the 70B one's file is copied in the
#: source's model_configs/ as nvidia--Llama-3.1-70B-Instruct-FP8_hf_quant_config.json);
#: the 8B one's file is not in the source and is taken to say the same (an inference). vLLM
#: itself resolves ``--kv-cache-dtype auto`` from that field only since PR #30785 (2025-12-16,
#: after 0.12.0). The other FP8 rows quantize meta-llama's bf16 checkpoint online: no KV directive.
FP8_KV_CHECKPOINTS = {"nvidia/Llama-3.1-8B-Instruct-FP8"}
FP8_KV_NOTE = (
    "KV cache fp8: NVIDIA's ModelOpt FP8 checkpoint (kv_cache_quant_algo FP8 as its 70B sibling's "
    "hf_quant_config.json states; the 8B file taken to match), which the source's generator "
    "passes to vLLM as --kv-cache-dtype (aiconfigurator sdk/utils.py, generator/module_bridge.py "
    "@ 095f58a51c)"
)


def aiconfigurator(shared: Path) -> Iterator[dict[str, Any]]:
    """TTFT and TPOT of vLLM 0.12.0 and SGLang 0.5.1 serving Qwen3-32B (bf16) on H100, Llama-3.1-70B
    FP8 on H100 and H200, Llama-3.1-8B FP8 on H200 (vLLM 0.12.0, out of sample: a second model
    family on the engine version the host terms were fitted on), and a few FP8/MoE rows kept as
    not expressible."""
    rows = _read(shared / "under-load" / "aiconfigurator" / "silicon" / "silicon_sample.csv")
    kept = []
    for row in rows:
        if row["system"] != "h100_sxm" or row["mode"] != "agg":
            continue
        model, backend = row["model_path"], row["backend"]
        shape = (int(row["isl"]), int(row["osl"]))
        if model == "Qwen/Qwen3-32B" and not row["precision"]:
            version = (backend, row["backend_version"])
            vllm = version == ("vllm", "0.12.0") and shape in VLLM_QWEN_SHAPES
            sglang = version == ("sglang", "0.5.1.post1") and shape in SGLANG_QWEN_SHAPES
            if vllm or sglang:
                kept.append(row)
        elif model == "meta-llama/Llama-3.1-70B" and shape == (1024, 1024) and backend == "vllm":
            kept.append(row)
    h200 = [
        r
        for r in rows
        if r["system"] == "h200_sxm"
        and r["mode"] == "agg"
        and r["backend"] == "vllm"
        and (
            (
                r["model_path"] == "Qwen/Qwen3-235B-A22B-FP8"
                and (int(r["isl"]), int(r["osl"])) == (1000, 1000)
            )
            or (
                r["model_path"] == "meta-llama/Llama-3.1-70B"
                and (int(r["isl"]), int(r["osl"])) == (1024, 1024)
            )
            or (
                r["model_path"] == "nvidia/Llama-3.1-8B-Instruct-FP8"
                and r["backend_version"] == "0.12.0"
            )
        )
    ]
    for row in kept + h200:
        concurrency = int(float(row["batch_size"]))
        tp = int(float(row["tp_size"]))
        # An MoE row's MoE split may span more GPUs than its attention TP (moe_validation_points).
        num_gpus, attention_tp, ep = layout_of(row)
        precision = row["precision"] or "bf16"
        model = AIC_MODELS.get(row["model_path"], row["model_path"])
        engine = f"{row['backend']} {row['backend_version'] or '(version not stated)'}"
        preset = "sglang-0.5" if row["backend"] == "sglang" else "vllm-v1"
        gpu = {"h100_sxm": "h100-sxm", "h200_sxm": "h200"}[row["system"]]
        note = (
            "precision column empty in the source: the checkpoint's bf16 weights"
            if not row["precision"]
            else f"gemm {row['gemm_quant_mode']}, moe {row['moe_quant_mode']}"
        )
        base = dict(
            source_group="aiconfigurator-silicon",
            engine=engine,
            preset=preset,
            model=model,
            gpu=gpu,
            num_gpus=num_gpus,
            tensor_parallel=attention_tp or "",
            expert_parallel=ep or "",
            precision=precision,
            kv_cache="fp8" if row["model_path"] in FP8_KV_CHECKPOINTS else "",
            **aic_closed_loop(row, concurrency),
            statistic="mean",
            unit="ms",
            source=AIC.format(id=row["id"]),
            notes=f"{note}; {AIC_HARNESS_NOTE}"
            + (f"; {FP8_KV_NOTE}" if row["model_path"] in FP8_KV_CHECKPOINTS else ""),
        )
        short = model if model in AIC_MODELS.values() else row["model_path"].split("/")[-1].lower()
        stem = f"aic-{short}-{row['backend']}-{row['isl']}x{row['osl']}-c{concurrency}-tp{tp}"
        stem += f"-dp{num_gpus // tp}" if num_gpus > tp else ""
        stem += f"-ep{ep}" if ep and ep > 1 else ""
        stem += "-h200" if gpu == "h200" and "235b" not in short else ""
        for quantity, column in (("tpot_ms", "silicon_tpot_ms"), ("ttft_ms", "silicon_ttft_ms")):
            yield _row(
                point_id=f"{stem}-{quantity.split('_')[0]}",
                quantity=quantity,
                measured=f"{float(row[column]):.4f}",
                fitted_by=host_fit_of(row) if quantity == "tpot_ms" else "",
                **base,
            )


def ispass(shared: Path) -> Iterator[dict[str, Any]]:
    """The single-instance vLLM reference runs of the LLMServingSim ISPASS artifact."""
    path = (
        shared / "under-load" / "llmservingsim" / "isp26_artifact_h100_reference"
        / "figure8_vllm_h100_latency.csv"
    )  # fmt: skip
    for row in _read(path):
        if row["scenario"] not in ("SD", "SM"):
            continue  # two instances (MD) and disaggregation (PDD) are not one node
        dense = row["scenario"] == "SD"
        base = dict(
            source_group="llmservingsim-ispass",
            engine="vLLM (version not stated)",
            preset="vllm-v1",
            model="llama-3.1-70b" if dense else "mixtral-8x7b",
            gpu="h100-sxm",
            num_gpus=int(row["tp_per_instance"]),
            precision="fp16",
            method="none",
            arrival="trace",
            trace=f"llmservingsim_sharegpt_req300_rate10_{'llama' if dense else 'mixtral'}.csv",
            dataset="sharegpt",
            num_requests=300,
            statistic="mean",
            source=ISPASS.format(scenario=row["scenario"]),
            notes=(
                "300 ShareGPT requests at 10 req/s replayed from the artifact's dataset "
                f"(dataset/sharegpt_req300_rate10_{'llama' if dense else 'mixtral'}.jsonl @ "
                "04bdeb8b6fb3); block size 16"
            ),
        )
        tag = row["scenario"].lower()
        for quantity, column, unit in (
            ("tpot_ms", "mean_tpot_ms", "ms"),
            ("ttft_ms", "mean_ttft_ms", "ms"),
            ("output_tok_s", "throughput_tok_s", "tok/s"),
        ):
            yield _row(
                point_id=f"ispass-{tag}-{quantity.split('_')[0]}",
                quantity=quantity,
                unit=unit,
                measured=row[column],
                **base,
            )


def build(shared: Path) -> list[dict[str, Any]]:
    """Every point, in a stable order."""
    rows = [
        *aiconfigurator(shared),
        *blis_training(shared),
        *blis_sim_to_real(shared),
        *ispass(shared),
        *eagle3_tables(),
        *quoted_points(),
        *specdecode_bench_points(),
        *vllm_blog_points(),
        *vllm_v0_points(),
        *sweep_points(),
        *moe_serving_points(shared, _row),
        *cpu_points(_row),
    ]
    ids = [r["point_id"] for r in rows]
    duplicates = {i for i in ids if ids.count(i) > 1}
    if duplicates:
        raise ValueError(f"duplicate point ids: {sorted(duplicates)}")
    return rows


def write(rows: list[dict[str, Any]], path: Path) -> None:
    """Write the CSV atomically."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    handle, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(handle, "w") as out:
        out.write(buffer.getvalue())
    os.replace(tmp, path)


def main() -> None:
    """Parse ``--shared`` and write the points file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, required=True, help="the public-data folder")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    data = args.shared / "data" if (args.shared / "data").is_dir() else args.shared
    rows = build(data)
    write(rows, args.out)
    print(f"{len(rows)} points written to {args.out}")


if __name__ == "__main__":
    main()
