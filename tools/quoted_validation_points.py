"""The rows of ``sim/data/validation_points.csv`` quoted from papers, PRs and issues rather
than read from a data folder: the EAGLE-3 paper's speedup tables and speculation under load
(``tools/build_validation_points.py`` gathers every source)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

try:
    from tools.validation_rows import _row
except ModuleNotFoundError:  # run as a script: tools/ itself is on the path
    from validation_rows import _row  # type: ignore[no-redef]

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


PR12755 = (
    'vllm-project/vllm PR #12755 "[Model][Speculative Decoding] DeepSeek MTP spec decode" '
    '(2025-02-04), description, table "Results on various QPS", sub-table "Draft TP=1"'
)
#: (QPS, baseline TPOT ms, MTP k=1 TPOT ms) of the table's rows read in full.
PR12755_ROWS = ((1, 55.47, 33.99), (2, 57.58, 48.8))
#: DeepSeek-R1, its FP8 weights and MTP are priced; what the PR leaves out is not.
PR12755_REASON = (
    "GPU not stated by the source (an 8-GPU TP 8 node); dataset, prompt and output lengths and "
    "request count not stated with the table"
)


def quoted_points() -> Iterator[dict[str, Any]]:
    """Speculation under load quoted from a vLLM PR and an SGLang issue (both arms measured)."""
    for qps, base_ms, spec_ms in PR12755_ROWS:
        yield _row(
            point_id=f"vllm-pr12755-qps{qps}",
            source_group="vllm-pr-12755",
            engine="vLLM V0 engine (early 2025, 0.7 era)",
            preset="vllm-v0",
            model="deepseek-r1",
            gpu="not stated (8 GPUs, TP 8)",
            num_gpus=8,
            precision="fp8",
            method="mtp",
            num_speculative_tokens=1,
            arrival="poisson",
            rate_per_s=qps,
            max_num_seqs=128,
            quantity="speedup",
            statistic="tpot_ratio",
            measured=f"{base_ms / spec_ms:.3f}",
            unit="x",
            source=PR12755,
            not_expressible=PR12755_REASON,
            notes=(
                f"baseline TPOT {base_ms} ms, MTP k=1 TPOT {spec_ms} ms (ratio of TPOTs: our "
                "arithmetic; the PR prints 1.63x and 1.18x); server flags quoted with the table: "
                "--tensor-parallel-size 8 --max-num-seqs 128 --num-speculative-tokens 1; the PR "
                "text says the gain holds below QPS 8; the rows for QPS 4 and above are not "
                "transcribed (not read in full)"
            ),
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


SPECDECODE_BENCH = (
    "SpecDecode-Bench project page for arXiv:2601.11580 ('Speculative Decoding: Performance or "
    "Illusion?'), SpecDecode-Bench/specdecode-bench.github.io @ 514270c, index.md, {section}"
)
#: The paper's Table 5 holds each run's output length limit and prompt count; the page's prose
#: does not, so no printed point of it can be run as measured.
SPECDECODE_BENCH_LENGTHS = (
    "output length limit and prompt count in the paper's Table 5, not printed"
)


def specdecode_bench_points() -> Iterator[dict[str, Any]]:
    """The speedups arXiv:2601.11580's project page prints in its prose (both arms measured;
    its sweeps against batch size are figures, not transcribed)."""
    yield _row(
        point_id="specdecode-bench-llama-3.1-8b-gsm8k-eagle-bs128",
        source_group="specdecode-bench",
        engine="vLLM v0.10.1",
        preset="vllm-v1",
        model="llama-3.1-8b",
        gpu="h100-sxm",
        num_gpus=1,
        precision="bf16",
        method="eagle",
        num_speculative_tokens=3,
        arrival="closed_loop",
        concurrency=128,
        dataset="gsm8k",
        quantity="speedup",
        statistic="ratio",
        measured="1.21",
        unit="x",
        source=SPECDECODE_BENCH.format(section="End-to-End Performance"),
        not_expressible=SPECDECODE_BENCH_LENGTHS,
        notes="token throughput with SD / without, batch size 128, k = 3 (no bonus token)",
    )
    section = "End-to-End Performance, Tree vs. Chain Verification"
    for shape, k, speedup, tau in (("chain", 3, "1.65", 2.25), ("tree", 21, "1.85", 2.92)):
        yield _row(
            point_id=f"specdecode-bench-qwen3-8b-gsm8k-eagle-{shape}-bs1",
            source_group="specdecode-bench",
            engine="SGLang v0.5.9",
            preset="sglang-0.5",
            model="qwen3-8b",
            gpu="h100-sxm",
            num_gpus=1,
            precision="bf16",
            method="eagle" if shape == "chain" else "eagle2",
            num_speculative_tokens=k,
            arrival="closed_loop",
            concurrency=1,
            dataset="gsm8k",
            quantity="speedup",
            statistic="ratio",
            measured=speedup,
            unit="x",
            source=SPECDECODE_BENCH.format(section=section),
            not_expressible=(
                f"{SPECDECODE_BENCH_LENGTHS}; the EAGLE head for Qwen3-8B not named in the text "
                "read"
            ),
            notes=(
                f"{shape} of depth 3, {k} draft tokens"
                + (" (branching factor 4)" if shape == "tree" else "")
                + f"; accepted length {tau}; the page adds that by batch 64 the k = 21 tree is "
                "below 1x on every workload (value not printed)"
            ),
        )


VLLM_BLOG = (
    'vLLM blog "How Speculative Decoding Boosts vLLM Performance by up to 2.8x" (2024-10-17), '
    "vllm-project/vllm-project.github.io @ c3a01c4, _posts/2024-10-17-spec-decode.md and "
    "assets/figures/spec-decode/{figure}.png, {printed}"
)
#: Why the n-gram sweep stays out: the blog names no harness for it, and vLLM's benchmark of
#: 2024-10 (benchmarks/benchmark_serving.py: sharegpt, sonnet, random and hf datasets) has no
#: CNN/DailyMail sampler, so neither its lengths nor its request count follow from a procedure.
VLLM_BLOG_NGRAM_REASON = (
    "CNN/DailyMail prompt and output lengths and request count not stated: the blog names no "
    "harness, and vLLM's benchmark_serving.py of 2024-10 has no CNN/DailyMail sampler"
)
#: The draft-model sweep's workload, from a procedure rather than from the blog's text. The blog
#: names the dataset (ShareGPT), the rates, four H100s, k = 4 and the draft, not its harness; the
#: one public harness for exactly this setup is vLLM's own nightly serving test that vLLM PR #6964
#: added on 2024-07-30 (Llama-3-70B at TP 4 with turboderp/Qwama-0.5B-Instruct, k = 4, 200
#: ShareGPT prompts through benchmarks/benchmark_serving.py; the CI dashboard's description: "200
#: prompts from ShareGPT ... Draft model: Qwama-0.5B; Number of tokens proposed per step: 4").
#: The rows assume the blog's runs used that harness: its ShareGPT sampler with 200 prompts, whose
#: lengths with the Llama-3 tokenizer ship as the ``sharegpt-vllm-bench-llama3`` table.
VLLM_BLOG_HARNESS = (
    "workload assumed to be vLLM's own harness for this setup (the blog names none): the nightly "
    "serving test of vLLM PR #6964 (2024-07-30), Llama-3-70B TP 4 with Qwama-0.5B, k = 4, "
    "benchmarks/benchmark_serving.py --dataset-name sharegpt --num-prompts 200; lengths from the "
    "sharegpt-vllm-bench-llama3 table (that sampler's 200 requests with the Llama-3 tokenizer, "
    "sim/data/sharegpt_lengths_vllm_bench_llama3.json), drawn per request with replacement, "
    "prompt and output independently"
)
#: The draft runs at TP 1 (the simulator's default): vLLM V0 gives a draft model the target's TP
#: degree unless --speculative-draft-tensor-parallel-size says otherwise, and Qwama's 14 attention
#: heads do not split over 4 GPUs, so the blog's runs must have set it to 1 (the blog's own
#: example for a 70B target does).
VLLM_BLOG_DRAFT_NOTE = (
    "draft turboderp/Qwama-0.5B-Instruct as catalogue qwama-0.5b at draft TP 1 (its 14 heads do "
    "not split over the target's 4 GPUs)"
)
#: Llama-3-70B is run as the catalogue's llama-3.1-70b: meta-llama/Meta-Llama-3-70B's config.json
#: (as copied in kittn/Meta-Llama-3-70B-quant) has the same 80 layers, hidden 8192, FFN 28672,
#: 64 query and 8 KV heads, untied 128,256-token vocabulary; 3.1 adds RoPE scaling for a 128k
#: context, which the cost model does not price. "H100" is taken as the SXM part, as for the
#: EAGLE-3 paper's rows.
VLLM_BLOG_SETUP_NOTE = (
    "Llama-3-70B run as llama-3.1-70b (the same architecture; 3.1 adds RoPE scaling for a longer "
    "context); the blog's H100 taken as the SXM part"
)
#: The acceptance the draft-model rows run with: no acceptance rate of Qwama-0.5B drafting for
#: Llama-3-70B on ShareGPT was found published, so one constant per-position rate was fitted on
#: the 1 request/s row alone (``tools/fit_blog_draft_acceptance.py``); the other rates are judged
#: out of sample.
VLLM_BLOG_ACCEPTANCE = "draft_model/llama-3.1-70b+qwama-0.5b/sharegpt"
VLLM_BLOG_FIT = "blog_draft_acceptance"
#: Mean end-to-end latency in seconds read off the bars of figures 5 and 7 (pixel rows of the bar
#: tops against the gridlines; one pixel is 0.007 s in figure 5 and 0.011 s in figure 7), as
#: (rate, with speculation, without, figure, the printed words).
VLLM_BLOG_DRAFT_BARS = (
    (1, 1.642, 2.538, "figure5", 'the bars; the annotation "Up to 1.5x Speedup at QPS=1"'),
    (2, 1.733, 2.580, "figure5", "the bars"),
    (4, 2.260, 2.927, "figure5", "the bars"),
    (8, 3.385, 3.462, "figure5", "the bars"),
    (10, 4.774, 3.405, "figure7", 'the bars; the annotation "1.4x slowdown" over them'),
)
#: (rate, measured speedup, figure, the printed words, note): the n-gram values the blog prints
#: in words.
VLLM_BLOG_NGRAM_ROWS = (
    (1, 2.8, "figure6", 'the annotation "Up to 2.8x Speedup at QPS=1"', "the prose: up to 2.8x"),
    (8, 1 / 1.8, "figure7", 'the annotation "1.8x slowdown" over the QPS 8 bars',
     "1.8x slowdown: 1 / 1.8 (our arithmetic)"),
)  # fmt: skip


VLLM_V060_BLOG = (
    'vLLM blog "vLLM v0.6.0: 2.7x Throughput Improvement and 5x Latency Reduction" (2024-09-05), '
    "vllm-project/vllm-project.github.io, _posts/2024-09-05-perf-update.md and "
    "assets/figures/perf-v060/{figure}.png, {printed}"
)
#: The workload the 0.6.0 blog states: 500 ShareGPT prompts with a fixed seed, "average input
#: tokens: 202, average output tokens: 179"; the rows run those means as fixed lengths (the blog
#: gives no distribution).
VLLM_V060_WORKLOAD = (
    "500 ShareGPT prompts, run at the blog's stated means (202 prompt, 179 output tokens) as fixed "
    "lengths; Llama-3-70B run as llama-3.1-70b (same architecture); H100 taken as the SXM part"
)
#: vLLM 0.5.3 on four H100s, Llama-3-70B, from the two bars of llama70B_comparison.png (pixel rows
#: of the bar tops against the gridlines: 2.32 px per ms on the TPOT axis, 19.6 px per req/s on
#: the throughput axis): 0.5.3 is the V0 loop with neither multi-step scheduling nor async output
#: processing, the API server in the engine's process. As (point suffix, quantity, value,
#: statistic, arrival, rate or concurrency, printed words, note).
VLLM_V053_BARS = (
    ("tpot-qps32", "tpot_ms", 145.9, "mean", "poisson", 32,
     'the vLLM 0.5.3 TPOT bar; the caption "TPOT measured at 32 QPS"',
     "mean TPOT (the appendix plots means) at 32 req/s"),
    ("throughput-qpsinf", "output_tok_s", 9.82 * 179, "mean", "closed_loop", 500,
     'the vLLM 0.5.3 throughput bar (9.82 req/s); "Throughput is measured under QPS inf"',
     "9.82 req/s x 179 output tokens a request (our arithmetic); QPS inf run as all 500 "
     "requests sent at once"),
)  # fmt: skip
#: What the 0.5.3 rows measure that the preset does not price: the preset follows 0.6.x.
VLLM_V053_ENGINE = (
    "vLLM 0.5.3 ran its output processing in line and its API server in the engine's process "
    "(both changed in 0.6.0, the same blog); the vllm-v0 preset follows 0.6.x and overlaps the "
    "output processing"
)
#: vLLM 0.6.0's mean TPOT against the request rate, Llama-3-70B on 4xH100, ShareGPT: the blue
#: line of H100_70B.png's "ShareGPT, TPOT" panel (3.86 px per ms, centre of the line at each
#: rate; at 2 and 4 req/s it is hidden under the SGLang and TRT-LLM lines, so those rates are not
#: transcribed). The blog ran vLLM with --num-scheduler-steps 10, which the cost model does not
#: price: the rows are kept as measured and refused.
VLLM_V060_TPOT = ((8, 29.3), (16, 40.2), (32, 56.3))
VLLM_V060_MULTISTEP = (
    "vLLM ran with multi-step scheduling (--num-scheduler-steps 10, the blog's setup), which "
    "spreads the per-step CPU work over 10 forwards: not a mechanism the simulator prices"
)


def vllm_v0_points() -> Iterator[dict[str, Any]]:
    """vLLM's own V0-era serving numbers for a 70B model on four H100s (the 0.6.0 blog): the
    out-of-sample check of the ``vllm-v0`` preset's 70B TP 4 step, whose host overhead was fitted
    on the same blog's 8B light-load sentence."""
    common = {
        "source_group": "vllm-v060-blog",
        "preset": "vllm-v0",
        "model": "llama-3.1-70b",
        "gpu": "h100-sxm",
        "num_gpus": 4,
        "precision": "bf16",
        "method": "none",
        "dataset": "sharegpt",
        "num_requests": 500,
        "prompt_tokens": 202,
        "output_tokens": 179,
    }
    for suffix, quantity, value, statistic, arrival, load, printed, note in VLLM_V053_BARS:
        yield _row(
            point_id=f"vllm-v053-llama-3-70b-tp4-sharegpt-{suffix}",
            engine="vLLM 0.5.3 (V0 engine)",
            arrival=arrival,
            **({"rate_per_s": load} if arrival == "poisson" else {"concurrency": load}),
            quantity=quantity,
            statistic=statistic,
            measured=f"{value:.1f}",
            unit="ms" if quantity == "tpot_ms" else "tok/s",
            source=VLLM_V060_BLOG.format(figure="llama70B_comparison", printed=printed),
            notes=f"{note}; {VLLM_V060_WORKLOAD}; {VLLM_V053_ENGINE}; out of sample",
            **common,
        )
    for rate, tpot in VLLM_V060_TPOT:
        yield _row(
            point_id=f"vllm-v060-llama-3-70b-tp4-sharegpt-tpot-qps{rate}",
            engine="vLLM 0.6.0 (V0 engine, --num-scheduler-steps 10)",
            arrival="poisson",
            rate_per_s=rate,
            quantity="tpot_ms",
            statistic="mean",
            measured=f"{tpot:.1f}",
            unit="ms",
            source=VLLM_V060_BLOG.format(
                figure="H100_70B", printed='appendix "Llama 3 70B on 4xH100", ShareGPT TPOT panel'
            ),
            not_expressible=VLLM_V060_MULTISTEP,
            notes=f"mean TPOT read off the vLLM line; {VLLM_V060_WORKLOAD}",
            **common,
        )


def _vllm_blog_row(**values: Any) -> dict[str, Any]:
    return _row(
        source_group="vllm-blog-2024-10",
        engine="vLLM (2024-10, V0 engine)",
        preset="vllm-v0",
        model="llama-3.1-70b",
        gpu="h100-sxm",
        num_gpus=4,
        precision="bf16",
        num_speculative_tokens=4,
        arrival="poisson",
        quantity="speedup",
        statistic="latency_ratio",
        unit="x",
        **values,
    )


def vllm_blog_points() -> Iterator[dict[str, Any]]:
    """The speedups the vLLM blog of 2024-10 shows against the request rate: Llama-3-70B on four
    H100s with a draft model (ShareGPT) and with n-grams (CNN/DailyMail), k = 4, both arms'
    end-to-end latency measured at each rate; the draft-model sweep is issue #8's example of a
    gain that turns into a slowdown under load. Its 1 request/s row is the one the pair's
    acceptance was fitted on."""
    for rate, spec_s, base_s, figure, printed in VLLM_BLOG_DRAFT_BARS:
        yield _vllm_blog_row(
            point_id=f"vllm-blog-2410-llama-3-70b-draft-qwama-0.5b-k4-qps{rate}",
            method="draft_model",
            rate_per_s=rate,
            dataset="sharegpt",
            num_requests=200,
            lengths="sharegpt-vllm-bench-llama3",
            draft_model="qwama-0.5b",
            acceptance_profile=VLLM_BLOG_ACCEPTANCE,
            measured=f"{base_s / spec_s:.3f}",
            source=VLLM_BLOG.format(figure=figure, printed=printed),
            fitted_by=VLLM_BLOG_FIT if rate == 1 else "",
            notes=(
                "end-to-end latency without speculation / with it at the same request rate "
                f"(the figures' axis; mean taken, the blog does not say): {base_s} s / {spec_s} "
                f"s read off the bars, TP 4; {VLLM_BLOG_HARNESS}; {VLLM_BLOG_DRAFT_NOTE}; "
                + VLLM_BLOG_SETUP_NOTE
                + (
                    "; the row the pair's acceptance was fitted on"
                    if rate == 1
                    else "; out of sample (the acceptance was fitted on the 1/s row)"
                )
            ),
        )
    for rate, speedup, figure, printed, note in VLLM_BLOG_NGRAM_ROWS:
        yield _vllm_blog_row(
            point_id=f"vllm-blog-2410-llama-3-70b-ngram-k4-qps{rate}",
            method="ngram",
            rate_per_s=rate,
            dataset="cnn_dailymail",
            measured=f"{speedup:.3f}",
            source=VLLM_BLOG.format(figure=figure, printed=printed),
            not_expressible=VLLM_BLOG_NGRAM_REASON,
            notes=(
                "end-to-end latency without speculation / with it at the same request rate "
                f"(the figures' axis; mean taken, the blog does not say), TP 4; {note}; "
                + VLLM_BLOG_SETUP_NOTE
            ),
        )
