"""Speculation under load with both arms measured, from a published concurrency sweep of vLLM
(source group ``vllm-sweep-tomasruizt``; ``tools/build_validation_points.py`` gathers every source).

The source is the benchmark repository behind T. Ruiz's vLLM V1 draft-model post
(github.com/tomasruizt/vllm-scripts @ d94d714): ``vllm bench serve`` runs of a vLLM main build of
January 2026 (``0.1.dev13107+ge1a34c3a5``, asynchronous scheduling on, prefix caching off), each
printing its output throughput, with and without speculation, at every client concurrency. The
numbers below are transcribed from the printed benchmark results in its logs (the repository's
``results/full-bench-data.parquet`` holds the same values):

* Qwen3-32B (bf16) on one H100 SXM5 94GB (the LRZ partition ``lrz-hgx-h100-94x4`` its Slurm files
  name, an HGX board of four; the KV pool the log reports, 16.91 GiB beside 61.03 GiB of weights,
  fits 94 GB, not 80),
  InstructCoder, temperature 0, concurrency 1-256: no speculation; EAGLE-3
  (RedHatAI/Qwen3-32B-speculator.eagle3) at k = 1-6; draft models Qwen3-1.7B and Qwen3-4B at k = 3.
* the same GPU and engine on MT-bench (philschmid/mt-bench: its 80 questions, 76 prompt tokens on
  average, 256 output tokens each), concurrency 1-80: no speculation and EAGLE-3 at k = 1-6.
* Llama-3.3-70B-Instruct at TP 2 on a cloud node of two 80 GB GPUs (the model is not named in the
  runs; the log reports custom all-reduce disabled for lack of GPU peer-to-peer access),
  InstructCoder, concurrency 1-64: no speculation, EAGLE-3 (yuhuili/EAGLE3-LLaMA3.3-Instruct-70B)
  and the Llama-3.2-1B draft model at k = 3.

Each InstructCoder run sends ``max(50, 10 x concurrency)`` prompts (each MT-bench run its 80)
as a Poisson stream at ``concurrency``
requests per second capped at ``concurrency`` in flight; a request lives 3-7 s, so the cap binds
from the first second and the run is a closed loop of that many clients (as run here).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

try:
    from tools.validation_rows import _row
except ModuleNotFoundError:  # run as a script: tools/ itself is on the path
    from validation_rows import _row  # type: ignore[no-redef]

GROUP = "vllm-sweep-tomasruizt"
REPO = "tomasruizt/vllm-scripts @ d94d714"
ENGINE = "vLLM main 2026-01 (0.1.dev13107+ge1a34c3a5)"
QWEN_LOG = (
    f"{REPO}, results/logs-2026-01-23/vllm-throughput-InstructCoder-{{run}}-t0.0-tp1/0_out.logs, "
    "benchmark at MAX_CONCURRENCY = {c}"
)
MT_LOG = (
    f"{REPO}, results/logs-2026-01-23/vllm-throughput-mt-bench-{{run}}-t0.0-tp1/0_out.logs, "
    "benchmark at MAX_CONCURRENCY = {c}"
)
LLAMA_LOG = f"{REPO}, online-throughput/{{run}}-c{{c}}.log"

#: The EAGLE-3 head's name in the run folders (RedHatAI/Qwen3-32B-speculator.eagle3).
EAGLE3_HEAD = "Qwen3-32B-speculator.eagle3"
CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Total prompt tokens of each run's prompts (the same prompts for every method at a
#: concurrency); every Qwen3-32B request generated 200 tokens (InstructCoder's default output
#: length in vllm bench: 10,000 tokens over 50 requests, 511,933-511,955 over 2,560).
QWEN_INPUT_TOKENS = (7227, 7227, 7227, 11690, 24361, 48266, 94775, 189093, 373233)
QWEN_OUTPUT_TOKENS = 200
#: Output token throughput (tok/s) per concurrency of CONCURRENCY.
QWEN_BASELINE = (29.30, 57.79, 110.49, 225.18, 439.33, 831.23, 1518.44, 2489.48, 3225.44)
QWEN_EAGLE3 = {
    1: (45.23, 87.92, 167.74, 340.21, 645.48, 1215.57, 2096.18, 3179.87, 3018.49),
    2: (54.31, 104.97, 199.40, 394.55, 749.59, 1393.34, 2321.93, 3221.17, 2941.10),
    3: (57.11, 110.31, 211.88, 416.26, 790.61, 1437.07, 2306.06, 2915.69, 2716.23),
    4: (58.13, 112.46, 215.34, 408.44, 769.28, 1395.05, 2119.04, 2563.23, 2425.05),
    5: (57.69, 111.24, 209.42, 414.45, 772.29, 1385.42, 2046.02, 2299.39, 2186.14),
    6: (56.49, 109.17, 211.90, 403.64, 765.19, 1336.35, 1818.01, 2010.59, 1960.16),
}
#: Draft-model arms at k = 3 (draft Qwen3-1.7B and Qwen3-4B).
QWEN_DRAFT_K3 = {
    "Qwen3-1.7B": (56.21, 108.85, 210.75, 407.33, 759.23, 1370.34, 2202.62, 2558.97, 2476.90),
    "Qwen3-4B": (51.99, 100.75, 192.89, 379.10, 719.52, 1256.93, 1871.52, 1883.49, 1925.96),
}
#: The catalogue part the Qwen3-32B runs are replayed on: the source's Slurm files name the LRZ
#: partition ``lrz-hgx-h100-94x4``, an HGX board of four H100 SXM5 94GB (sim/data/catalogue.yaml
#: gives the part and its sources); its log's 61.03 GiB of weights beside 16.91 GiB of KV exceed
#: the 80 GB part's 0.9 x 80 GiB, so the GPU is not the 80 GB one.
QWEN_GPU = "h100-sxm-94gb"
#: The KV pool, from the logs (vLLM's default gpu_memory_utilization 0.9: the command line does
#: not set it): 69,232 tokens (16.91 GiB) without speculation, 47,264 (11.72 GiB, beside 63.94 GiB
#: of target and head weights) with EAGLE-3 at every k. The memory plan follows vLLM V1's profile
#: run (sim/engine/memory.py: the driver-reported 93.10 GiB, the sampler's peak over 1,024 dummy
#: requests, the rejection sampler's with a drafter) and gives 69,584 and 49,792 tokens (+0.5%,
#: +5.3%; nothing fitted to these logs). At 128 clients a request holds at most 23 blocks (148 +
#: 200 tokens, its k draft slots and vLLM's k lookahead slots, 16-token blocks): 47,104 tokens,
#: under every pool. At 256 clients
#: (22 blocks each, 90,112 tokens) every pool binds: the simulated pools hold 197 and 141 requests
#: where the logged ones hold 196 and 134, so these rows run.
QWEN_GPU_NOTE = (
    "GPU H100 SXM5 94GB (the source's partition lrz-hgx-h100-94x4); its HBM2e bandwidth is "
    "derived, not published (sim/data/catalogue.yaml); the KV pool (logged 69,232 tokens "
    "without speculation, 47,264 with EAGLE-3; simulated 69,584 and 49,792) binds at 256 "
    "clients only"
)

#: The draft-model runs (the logs of their k = 3 folders): vLLM disables async scheduling for a
#: draft model ("Async scheduling not supported with draft_model-based speculative decoding and
#: will be disabled"), which the vllm-v1-async preset does for this method too
#: (sim/data/host_costs.yaml); the draft's weights and KV cache share the GPU with the target's,
#: so the logged pools are smaller: 32,528 tokens (11.42 GiB beside 64.24 GiB of weights) with
#: Qwen3-1.7B, 18,560 (7.08 GiB beside 68.58 GiB) with Qwen3-4B. The acceptance is the logged
#: per-position rate at concurrency 1 (sim/data/acceptance_published_pairs.yaml), an input to the
#: run; no timing coefficient was fitted to these rows.
DRAFT_NOTES = {
    draft: (
        f"GPU as the EAGLE-3 rows (H100 SXM5 94GB, derived HBM2e bandwidth); draft model Qwen/"
        f"{draft} at TP 1, async scheduling off as vLLM logs for a draft model; the logged KV "
        f"pool holds {pool} tokens (target and draft KV per token), fewer than every client's "
        f"full request (23 blocks of 16) from {binds} clients on; acceptance: the logged "
        "per-position rates at concurrency 1"
    )
    for draft, pool, binds in (("Qwen3-1.7B", "32,528", 128), ("Qwen3-4B", "18,560", 64))
}

#: MT-bench: every run sends the 80 questions (6,078 prompt tokens), 256 output tokens each.
MT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 80)
MT_REQUESTS = 80
MT_INPUT_TOKENS = 6078
MT_OUTPUT_TOKENS = 256
MT_BASELINE = (29.18, 57.88, 115.32, 227.08, 438.24, 714.91, 1056.38, 1797.33)
MT_EAGLE3 = {
    1: (46.44, 90.92, 178.11, 345.75, 646.06, 1064.82, 1533.82, 2477.69),
    2: (55.98, 109.67, 212.77, 409.76, 754.57, 1226.22, 1747.17, 2746.70),
    3: (60.19, 116.86, 226.95, 430.11, 798.83, 1277.47, 1834.66, 2560.25),
    4: (61.38, 120.14, 231.41, 425.72, 765.04, 1267.59, 1698.09, 2153.24),
    5: (61.02, 118.57, 231.20, 427.64, 790.74, 1269.58, 1754.84, 2387.43),
    6: (60.20, 117.62, 226.74, 437.14, 770.90, 1201.77, 1595.13, 2054.21),
}

LLAMA_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)
LLAMA_INPUT_TOKENS = (8501, 8501, 8501, 13731, 28323, 56318, 111219)
#: Generated tokens of the baseline runs (requests stop at end of sequence: 146.5 per request).
LLAMA_OUTPUT_TOKENS = (7326, 7328, 7326, 11592, 23418, 47148, 93185)
LLAMA_BASELINE = (22.83, 44.11, 82.55, 153.70, 280.22, 517.99, 853.64)
LLAMA_K3 = {
    "eagle3": (56.59, 104.31, 183.64, 345.94, 605.97, 946.92, 1016.32),
    "draft_model": (61.98, 113.90, 200.86, 374.97, 650.12, 991.91, 1110.85),
}
LLAMA_REASON = (
    "GPU not named by the source (two 80 GB GPUs of a cloud node); custom all-reduce disabled "
    "for lack of GPU peer-to-peer access (the server log), which the TP cost model does not price"
)


def _num_requests(concurrency: int) -> int:
    """The source's ``NUM_PROMPTS``: ten per client, at least 50."""
    return max(50, 10 * concurrency)


def _speedup_row(
    *,
    point_id: str,
    model: str,
    gpu: str,
    num_gpus: int,
    method: str,
    k: int,
    concurrency: int,
    num_requests: int,
    dataset: str,
    prompt_tokens: int,
    output_tokens: int,
    spec: float,
    base: float,
    source: str,
    not_expressible: str,
    notes: str,
    draft_model: str = "",
) -> dict[str, Any]:
    return _row(
        draft_model=draft_model,
        point_id=point_id,
        source_group=GROUP,
        engine=ENGINE,
        preset="vllm-v1-async",
        model=model,
        gpu=gpu,
        num_gpus=num_gpus,
        precision="bf16",
        method=method,
        num_speculative_tokens=k,
        arrival="closed_loop",
        concurrency=concurrency,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        dataset=dataset,
        num_requests=num_requests,
        quantity="speedup",
        statistic="ratio",
        measured=f"{spec / base:.3f}",
        unit="x",
        source=source,
        not_expressible=not_expressible,
        notes=(
            f"output throughput {spec} tok/s with speculation, {base} without, same concurrency "
            f"(ratio: our arithmetic); {notes}"
        ),
    )


def qwen_sweep() -> Iterator[dict[str, Any]]:
    """Qwen3-32B on one H100 SXM5 94GB: EAGLE-3 at k = 1-6 and two draft models at k = 3."""
    # (method, point-id tag, k, throughputs, run-folder stem, draft model or "")
    arms: list[tuple[str, str, int, tuple[float, ...], str, str]] = [
        ("eagle3", f"eagle3-k{k}", k, values, f"sd-eagle3-{EAGLE3_HEAD}-k{k}", "")
        for k, values in QWEN_EAGLE3.items()
    ]
    arms += [
        ("draft_model", f"draft-{draft.lower()}-k3", 3, values, f"sd-draft_model-{draft}-k3",
         draft)
        for draft, values in QWEN_DRAFT_K3.items()
    ]  # fmt: skip
    for method, tag, k, values, run, draft in arms:
        for index, concurrency in enumerate(CONCURRENCY):
            requests = _num_requests(concurrency)
            prompt = round(QWEN_INPUT_TOKENS[index] / requests)
            yield _speedup_row(
                point_id=f"tomasruizt-qwen3-32b-{tag}-c{concurrency}",
                model="qwen3-32b",
                gpu=QWEN_GPU,
                num_gpus=1,
                method=method,
                k=k,
                concurrency=concurrency,
                num_requests=requests,
                dataset="instructcoder",
                prompt_tokens=prompt,
                output_tokens=QWEN_OUTPUT_TOKENS,
                spec=values[index],
                base=QWEN_BASELINE[index],
                source=QWEN_LOG.format(run=run, c=concurrency)
                + f" and the same of vllm-throughput-InstructCoder-nosd-t0.0-tp1 ({requests} "
                "requests)",
                not_expressible="",
                notes=(
                    f"{QWEN_INPUT_TOKENS[index]} prompt tokens over {requests} requests (mean "
                    f"used as a fixed length), {QWEN_OUTPUT_TOKENS} output tokens each; "
                    "Poisson arrivals at concurrency req/s capped at concurrency in flight, run "
                    "as a closed loop; " + (DRAFT_NOTES[draft] if draft else QWEN_GPU_NOTE)
                ),
                draft_model=f"Qwen/{draft}" if draft else "",
            )


def mt_bench_sweep() -> Iterator[dict[str, Any]]:
    """Qwen3-32B on the same GPU and engine over MT-bench's 80 questions: EAGLE-3 at k = 1-6."""
    for k, values in MT_EAGLE3.items():
        for index, concurrency in enumerate(MT_CONCURRENCY):
            yield _speedup_row(
                point_id=f"tomasruizt-qwen3-32b-mtbench-eagle3-k{k}-c{concurrency}",
                model="qwen3-32b",
                gpu=QWEN_GPU,
                num_gpus=1,
                method="eagle3",
                k=k,
                concurrency=concurrency,
                num_requests=MT_REQUESTS,
                dataset="mt-bench",
                prompt_tokens=round(MT_INPUT_TOKENS / MT_REQUESTS),
                output_tokens=MT_OUTPUT_TOKENS,
                spec=values[index],
                base=MT_BASELINE[index],
                source=MT_LOG.format(run=f"sd-eagle3-{EAGLE3_HEAD}-k{k}", c=concurrency)
                + " and the same of vllm-throughput-mt-bench-nosd-t0.0-tp1 (80 requests)",
                not_expressible="",
                notes=(
                    f"{MT_INPUT_TOKENS} prompt tokens over {MT_REQUESTS} requests (mean used as a "
                    f"fixed length), {MT_OUTPUT_TOKENS} output tokens each; Poisson arrivals at "
                    "concurrency req/s capped at concurrency in flight, run as a closed loop; "
                    + QWEN_GPU_NOTE.replace(
                        "binds at 256 clients only", "does not bind at 80 clients or fewer"
                    )
                ),
            )


def llama_sweep() -> Iterator[dict[str, Any]]:
    """Llama-3.3-70B at TP 2 on a cloud node: EAGLE-3 and a Llama-3.2-1B draft at k = 3."""
    runs = {"eagle3": "k3/tp-results-eagle3/bench-eagle3",
            "draft_model": "k3/tp-results-draft-model/bench-draft-model"}  # fmt: skip
    for method, values in LLAMA_K3.items():
        tag = "eagle3" if method == "eagle3" else "draft-llama-3.2-1b"
        for index, concurrency in enumerate(LLAMA_CONCURRENCY):
            requests = _num_requests(concurrency)
            yield _speedup_row(
                point_id=f"tomasruizt-llama-3.3-70b-tp2-{tag}-k3-c{concurrency}",
                model="llama-3.3-70b",
                gpu="not stated (80 GB class)",
                num_gpus=2,
                method=method,
                k=3,
                concurrency=concurrency,
                num_requests=requests,
                dataset="instructcoder",
                prompt_tokens=round(LLAMA_INPUT_TOKENS[index] / requests),
                output_tokens=round(LLAMA_OUTPUT_TOKENS[index] / requests),
                spec=values[index],
                base=LLAMA_BASELINE[index],
                source=LLAMA_LOG.format(run=runs[method], c=concurrency)
                + " and online-throughput/tp-results-nosd/bench-nosd-c"
                + f"{concurrency}.log ({requests} requests)",
                not_expressible=LLAMA_REASON,
                notes=(
                    "mean prompt and output lengths (requests stop at end of sequence); draft "
                    "meta-llama/Llama-3.2-1B for draft_model"
                ),
            )


def sweep_points() -> Iterator[dict[str, Any]]:
    """Every row of the source group, Qwen3-32B first."""
    yield from qwen_sweep()
    yield from mt_bench_sweep()
    yield from llama_sweep()
