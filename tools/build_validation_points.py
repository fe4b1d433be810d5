"""Transcribe the measured points of ``specsim validate``'s under-load rows into
``sim/data/validation_points.csv``.

Maintainer script: it reads the public measurements gathered in a data folder (``--shared PATH``,
the folder that holds ``data/under-load/``) and writes one CSV row per measured point, each with its
setup, value, unit and public source. Points quoted from papers and threads are written out below
with their citation. The simulator never reads the data folder; it reads the CSV this script writes.

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
    from tools.cpu_validation_points import cpu_points
    from tools.moe_validation_points import (
        AIC_ROUNDS,
        AIC_WARMUP_ROUNDS,
        aic_closed_loop,
        layout_of,
        moe_serving_points,
    )
except ModuleNotFoundError:  # run as a script: tools/ itself is on the path
    from cpu_validation_points import cpu_points  # type: ignore[no-redef]
    from moe_validation_points import (  # type: ignore[no-redef]
        AIC_ROUNDS,
        AIC_WARMUP_ROUNDS,
        aic_closed_loop,
        layout_of,
        moe_serving_points,
    )

OUT = Path(__file__).resolve().parents[1] / "sim" / "data" / "validation_points.csv"

COLUMNS = (
    "point_id",
    "source_group",
    "engine",
    "preset",
    "model",
    "gpu",
    "num_gpus",
    "precision",
    "kv_cache",
    "method",
    "num_speculative_tokens",
    "arrival",
    "concurrency",
    "rate_per_s",
    "trace",
    "prompt_tokens",
    "output_tokens",
    "max_num_seqs",
    "max_num_batched_tokens",
    "dataset",
    "num_requests",
    "warmup_requests",
    "quantity",
    "statistic",
    "measured",
    "unit",
    "source",
    "fitted_by",
    "not_expressible",
    "notes",
    "tensor_parallel",
    "expert_parallel",
)

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
BLIS_TRAIN = (
    "inference-sim/training @ ed5c1d26900e, "
    "default_args/{exp}/results/{stage}_lifecycle_metrics.json"
)
BLIS_S2R = (
    "inference-sim/sim-to-real-accuracy-validation @ dcec3fd4711c, {file}, column actual, "
    "experiment {exp}, stage_index {stage}"
)
BLIS_MODELS = {
    "meta-llama/Llama-2-7b-hf": "llama-2-7b",
    "meta-llama/Llama-2-70b-hf": "llama-2-70b",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
    "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "Qwen/Qwen2.5-7B-Instruct": "qwen2.5-7b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "codellama/CodeLlama-34b-Instruct-hf": "codellama-34b",
    "mistralai/Mistral-Nemo-Instruct-2407": "mistral-nemo-12b",
}
#: inference-perf's constant-rate load spaces arrivals evenly; the scenario schema has no
#: deterministic process, so the rows use gamma gaps with a coefficient of variation of 0.01.
CONSTANT_RATE = "constant"
ISPASS = (
    "casys-kaist/LLMServingSim @ 04bdeb8b6fb3 (ISPASS 2026 artifact), "
    "evaluation/figure_8/reference/{scenario}_latency.tsv, row framework=vLLM"
)
EAGLE3_T3 = "EAGLE-3 paper (Li et al., arXiv:2503.01840v3), section 4.3, Table 3"
EAGLE3_T5 = "EAGLE-3 paper (Li et al., arXiv:2503.01840v3), section 4.4, Table 5"
#: Table 3: SGLang v0.4.4, one H100, Llama-3.1-8B-Instruct, MT-bench, chain of 3, no tree.
EAGLE3_T3_BATCH = (2, 4, 8, 16, 24, 32, 48, 56, 64)
EAGLE3_T3_SPEEDUP = {
    "eagle": (1.40, 1.38, 1.23, 1.02, 0.93, 0.94, 0.88, 0.99, 0.99),
    "eagle3": (1.81, 1.82, 1.62, 1.48, 1.39, 1.32, 1.38, 1.34, 1.38),
}
#: Table 5: vLLM, Llama-3.1-8B-Instruct, MT-bench, chain of at most 2, no tree.
EAGLE3_T5_BATCH = (2, 4, 8, 16, 24, 32, 48, 56)
EAGLE3_T5_SPEEDUP = {
    "eagle": (1.30, 1.25, 1.21, 1.10, 1.03, 0.93, 0.82, 0.71),
    "eagle3": (1.75, 1.68, 1.58, 1.49, 1.42, 1.36, 1.21, 1.01),
}
#: MT-bench lengths of the batch-1 table (sim/validate.py): 100 prompt and 212 output tokens.
MT_BENCH_PROMPT_TOKENS = 100
MT_BENCH_OUTPUT_TOKENS = 212


def _row(**values: Any) -> dict[str, Any]:
    row = {column: "" for column in COLUMNS}
    unknown = set(values) - set(COLUMNS)
    if unknown:
        raise KeyError(f"unknown columns {sorted(unknown)}")
    row.update(values)
    return row


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


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


def blis_training(shared: Path) -> Iterator[dict[str, Any]]:
    """vLLM on H100 at constant request rates, per stage: decode time per token, TTFT p50, output
    throughput."""
    path = (
        shared
        / "under-load"
        / "blis_h100_vllm_serving"
        / "inference_sim_training_stage_metrics.csv"
    )
    for row in _read(path):
        if row["stage"] == "summary":
            continue
        model = BLIS_MODELS.get(row["model"], row["model"])
        reason = ""
        if row["overload_excluded_by_source"] == "True":
            reason = "overloaded run its source excludes (past capacity, minute-scale TTFT)"
        elif float(row["ttft_mean_s"]) > 10:
            reason = (
                "overloaded run: minute-scale TTFT, past capacity like the runs its source excludes"
            )
        base = dict(
            source_group="blis-training",
            engine="vLLM (version not stated)",
            # Dated 2026-02 (experiment folders), after vLLM 0.14.0 (2026-01-17) made async
            # scheduling the default: an inference from the dates, said in the notes.
            preset="vllm-v1-async",
            model=model,
            gpu="h100-sxm",
            num_gpus=int(row["tensor_parallel"]),
            precision="fp16",
            method="none",
            arrival=CONSTANT_RATE,
            rate_per_s=row["requested_rate_rps"],
            prompt_tokens=round(float(row["prompt_len_mean"])),
            output_tokens=round(float(row["output_len_mean"])),
            max_num_seqs=row["max_num_seqs"],
            max_num_batched_tokens=row["max_num_batched_tokens"],
            dataset="random",
            num_requests=min(300, round(float(row["requested_rate_rps"]) * 30)),
            source=BLIS_TRAIN.format(exp=row["experiment"], stage=row["stage"]),
            not_expressible=reason,
            notes=(
                f"{row['workload_profile']} profile, shared-prefix prompts, ignore_eos; "
                "lengths are the run's means; 30 s of the stage (at most 300 requests) simulated; "
                "vllm-v1-async preset: the run is dated 2026-02, after async scheduling became "
                "vLLM's default in 0.14.0"
            ),
        )
        stem = f"blis-{row['experiment'].split('-', 2)[2]}-{row['stage']}"
        yield _row(
            point_id=f"{stem}-tpot",
            quantity="tpot_ms",
            statistic="mean",
            unit="ms",
            measured=f"{1000 * float(row['decode_s_per_token_from_means']):.4f}",
            **{**base, "notes": base["notes"] + "; (E2E mean - TTFT mean)/(output mean - 1)"},
        )
        yield _row(
            point_id=f"{stem}-ttft",
            quantity="ttft_ms",
            statistic="p50",
            unit="ms",
            measured=f"{1000 * float(row['ttft_p50_s']):.4f}",
            **base,
        )
        yield _row(
            point_id=f"{stem}-throughput",
            quantity="output_tok_s",
            statistic="mean",
            unit="tok/s",
            measured=f"{float(row['output_tok_per_s']):.3f}",
            **base,
        )


def blis_sim_to_real(shared: Path) -> Iterator[dict[str, Any]]:
    """Per-stage vLLM ground truth of the sim-to-real study (stages whose rate is published), and
    the MoE whole-run rows whose workload is not published (kept, not expressible)."""
    path = shared / "under-load" / "blis_h100_vllm_serving" / "sim_to_real_ground_truth.csv"
    for row in _read(path):
        stage = int(row["stage_index"])
        whole_run_moe = stage < 0 and "mixtral" in row["model"].lower()
        if stage < 0 and not whole_run_moe:
            continue
        if row["experiment"].startswith("2026"):
            continue  # the same runs as inference_sim_training_stage_metrics.csv
        model = BLIS_MODELS.get(row["model"], row["model"])
        file = (
            "results_trainval/error_records.csv"
            if stage >= 0 or row["workload_spec_source"].startswith("inference-sim")
            else "results/llmservingsim_error_records_matched.csv"
        )
        reason = ""
        if whole_run_moe:
            reason = "request rate and lengths of the run not published (only the profile name)"
        has_shape = bool(row["question_len"])
        base = dict(
            source_group="blis-sim-to-real",
            engine="vLLM (version not stated)",
            preset="vllm-v1",
            model=model,
            gpu="h100-sxm",
            num_gpus=int(float(row["tensor_parallel"])),
            precision=row["precision"].lower(),
            method="none",
            arrival=CONSTANT_RATE if has_shape else "",
            rate_per_s=row["requested_rate_rps"] if stage >= 0 else "",
            prompt_tokens=(
                round(float(row["system_prompt_len"]) + float(row["question_len"]))
                if has_shape
                else ""
            ),
            output_tokens=round(float(row["output_len_target"])) if has_shape else "",
            max_num_seqs=row["max_num_seqs"].split(".")[0],
            max_num_batched_tokens=row["max_num_batched_tokens"].split(".")[0],
            dataset="random",
            num_requests=(
                min(300, round(float(row["requested_rate_rps"]) * 30)) if stage >= 0 else ""
            ),
            source=BLIS_S2R.format(file=file, exp=row["experiment"], stage=stage),
            not_expressible=reason,
            notes=(
                f"{row['workload_profile']} profile; lengths are the workload spec's targets "
                "(system prompt + question, output); 30 s of the stage (at most 300 requests) "
                "simulated"
                if has_shape
                else f"{row['workload_profile']} profile"
            ),
        )
        stem = f"s2r-{row['experiment']}-{stage if stage >= 0 else 'all'}"
        yield _row(
            point_id=f"{stem}-tpot",
            quantity="tpot_ms",
            statistic="mean",
            unit="ms",
            measured=f"{float(row['itl_mean_ms']):.4f}",
            **{**base, "notes": base["notes"] + "; ITL mean = (E2E - TTFT)/(output - 1)"},
        )
        yield _row(
            point_id=f"{stem}-ttft",
            quantity="ttft_ms",
            statistic="mean",
            unit="ms",
            measured=f"{float(row['ttft_mean_ms']):.4f}",
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


def eagle3_tables() -> Iterator[dict[str, Any]]:
    """Speculative speedup against batch size: EAGLE-3 paper Tables 3 (SGLang, H100) and 5
    (vLLM; GPU stated two ways)."""
    for table, batches, speedups in (
        (3, EAGLE3_T3_BATCH, EAGLE3_T3_SPEEDUP),
        (5, EAGLE3_T5_BATCH, EAGLE3_T5_SPEEDUP),
    ):
        sglang = table == 3
        for method, values in speedups.items():
            for batch, speedup in zip(batches, values, strict=True):
                yield _row(
                    point_id=f"eagle3-t{table}-{method}-bs{batch}",
                    source_group="eagle3-paper",
                    engine="SGLang v0.4.4" if sglang else "vLLM (version not stated)",
                    preset="sglang-0.4" if sglang else "vllm-v1",
                    model="llama-3.1-8b",
                    gpu="h100-sxm" if sglang else "RTX 3090 or A100 (stated both ways)",
                    num_gpus=1,
                    precision="bf16",
                    method=method,
                    num_speculative_tokens=3 if sglang else 2,
                    arrival="closed_loop",
                    concurrency=batch,
                    prompt_tokens=MT_BENCH_PROMPT_TOKENS,
                    output_tokens=MT_BENCH_OUTPUT_TOKENS,
                    dataset="mt-bench",
                    num_requests=80,
                    quantity="speedup",
                    statistic="ratio",
                    measured=f"{speedup:.2f}",
                    unit="x",
                    source=EAGLE3_T3 if sglang else EAGLE3_T5,
                    not_expressible=(
                        ""
                        if sglang
                        else "GPU stated as RTX 3090 in the text and A100 in the table caption"
                    ),
                    notes=(
                        "throughput with speculation / throughput without, same batch size; "
                        "chain (no tree); batch size run as a closed loop of that many clients "
                        "over MT-bench's 80 questions, lengths as the batch-1 table"
                        + ("" if sglang else "; maximum chain length 2")
                    ),
                )


def quoted_points() -> Iterator[dict[str, Any]]:
    """Speculation under load quoted from a vLLM PR and an SGLang issue (both arms measured)."""
    pr = (
        'vllm-project/vllm PR #12755 "[Model][Speculative Decoding] DeepSeek MTP spec decode", '
        'description, table "Results on various QPS", sub-table "Draft TP=1"'
    )
    for qps, base_ms, spec_ms in ((1, 55.47, 33.99), (2, 57.58, 48.8)):
        yield _row(
            point_id=f"vllm-pr12755-qps{qps}",
            source_group="vllm-pr-12755",
            engine="vLLM V0 (early 2025)",
            preset="vllm-v1",
            model="deepseek-ai/DeepSeek-R1",
            gpu="not stated",
            num_gpus=8,
            precision="fp8",
            method="mtp",
            num_speculative_tokens=1,
            arrival="poisson",
            rate_per_s=qps,
            quantity="speedup",
            statistic="ratio",
            measured=f"{base_ms / spec_ms:.3f}",
            unit="x",
            source=pr,
            not_expressible="MLA MoE model not in the catalogue; FP8 weights; GPU not stated",
            notes=f"baseline TPOT {base_ms} ms, MTP k=1 TPOT {spec_ms} ms (ratio: our arithmetic)",
        )
    issue = (
        'sgl-project/sglang issue #6949 "[Bug] Performance Regression: Eagle Speculative Decoding '
        'Causes Significant Inference Slowdown", comment by Ximingwang-09, 2025-06-07'
    )
    for tp, spec_tps, base_tps in ((1, 30, 21), (4, 59, 61)):
        yield _row(
            point_id=f"sglang-issue6949-tp{tp}",
            source_group="sglang-issue-6949",
            engine="SGLang (mid-2025)",
            preset="sglang-0.4",
            model="QwQ-class 32B (Qwen2 architecture, hidden 5120)",
            gpu="not stated",
            num_gpus=tp,
            precision="bf16",
            method="eagle",
            arrival="closed_loop",
            concurrency=1,
            quantity="speedup",
            statistic="ratio",
            measured=f"{spec_tps / base_tps:.3f}",
            unit="x",
            source=issue,
            not_expressible=(
                "user-trained EAGLE head (acceptance not published); model and GPU not stated"
            ),
            notes=f"single stream: {spec_tps} tok/s with EAGLE, {base_tps} without (ratio: ours)",
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
