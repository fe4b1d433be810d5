"""The BLIS (inference-sim) rows of ``sim/data/validation_points.csv``: vLLM on H100 at
constant request rates, from the training stages and the sim-to-real validation
(``tools/build_validation_points.py`` gathers every source)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

try:
    from tools.validation_rows import _read, _row
except ModuleNotFoundError:  # run as a script: tools/ itself is on the path
    from validation_rows import _read, _row  # type: ignore[no-redef]

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

#: Distinct prompts inference-perf sent in turn in every inference-sim/training run: each
#: experiment's resolved results/config.yaml reads shared_prefix num_groups 10 and
#: num_prompts_per_group 10 (the profile's num_unique_system_prompts / num_users_per_system_prompt
#: and enable_multi_turn_chat keys are absent from it), and that generator cycles through its
#: prompts (kubernetes-sigs/inference-perf shared_prefix_datagen.py, get_data:
#: ``i = (i + 1) % len(self.prompts)``). The vLLM 0.15.1 servers ran with prefix caching on (stated
#: by inference-sim/sim-to-real-accuracy-validation @ dcec3fd, docs/plans/
#: 2026-03-04-sim-to-real-accuracy-validation-design.md; V1's default, and exp-config.yaml sets
#: only the model, TP, max_model_len, max_num_batched_tokens and max_num_seqs).
BLIS_PROMPT_POOL = 100


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
            # inference-sim/sim-to-real-accuracy-validation @ dcec3fd,
            # docs/plans/2026-03-04-sim-to-real-accuracy-validation-design.md, of these 16 runs:
            # "vLLM v0.15.1, H100 GPU, ..., prefix caching enabled, chunked prefill enabled";
            # 0.14.0 (2026-01-17) made async scheduling the default.
            engine="vLLM 0.15.1",
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
            prompt_pool=BLIS_PROMPT_POOL,
            source=BLIS_TRAIN.format(exp=row["experiment"], stage=row["stage"]),
            not_expressible=reason,
            notes=(
                f"{row['workload_profile']} profile, shared-prefix prompts, ignore_eos; "
                f"{BLIS_PROMPT_POOL} distinct prompts sent in turn (results/config.yaml: 10 groups "
                "x 10 prompts), prefix caching on (stated), the pool's first pass run first and "
                "left out; "
                "lengths are the run's means; 30 s of the stage (at most 300 requests) simulated; "
                "vLLM 0.15.1 as the sim-to-real study's design states for these runs (async "
                "scheduling, vllm-v1-async, is the default since 0.14.0)"
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
        pool = (
            int(float(row["num_unique_system_prompts"]))
            * int(float(row["num_users_per_system_prompt"]))
            if has_shape
            else None
        )
        base = dict(
            source_group="blis-sim-to-real",
            # The study states the version of every run: "All ground truth was collected on
            # vLLM v0.15.1" (docs/simulator-limitations.md; the design document: "vLLM v0.15.1,
            # ..., prefix caching enabled, chunked prefill enabled"), whose default is async
            # scheduling (0.14.0 on), as for the training rows.
            engine="vLLM 0.15.1",
            preset="vllm-v1-async",
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
            prompt_pool=pool or "",
            source=BLIS_S2R.format(file=file, exp=row["experiment"], stage=stage),
            not_expressible=reason,
            notes=(
                f"{row['workload_profile']} profile; lengths are the workload spec's targets "
                "(system prompt + question, output); 30 s of the stage (at most 300 requests) "
                f"simulated; {pool} distinct prompts sent in turn (the spec's "
                f"{int(float(row['num_unique_system_prompts']))} system prompts x "
                f"{int(float(row['num_users_per_system_prompt']))} users, inference-perf's "
                "shared-prefix generator cycling through them), prefix caching on (stated), the "
                "pool's first pass run first and left out; vLLM 0.15.1 as the study states for "
                "every run (async scheduling, vllm-v1-async)"
                if has_shape
                else f"{row['workload_profile']} profile; vLLM 0.15.1 as the study states"
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
