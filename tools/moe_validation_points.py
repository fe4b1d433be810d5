"""Validation points for MoE, MLA and MTP/EAGLE-3 serving (source group ``moe-serving``).

Called by ``tools/build_validation_points.py``; every row is out of sample (nothing in specsim is
fitted on it). Three kinds:

* AIConfigurator silicon rows (measured end-to-end TPOT, no speculation): gpt-oss-120b on vLLM
  (MXFP4 weights, run weight-only on Hopper) on H100/H200 at TP 1-8, Qwen3-235B-A22B-FP8 on vLLM
  0.12.0 (shapes other than the 1000/1000 rows the silicon group already has) and SGLang 0.5.6 on
  H200, and DeepSeek-V3/R1 FP8 on SGLang on H200 at TP 8 without DP attention or EP. Each row
  runs on the deployment the source's columns describe (:func:`layout_of`) and as the source's
  harness sent its requests (``AIC_ROUNDS``);
* the SGLang DeepSeek-V3 MTP speedups its documentation quotes (H200 TP8, batch 1 and 32);
* the plain DeepSeek-V3 decode of the same engine era: SGLang v0.4.1.post2's release figures
  (one fixed batch of 1, 8 and 32 through ``bench_one_batch_server``, 8 x H200) and the batch-1
  decode step of January 2025's main (``bench_one_batch``, sgl-project/sglang PR #3232);
* the gpt-oss-120b EAGLE-3 throughput and speedups of a published drafter's model card (SGLang,
  one H100, batch 1/8/64).

Rows whose setup the validation runner cannot yet express stay in with the reason.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

GROUP = "moe-serving"
AIC = (
    "ai-dynamo/aiconfigurator @ 095f58a51c4ca8e61b66ec108d86f223f8d559ce, "
    "aic-core/src/aiconfigurator_core/systems/silicon_sample.csv, row id {id}"
)
#: Silicon models kept, their catalogue names and the precision the scenario gives them.
MODELS = {
    "openai/gpt-oss-120b": ("gpt-oss-120b", "mxfp4"),
    "Qwen/Qwen3-235B-A22B-FP8": ("qwen3-235b-a22b", "fp8"),
    "deepseek-ai/DeepSeek-V3": ("deepseek-v3", "fp8"),
    "deepseek-ai/DeepSeek-R1": ("deepseek-r1", "fp8"),
}
GPUS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200"}
#: The concurrency whose silicon rows report a TPOT below that of concurrency 8 in the same
#: setup (4-5 ms at 512 clients on H100): not a steady decode, left out.
UNSTEADY_CONCURRENCY = 512
SGLANG_DOCS = (
    "sgl-project/sglang docs/references/deepseek.md, 'Multi-token Prediction': decoding speed "
    "improved 1.8x at batch size 1 and 1.5x at batch size 32 on H200 TP8 "
    "(--speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 2)"
)
SPECDRIFT = (
    "Dogacel/specdrift-gpt-oss-120b-eagle3 model card (arXiv:2605.09992), table 'gpt-oss-120b "
    "EAGLE3 (1-3-1-4) on H100': SGLang, TP 1, MT-Bench 80 prompts, max 2048 tokens, T = 0.7"
)
SPECDRIFT_20B = (
    "Dogacel/specdrift-gpt-oss-20b-eagle3 model card (arXiv:2605.09992), table 'H100 @ BS=1 - "
    "Baseline vs Ours (1-3-1-4)': SGLang, TP 1, MT-Bench 80 prompts, max 2048 tokens, T = 0.7; "
    "baseline latency 444.05 s, throughput 304.93 tok/s; EAGLE-3 371.90 tok/s"
)
#: The card's harness (sgl-project/SpecForge benchmarks/benchmarker: mtbench.py, base.py,
#: utils.py): each of MT-Bench's 80 questions is one two-turn program (the second question sent
#: with the first answer in its prompt, up to 2048 new tokens a turn), run by ``batch_size``
#: threads (``run_batch(num_threads=batch_size)``); throughput is every answer's completion
#: tokens over the wall time of the whole batch, so the last conversations' drain counts.
SPECDRIFT_QUESTIONS = 80
SPECDRIFT_TURNS = 2
#: The cards' --max-running-requests (both cards' SGLang server command).
SPECDRIFT_MAX_RUNNING = 64
#: Mean answer length: the sibling card (Dogacel/specdrift-gpt-oss-20b-eagle3, same harness,
#: same prompts, H100, batch 1) reports 444.05 s at 304.93 tok/s for the baseline, i.e.
#: 444.05 x 304.93 / 160 answers = 846 tokens. No figure is published for gpt-oss-120b: its
#: answers are taken as long as the 20b's (an assumption), and every answer as that mean (the
#: spread of the lengths is not published).
SPECDRIFT_ANSWER_TOKENS = 846
#: The cards' sampling temperature: their acceptance lengths (2.41 for the 120b head, 2.347 for
#: the 20b one, sim/data/acceptance_published_pairs.yaml) were measured at it.
SPECDRIFT_TEMPERATURE = 0.7
#: The cards' rows: model, batch, baseline and EAGLE-3 output tok/s, the acceptance they quote.
SPECDRIFT_ROWS = (
    ("gpt-oss-120b", 1, "212", "285", "acceptance length 2.41", SPECDRIFT),
    ("gpt-oss-120b", 8, "795", "1044", "acceptance length 2.41", SPECDRIFT),
    ("gpt-oss-120b", 64, "1620", "2339", "acceptance length 2.43", SPECDRIFT),
    ("gpt-oss-20b", 1, "304.93", "371.90", "accept length 2.347", SPECDRIFT_20B),
)
SPECDRIFT_HARNESS = (
    "harness: 80 two-turn MT-Bench conversations, one per client at a time (SpecForge "
    "run_batch, num_threads = batch size); answers 846 tokens each, the mean of the same "
    "harness's gpt-oss-20b baseline (444.05 s x 304.93 tok/s / 160 answers; no gpt-oss-120b "
    "figure published); prompt ~100 tokens"
)

SGLANG_V041 = (
    "sgl-project/sglang PR #2643 'chore: bump v0.4.1.post2' (2024-12-29), TLDR 'Using CUDA Graph "
    "and FP8 GEMM Tuning': DeepSeek-V3, batch {batch}, input 128, output 256: {value} token/s"
)
#: The release's three fixed-batch points: batch, output tok/s.
SGLANG_V041_ROWS = ((1, "30.29"), (8, "206.32"), (32, "760.52"))
SGLANG_V041_PROMPT = 128
SGLANG_V041_OUTPUT = 256
#: The harness the figures' wording is the output of (``batch N, input I, output O``, "token/s"):
#: sgl-project/sglang python/sglang/bench_one_batch_server.py of early 2025 (read @ 00b08c49,
#: run_one_case) sends the whole batch as one /generate request (random token ids, temperature
#: 0, max_new_tokens = output, ignore_eos) and reports batch x output / the request's wall time:
#: prefill of the batch, every decode step and the HTTP round trip in one interval, the
#: warm-up batch (16 x 1024/16) before it left out.
SGLANG_V041_HARNESS = (
    "harness: bench_one_batch_server (one /generate request carrying the whole batch, "
    "ignore_eos; output throughput = batch x 256 / the request's wall time, prefill and every "
    "decode step inside it): simulated as {batch} closed-loop clients sending {batch} requests "
    "at once, throughput over the run; GPU and parallelism not printed with the figures: 8 x "
    "H200 at TP 8, the setup the v0.4.1 release names for DeepSeek-V3 (sgl-project/sglang "
    "issue #2587); the PR's printed launch command (its ShareGPT run) adds "
    "--enable-dp-attention, not simulated: the batch points' own command is not printed"
)

SGLANG_PR3232 = (
    "sgl-project/sglang PR #3232 'Fix block wise fp8 torch compile' (2025-01-31, released in "
    "v0.4.2.post1), description: python3 -m sglang.bench_one_batch --batch-size 1 --input 128 "
    "--output 256 --model deepseek-ai/DeepSeek-V3 --trust-remote-code --tp 8 (no torch.compile): "
    "'Decode. median latency: 0.02719 s, median throughput: 36.78 token/s' (the benchmark run, "
    "after the warm-up run's 0.02711 s)"
)
SGLANG_PR3232_NOTES = (
    "harness: bench_one_batch (python/sglang/bench_one_batch.py: one in-process batch, no "
    "server; the median over the decode steps of each step's wall time, host included, CUDA "
    "graph on by default): simulated as one request of 128/256 tokens, its TPOT's median; GPU "
    "not printed: H200 taken, the GPU of the same author's MTP pull request two weeks later "
    "(sgl-project/sglang PR #3582, 8 x H200)"
)


#: Why a silicon row of vLLM 0.14 or later runs on ``vllm-v1-async``.
VLLM_ASYNC_NOTE = (
    "vllm-v1-async: the release schedules asynchronously by default (vLLM 0.18.0 "
    "vllm/config/vllm.py VllmConfig.__post_init__: async_scheduling None -> True unless a "
    "speculative method other than EAGLE/MTP/n-gram-GPU, disable_padded_drafter_batch, or an "
    "executor other than mp/uni/external_launcher; none applies to one node without "
    "speculation) and the source's generator passes neither --async-scheduling nor "
    "--no-async-scheduling (backend_templates/vllm/cli_args.*.j2 @ 095f58a51c)"
)


#: The source's harness per concurrency c (ai-dynamo/aiconfigurator @ 095f58a51c,
#: bench_run.sh.j2): 2·c warm-up requests left out of the statistics, then 20·c measured.
AIC_ROUNDS = 20
AIC_WARMUP_ROUNDS = 2


def aic_closed_loop(row: dict[str, str], concurrency: int) -> dict[str, Any]:
    """The columns every aiconfigurator silicon row shares: no speculation, ``concurrency``
    closed-loop clients on fixed random prompts, and the harness's request counts."""
    return {
        "method": "none",
        "arrival": "closed_loop",
        "concurrency": concurrency,
        "prompt_tokens": row["isl"],
        "output_tokens": row["osl"],
        "dataset": "random",
        "num_requests": AIC_ROUNDS * concurrency,
        "warmup_requests": AIC_WARMUP_ROUNDS * concurrency,
    }


def layout_of(row: dict[str, str]) -> tuple[int, int | None, int | None]:
    """GPUs, attention TP and expert-parallel ranks a silicon row ran on.

    The source records attention ``tp_size`` (and ``attention_dp_size``, often empty) apart from
    the MoE split ``moe_tp_size × moe_ep_size``, which spans every GPU of the deployment (vLLM
    flattens TP across its data-parallel ranks for the MoE layers when EP is off; SGLang's
    ``--ep-size`` splits the same GPUs). So the row ran on ``max(tp·dp, moe_tp·moe_ep)`` GPUs:
    ``tp_size 1, moe_tp_size 2`` is two GPUs of attention DP 2, not one GPU. Returns
    ``(num_gpus, None, None)`` for the plain TP node.
    """
    tp = int(float(row["tp_size"]))
    dp = int(float(row["attention_dp_size"] or 1))
    moe_tp = int(float(row["moe_tp_size"] or 1))
    ep = int(float(row["moe_ep_size"] or 1))
    world = max(tp * dp, moe_tp * ep)
    if world == tp and ep == 1:
        return tp, None, None
    return world, tp, ep


def _kept(row: dict[str, str]) -> bool:
    if row["mode"] != "agg" or row["system"] not in GPUS or row["model_path"] not in MODELS:
        return False
    if int(float(row["batch_size"])) >= UNSTEADY_CONCURRENCY or row["pp_size"] not in ("", "1"):
        return False
    if row["model_path"].startswith("openai"):
        return row["backend"] == "vllm"
    if row["model_path"].startswith("Qwen"):
        shape = (int(row["isl"]), int(row["osl"]))
        if row["backend"] == "sglang":
            return row["system"] == "h200_sxm"
        return row["backend"] == "vllm" and shape != (1000, 1000)
    dp, ep = row["attention_dp_size"] or "1", row["moe_ep_size"] or "1"
    return row["backend"] == "sglang" and row["system"] == "h200_sxm" and dp == ep == "1"


def silicon(shared: Path, row_of: Callable[..., dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The measured TPOT of the kept silicon rows, one point each."""
    path = shared / "under-load" / "aiconfigurator" / "silicon" / "silicon_sample.csv"
    with path.open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if _kept(r)]
    seen: dict[tuple[str, ...], int] = {}
    for row in rows:
        model, precision = MODELS[row["model_path"]]
        concurrency, tp = int(float(row["batch_size"])), int(float(row["tp_size"]))
        num_gpus, attention_tp, ep = layout_of(row)
        # The source repeats measurements (DeepSeek-V3 and R1 rows with the same numbers, the
        # same run under several ids): one point per distinct setup and value.
        arch = "deepseek" if model.startswith("deepseek") else model
        setup = (arch, row["backend"], row["system"], row["isl"], row["osl"], str(concurrency))
        key = (*setup, f"{num_gpus}/{tp}/{ep}", f"{float(row['silicon_tpot_ms']):.4f}")
        if key in seen:
            continue
        seen[key] = len(seen)
        repeat = sum(1 for k in seen if k[:-1] == key[:-1])
        engine = f"{row['backend']} {row['backend_version'] or '(version not stated)'}"
        split = f"-tp{tp}"
        if attention_tp is not None:
            split += f"-dp{num_gpus // tp}" if num_gpus > tp else ""
            split += f"-ep{ep}" if ep and ep > 1 else ""
        yield row_of(
            point_id=f"moe-{model}-{row['backend']}-{row['system'][:4]}-{row['isl']}x"
            f"{row['osl']}-c{concurrency}{split}" + (f"-run{repeat}" if repeat > 1 else ""),
            source_group=GROUP,
            engine=engine,
            preset="sglang-0.5" if row["backend"] == "sglang" else vllm_preset(row),
            model=model,
            gpu=GPUS[row["system"]],
            num_gpus=num_gpus,
            tensor_parallel=attention_tp or "",
            expert_parallel=ep or "",
            precision=precision,
            **aic_closed_loop(row, concurrency),
            quantity="tpot_ms",
            statistic="mean",
            measured=f"{float(row['silicon_tpot_ms']):.4f}",
            unit="ms",
            source=AIC.format(id=row["id"]),
            notes=f"gemm {row['gemm_quant_mode']}, moe {row['moe_quant_mode']} in the source; "
            f"tp_size {row['tp_size']}, moe_tp_size {row['moe_tp_size'] or '-'}, moe_ep_size "
            f"{row['moe_ep_size'] or '-'}: {num_gpus} GPUs; requests per run not recorded with "
            f"the row: the source's harness simulated ({AIC_WARMUP_ROUNDS} x concurrency "
            f"warm-up left out, {AIC_ROUNDS} x concurrency measured)"
            + (f"; {VLLM_ASYNC_NOTE}" if vllm_preset(row) == "vllm-v1-async" else "")
            + unstated_vllm_note(row),
        )


def unstated_vllm_note(row: dict[str, str]) -> str:
    """Why a vLLM row that states no release runs on ``vllm-v1``: the date the source says it
    was measured, where that is before vLLM 0.14.0 (2026-01-17) made async scheduling the
    default; "" for other rows."""
    if row["backend"] != "vllm" or row["backend_version"]:
        return ""
    fields = dict(
        part.split("=", 1) for part in row["silicon_data_source"].split("; ") if "=" in part
    )
    measured = fields.get("measured", "")[:10]
    if not measured or measured >= "2026-01-17":
        return ""
    return f"; vllm-v1: release not stated, measured {measured}, before vLLM 0.14.0 (2026-01-17)"


def vllm_preset(row: dict[str, str]) -> str:
    """The vLLM preset of a silicon row's release: ``vllm-v1-async`` from 0.14.0 (async
    scheduling on by default, :data:`VLLM_ASYNC_NOTE`), ``vllm-v1`` before it and where the
    source states no version."""
    parts = row["backend_version"].split(".")
    if len(parts) < 2 or not all(part.isdigit() for part in parts[:2]):
        return "vllm-v1"
    return "vllm-v1-async" if (int(parts[0]), int(parts[1])) >= (0, 14) else "vllm-v1"


def quoted(row_of: Callable[..., dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """DeepSeek-V3 MTP and gpt-oss-120b EAGLE-3 serving points quoted with their sources, and
    the plain DeepSeek-V3 decode of the MTP rows' engine era."""
    for batch, speedup in ((1, 1.8), (32, 1.5)):
        yield row_of(
            point_id=f"moe-sglang-docs-deepseek-v3-mtp-bs{batch}",
            engine="SGLang (2025 docs)",
            # The docs quote the SGLang of February 2025 (the MTP pull request, sgl-project/sglang
            # #3582, merged for v0.4.3): the synchronous spec v1 worker, as `sglang-0.4` runs it.
            **sglang_deepseek_common(batch, "mtp"),
            num_speculative_tokens=1,
            prompt_tokens=256,
            output_tokens=256,
            num_requests=4 * batch,
            quantity="speedup",
            statistic="ratio",
            measured=f"{speedup:.3f}",
            unit="x",
            source=SGLANG_DOCS,
            notes="prompt and output lengths not stated: 256/256 simulated; decode speedup as "
            "quoted (one significant figure past the point)",
        )
    # The engine era of the MTP rows (v0.4.1-v0.4.3: triton MLA decode, block-FP8 triton GEMMs
    # and fused MoE, the synchronous scheduler), as `sglang-0.4` runs it.
    for batch, value in SGLANG_V041_ROWS:
        yield row_of(
            point_id=f"moe-sglang-v041-deepseek-v3-bs{batch}",
            engine="SGLang v0.4.1.post2",
            **sglang_deepseek_common(batch, "none"),
            prompt_tokens=SGLANG_V041_PROMPT,
            output_tokens=SGLANG_V041_OUTPUT,
            num_requests=batch,
            quantity="output_tok_s",
            statistic="mean",
            measured=value,
            unit="tok/s",
            source=SGLANG_V041.format(batch=batch, value=value),
            notes=SGLANG_V041_HARNESS.format(batch=batch),
        )
    yield row_of(
        point_id="moe-sglang-pr3232-deepseek-v3-bs1",
        engine="SGLang main of 2025-01-31 (v0.4.2.post1)",
        **sglang_deepseek_common(1, "none"),
        prompt_tokens=SGLANG_V041_PROMPT,
        output_tokens=SGLANG_V041_OUTPUT,
        num_requests=1,
        quantity="tpot_ms",
        statistic="p50",
        measured="27.19",
        unit="ms",
        source=SGLANG_PR3232,
        notes=SGLANG_PR3232_NOTES,
    )
    for model, batch, base, spec, accept, source in SPECDRIFT_ROWS:
        common = specdrift_common(model, batch, source)
        yield row_of(
            point_id=f"moe-specdrift-{model}-baseline-bs{batch}",
            method="none",
            quantity="output_tok_s",
            statistic="mean",
            measured=base,
            unit="tok/s",
            notes=SPECDRIFT_HARNESS,
            **common,
        )
        yield row_of(
            point_id=f"moe-specdrift-{model}-eagle3-bs{batch}",
            method="eagle3",
            num_speculative_tokens=3,
            quantity="speedup",
            statistic="ratio",
            measured=f"{float(spec) / float(base):.3f}",
            unit="x",
            notes=f"{spec} vs {base} tok/s (ratio: ours); {accept} at T = 0.7 (3 steps, top-k 1, "
            f"4 draft tokens); {SPECDRIFT_HARNESS}",
            **common,
        )


def sglang_deepseek_common(batch: int, method: str) -> dict[str, Any]:
    """The columns SGLang's DeepSeek-V3 rows of early 2025 share: FP8 on 8 x H200 at TP 8 on the
    ``sglang-0.4`` preset, ``batch`` clients at once on random prompts."""
    return dict(
        source_group=GROUP,
        preset="sglang-0.4",
        model="deepseek-v3",
        gpu="h200",
        num_gpus=8,
        precision="fp8",
        method=method,
        arrival="closed_loop",
        concurrency=batch,
        dataset="random",
    )


def specdrift_common(model: str, batch: int, source: str) -> dict[str, Any]:
    """The columns the SpecDrift cards' rows share: SGLang on one H100, MXFP4 weights, the
    SpecForge MT-Bench harness (80 two-turn conversations on ``batch`` clients)."""
    return dict(
        source_group=GROUP,
        engine="SGLang (2026, spec v2)",
        preset="sglang-0.5",
        model=model,
        gpu="h100-sxm",
        num_gpus=1,
        precision="mxfp4",
        arrival="closed_loop",
        concurrency=batch,
        prompt_tokens=100,
        output_tokens=SPECDRIFT_ANSWER_TOKENS,
        dataset="mt-bench",
        num_requests=SPECDRIFT_QUESTIONS * SPECDRIFT_TURNS,
        num_turns=SPECDRIFT_TURNS,
        temperature=SPECDRIFT_TEMPERATURE,
        # The cards' server command: --max-running-requests 64 (SGLang's speculative default,
        # 48, does not apply).
        max_num_seqs=SPECDRIFT_MAX_RUNNING,
        source=source,
    )


def moe_serving_points(shared: Path, row_of: Callable[..., dict[str, Any]]) -> list[dict[str, Any]]:
    """Every point of the group, in a stable order; ``row_of`` makes a full CSV row."""
    return [*silicon(shared, row_of), *quoted(row_of)]
