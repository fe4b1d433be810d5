"""Published serving runs with TTFT at low load: the rows the front end is fitted and checked on.

Each row is one measured run: engine, model, GPU and tensor parallelism, the request rate it was
driven at, prompt and output lengths, and the measured mean TTFT (client side, streaming). Rows
marked ``fit`` are the only ones the front end is fitted on; ``check`` rows are replayed with the
fitted values and reported apart. ``check`` rows come from a different repository and different
models (``other source``), or from the fit source at a higher request rate than any fit row
(``same source, higher load``): the ``check_kind`` says which.

Sources (vLLM on H100 SXM, version not stated by either; 2026 runs, so the V1 engine; driven by
inference-perf at a constant rate per stage, streaming completions, shared-prefix synthetic chat
prompts). The inference-sim/training experiments ran vLLM 0.15.1 (stated for them by the
sim-to-real study's design document, below), after vLLM 0.14.0 (2026-01-17) made async
scheduling the default, so they run on the ``vllm-v1-async`` preset; so do the sim-to-real rows,
whose study states the same version for every run ("All ground truth was collected on vLLM
v0.15.1", ``docs/simulator-limitations.md`` of the repository below):

* ``inference-sim/training`` at commit ed5c1d26900e,
  ``default_args/<experiment>/results/stage_<n>_lifecycle_metrics.json`` with ``exp-config.yaml``
  (``max_num_seqs`` 128, ``max_num_batched_tokens`` 2048): ``ttft`` mean, achieved request rate,
  mean prompt and output lengths. Their harness sent 100 distinct prompts in turn (each
  experiment's ``results/config.yaml``: ``shared_prefix`` 10 groups x 10 prompts; inference-perf's
  generator cycles through them) to vLLM 0.15.1 servers with prefix caching on (both stated for
  these runs by inference-sim/sim-to-real-accuracy-validation @ dcec3fd,
  ``docs/plans/2026-03-04-sim-to-real-accuracy-validation-design.md``), so the rows are replayed
  with that pool (``prompt_pool``, as ``specsim validate`` replays them).
* ``ai-dynamo/aiconfigurator`` at commit 095f58a51c,
  ``aic-core/src/aiconfigurator_core/systems/silicon_sample.csv`` (column ``silicon_ttft_ms``, mean
  TTFT; the row ``id`` is given): Qwen3-32B on H100 at the lowest concurrency measured for a
  catalogued model, 8 clients on vLLM 0.12.0 and 16 on SGLang 0.5.1.post1, 1,024-token prompts.
  Not low load: 8-16 prompts of 1,024 tokens compete for prefill, so these rows check the engine's
  prefill scheduling more than the front end; they are reported, never fitted on.
* ``inference-sim/sim-to-real-accuracy-validation`` at commit dcec3fd4711c,
  ``results_trainval/error_records.csv`` (column ``actual``, mean TTFT in ms), with each
  experiment's rate and lengths from ``inference-sim/inference-sim`` at commit f90a1e3a67,
  ``testdata/roofline_goldendataset.json``; prompt length there is system prompt + question (the
  chat template's few tokens are not included). The same harness and prefix caching as the
  training runs; each experiment's spec names its pool (``num_unique_system_prompts`` x
  ``num_users_per_system_prompt`` distinct prompts, which inference-perf's shared-prefix generator
  cycles through), so the rows are replayed with that pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: The preset of the inference-sim runs (see the module docstring).
ASYNC_PRESET = "vllm-v1-async"
TRAINING = (
    "inference-sim/training@ed5c1d26900e default_args/{}/results/stage_{}_lifecycle_metrics.json"
)
SILICON = (
    "ai-dynamo/aiconfigurator@095f58a51c aic-core/src/aiconfigurator_core/systems/"
    "silicon_sample.csv id {}"
)
SIM_TO_REAL = (
    "inference-sim/sim-to-real-accuracy-validation@dcec3fd4711c results_trainval/error_records.csv "
    "experiment {} stage {}; workload inference-sim/inference-sim@f90a1e3a67 "
    "testdata/roofline_goldendataset.json"
)


#: Distinct prompts of every inference-sim/training run (see the module docstring).
TRAINING_PROMPT_POOL = 100


@dataclass(frozen=True)
class TtftRow:
    """One measured serving run and its mean TTFT."""

    row_id: str
    role: Literal["fit", "check"]
    check_kind: str
    preset: str
    model: str
    gpu: str
    num_gpus: int
    rate_per_s: float
    prompt_tokens: int
    output_tokens: int
    max_num_batched_tokens: int
    max_num_seqs: int
    measured_ttft_s: float
    source: str
    #: Closed-loop clients (a benchmark's max concurrency); 0 for an open loop at ``rate_per_s``.
    concurrency: int = 0
    #: Distinct prompts the harness sent in turn (0: every prompt distinct).
    prompt_pool: int = 0


def _training(
    row_id: str,
    role: Literal["fit", "check"],
    experiment: str,
    stage: int,
    model: str,
    tp: int,
    rate: float,
    prompt: float,
    output: float,
    ttft_s: float,
) -> TtftRow:
    return TtftRow(
        row_id,
        role,
        "" if role == "fit" else "same source, higher load",
        ASYNC_PRESET,
        model,
        "h100-sxm",
        tp,
        rate,
        round(prompt),
        round(output),
        2048,
        128,
        ttft_s,
        TRAINING.format(experiment, stage),
        prompt_pool=TRAINING_PROMPT_POOL,
    )


def _sim_to_real(
    row_id: str,
    experiment: str,
    stage: int,
    model: str,
    tp: int,
    rate: float,
    prompt: int,
    output: int,
    budget: int,
    ttft_ms: float,
    pool: int,
) -> TtftRow:
    return TtftRow(
        row_id,
        "check",
        "other source",
        ASYNC_PRESET,
        model,
        "h100-sxm",
        tp,
        rate,
        prompt,
        output,
        budget,
        128,
        ttft_ms / 1e3,
        SIM_TO_REAL.format(experiment, stage),
        prompt_pool=pool,
    )


def _silicon(
    row_id: str, preset: str, tp: int, concurrency: int, output: int, ttft_ms: float, source_id: str
) -> TtftRow:
    return TtftRow(
        row_id,
        "check",
        "other source, 8-16 clients",
        preset,
        "qwen3-32b",
        "h100-sxm",
        tp,
        0.0,
        1024,
        output,
        8192,
        256,
        ttft_ms / 1e3,
        SILICON.format(source_id),
        concurrency,
    )


ROWS: tuple[TtftRow, ...] = (
    # Fit: the lowest request rate of each Llama-2 experiment in inference-sim/training.
    _training(
        "l2-7b-codegen-5",
        "fit",
        "20260217-155451-llama-2-7b-tp1-codegen",
        0,
        "llama-2-7b",
        1,
        5.000059,
        591.63,
        193.715333,
        0.025037,
    ),
    _training(
        "l2-7b-roleplay-6",
        "fit",
        "20260217-162547-llama-2-7b-tp1-roleplay",
        0,
        "llama-2-7b",
        1,
        6.001677,
        785.84,
        206.390833,
        0.027129,
    ),
    _training(
        "l2-7b-general-8",
        "fit",
        "20260217-231439-llama-2-7b-tp1-general",
        0,
        "llama-2-7b",
        1,
        8.000639,
        575.45,
        210.0275,
        0.027109,
    ),
    _training(
        "l2-70b-codegen-5",
        "fit",
        "20260217-203421-llama-2-70b-hf-tp4-codegen",
        0,
        "llama-2-70b",
        4,
        5.006491,
        593.49,
        244.995333,
        0.053403,
    ),
    _training(
        "l2-70b-roleplay-6",
        "fit",
        "20260218-084319-llama-2-70b-tp4-roleplay",
        0,
        "llama-2-70b",
        4,
        6.000354,
        787.43,
        249.92875,
        0.054754,
    ),
    _training(
        "l2-70b-general-8",
        "fit",
        "20260217-202857-llama-2-70b-tp4-general",
        0,
        "llama-2-70b",
        4,
        8.001271,
        574.91,
        246.083125,
        0.057389,
    ),
    # Check, same source at higher load.
    _training(
        "l2-7b-codegen-10",
        "check",
        "20260217-155451-llama-2-7b-tp1-codegen",
        1,
        "llama-2-7b",
        1,
        10.00387,
        591.63,
        195.778,
        0.029454,
    ),
    _training(
        "l2-7b-general-20",
        "check",
        "20260217-231439-llama-2-7b-tp1-general",
        1,
        "llama-2-7b",
        1,
        20.005644,
        575.45,
        208.646333,
        0.051854,
    ),
    _training(
        "l2-70b-codegen-10",
        "check",
        "20260217-203421-llama-2-70b-hf-tp4-codegen",
        1,
        "llama-2-70b",
        4,
        10.000269,
        593.49,
        244.9375,
        0.056679,
    ),
    _training(
        "l2-70b-general-20",
        "check",
        "20260217-202857-llama-2-70b-tp4-general",
        1,
        "llama-2-70b",
        4,
        20.000235,
        574.91,
        245.6925,
        0.121275,
    ),
    # Check, other source and other models.
    _sim_to_real("q25-7b-roleplay-6", "64", 0, "qwen2.5-7b", 1, 6.0, 750, 251, 2048, 26.716194, 50),
    _sim_to_real(
        "q25-7b-reasoning-1", "66", 0, "qwen2.5-7b", 1, 1.0, 1034, 1448, 1024, 30.765422, 23
    ),
    _sim_to_real(
        "l2-7b-reasoning-1", "67", 0, "llama-2-7b", 1, 1.0, 1034, 1448, 2048, 55.095935, 23
    ),
    _sim_to_real(
        "l31-70b-general-2.5", "60", 0, "llama-3.1-70b", 4, 2.5, 547, 248, 8192, 51.95508, 45
    ),
    _sim_to_real(
        "l31-70b-general-6", "60", 1, "llama-3.1-70b", 4, 6.0, 547, 248, 8192, 54.426512, 45
    ),
    _sim_to_real(
        "l31-70b-codegen-5", "61", 0, "llama-3.1-70b", 4, 5.0, 566, 247, 2048, 54.735533, 44
    ),
    _sim_to_real(
        "l31-70b-codegen-10", "61", 1, "llama-3.1-70b", 4, 10.0, 566, 247, 2048, 59.803668, 44
    ),
    # Check, other source, 8-16 closed-loop clients with 1,024-token prompts (not low load).
    _silicon(
        "q3-32b-vllm-tp2-c8",
        "vllm-v1",
        2,
        8,
        512,
        153.579405,
        "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_vllm_agg_1024x512_c8_tp2_epnone_16",
    ),
    _silicon(
        "q3-32b-vllm-tp4-c8",
        "vllm-v1",
        4,
        8,
        512,
        125.9650915,
        "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_vllm_agg_1024x512_c8_tp4_epnone_17",
    ),
    _silicon(
        "q3-32b-vllm-tp8-c8",
        "vllm-v1",
        8,
        8,
        512,
        93.0956364375,
        "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_vllm_agg_1024x512_c8_tp8_epnone_18",
    ),
    _silicon(
        "q3-32b-sglang-tp2-c16",
        "sglang-0.5",
        2,
        16,
        512,
        843.7906217812499,
        "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_sglang_agg_1024x512_c16_tp2_epnone_19",
    ),
    _silicon(
        "q3-32b-sglang-tp4-c16",
        "sglang-0.5",
        4,
        16,
        512,
        413.44938493124994,
        "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_sglang_agg_1024x512_c16_tp4_epnone_20",
    ),
    _silicon(
        "q3-32b-sglang-tp8-c16",
        "sglang-0.5",
        8,
        16,
        512,
        243.4330284375,
        "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_sglang_agg_1024x512_c16_tp8_epnone_21",
    ),
)
