"""From a measured point to the scenario that reproduces it, or the reason it cannot be expressed.

A point's setup becomes a scenario field by field: GPU and TP degree, the catalogue model, the
engine preset and any scheduling limit the source states, the speculation method, and the workload
as the source describes it (``concurrency`` → a closed loop of that many clients; a Poisson rate;
inference-perf's constant rate → gamma gaps with a coefficient of variation of 0.01, since the
schema has no deterministic process; a recorded trace replayed from ``sim/data/validation_traces``).
A rate-driven point (constant or Poisson) is measured in the steady window (``measurement.window:
steady``): its source measured a long stationary stage (inference-perf's stages run 600 s), so the
simulated stretch drops the ramp-up from an empty server and the drain, which a 30 s simulation
would otherwise weigh far more than the source did (the drain alone took 13% off the output
throughput of a 5 req/s stage with 5 s requests). The warm-up dropped is the first quarter of the
arrivals (7.5 s of a 30 s stretch), longer than one request's life in these runs (5-6 s: ~250
output tokens at ~20 ms), so the node holds its stationary population when measuring starts.
A point whose source states a warm-up (``warmup_requests``: requests its harness sent first and
left out of its statistics) runs those requests first and measures the ``num_requests`` after
them (``measurement.warmup_requests``), in the full window as the harness did; a closed loop's
first wave, every client's prefill at once, then weighs in the mean as little as it did in the
source. The harness of the points that state a warm-up (aiconfigurator's aiperf runs) drains it
before it measures: aiperf's ``CreditIssuingStrategy._execute_phases`` waits until every warm-up
credit has returned before it starts the profiling phase, whose semaphore of ``concurrency``
credits then sends that many requests at once (ai-dynamo/aiperf ``aiperf/timing``), so a
closed-loop point runs with ``measurement.warmup_drained``: its measured requests open with
every client's request at the instant the last warm-up request ends.
A point whose harness sent a fixed pool of prompts in turn (``prompt_pool``: inference-perf's
shared-prefix generator cycles through its ``num_groups × num_prompts_per_group`` prompts) runs
each distinct prompt as one shared prefix of all its tokens but the last (vLLM computes the last
token for its logits even on a full hit: ``max_cache_hit_length = num_tokens - 1``), sent in turn
(``prefix.order: cycle``), so an engine with prefix caching hits the cache from the pool's second
pass on. The pool's first pass runs before the measured requests and is left out
(:func:`pool_warmup`): the source's stage ran 600 s, in which the pool's first 100 requests were
2 % of a 4,800-request stage 0 and none of a stage 1 that followed it on the same server.
A point whose harness held multi-turn conversations (``num_turns``: MT-Bench's two questions,
the second sent with the first answer in its prompt) runs them as ``workload.sessions`` of that
many turns with no think time: a closed loop's client then holds one conversation at a time, as
a benchmark thread runs one conversation's turns in order, and the turns of the last
conversations are the drain the source's wall-clock throughput includes.
A point whose source's harness sampled its requests from a dataset (``lengths``) draws each
request's prompt and output length from that harness's shipped length table
(:data:`LENGTH_TABLES`), with replacement, common to both arms of a speedup; a ``draft_model``
point names its catalogue draft, and ``acceptance_profile`` the shipped profile its speculative
arm runs with (a fitted one is named by the rows it may serve, never picked up by default).
A setup the simulator cannot express yet (FP8 weights, a model or GPU missing from the catalogue,
a workload the source does not publish) is kept and named, never dropped.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sim.catalogue import get_gpu, get_model, gpu_names
from sim.model_names import checkpoint_precision_conflict, resolve_model_name
from sim.moe import engine_moe_kernel
from sim.precision import KV_FORMAT_BYTES, WEIGHT_FORMATS
from sim.scenario import METHODS, Scenario
from sim.validation.points import ValidationPoint

#: Weight precisions the cost model prices (sim/precision.py; fp16 and bf16 cost the same).
EXPRESSIBLE_PRECISIONS = ("fp16", *WEIGHT_FORMATS)
#: Coefficient of variation of the gamma gaps that stand in for evenly spaced arrivals.
CONSTANT_RATE_CV = 0.01
#: Shipped tables of per-request prompt and output lengths a point may draw its requests from
#: (``lengths``), by name: a JSON file in ``sim/data`` with ``prompt_tokens`` and ``output_tokens``
#: lists and the provenance of both.
LENGTH_TABLES = {"sharegpt-vllm-bench-llama3": "sharegpt_lengths_vllm_bench_llama3.json"}
#: Arrival processes whose sources measured a stationary stage (see the module docstring).
RATE_DRIVEN = ("constant", "poisson")
#: Share of a rate-driven point's arrivals dropped as warm-up (see the module docstring).
RATE_DRIVEN_WARMUP = 0.25
#: Words that mark a mixture-of-experts model outside the catalogue (for grouping only).
_MOE_WORDS = ("mixtral", "a22b", "a3b", "deepseek", "scout", "maverick", "gpt-oss", "minimax")

#: Groups of rows, in the order the tables show them.
REGIMES = ("batch-1", "batch", "tp", "moe", "serving", "speculation")
REGIME_TITLES = {
    "batch-1": "Batch 1, one GPU",
    "batch": "Batch > 1, one GPU",
    "tp": "Tensor parallel (TP > 1), dense",
    "moe": "Mixture of experts",
    "serving": "Serving path: TTFT",
    "speculation": "Speculation under load",
}


def length_table_path(name: str) -> Path:
    """The shipped length table ``name`` of :data:`LENGTH_TABLES`. Raise KeyError if unknown."""
    return Path(str(resources.files("sim") / "data" / LENGTH_TABLES[name]))


def traces_dir() -> Path:
    """The folder of the recorded arrival traces that trace points replay."""
    return Path(str(resources.files("sim") / "data" / "validation_traces"))


def is_moe(model: str) -> bool:
    """Whether ``model`` is a mixture of experts: from the catalogue, else from its name."""
    resolved = resolve_model_name(model)
    if resolved is not None:
        return get_model(resolved).spec.num_experts > 1
    return any(word in model.lower() for word in _MOE_WORDS)


def regime_of(point: ValidationPoint) -> str:
    """The table a point belongs to: TTFT rows show the serving path; speculative rows, MoE
    targets and TP > 1 follow in that order of precedence; the rest are batch > 1 on one GPU."""
    if point.quantity == "ttft_ms":
        return "serving"
    if point.method != "none" or point.quantity == "speedup":
        return "speculation"
    if is_moe(point.model):
        return "moe"
    if point.num_gpus > 1:
        return "tp"
    return "batch"


def inexpressible_reason(point: ValidationPoint) -> str:
    """Why the simulator cannot run ``point`` as measured, or ``""`` when it can: the reason
    written with the point if any, else every reason found, joined by ``; ``."""
    if point.not_expressible:
        return point.not_expressible
    reasons = []
    if point.gpu not in gpu_names():
        reasons.append(f"GPU {point.gpu!r} not in the catalogue")
    if resolve_model_name(point.model) is None:
        reasons.append(f"model {point.model!r} not in the catalogue")
    elif conflict := checkpoint_precision_conflict(point.model, _weights(point)):
        reasons.append(conflict)
    if point.draft_model and resolve_model_name(point.draft_model) is None:
        reasons.append(f"draft model {point.draft_model!r} not in the catalogue")
    if point.precision not in EXPRESSIBLE_PRECISIONS:
        reasons.append(
            f"{point.precision.upper()} weights: not a weight format the cost model prices"
        )
    if point.kv_cache and point.kv_cache not in KV_FORMAT_BYTES:
        reasons.append(f"KV cache {point.kv_cache!r}: not a KV-cache format the cost model prices")
    if point.method not in METHODS:
        reasons.append(f"speculation method {point.method!r} not modelled")
    if point.lengths and point.lengths not in LENGTH_TABLES:
        reasons.append(f"length table {point.lengths!r} not shipped")
    if not point.arrival or point.num_requests is None:
        reasons.append("workload not stated by the source")
    return "; ".join(reasons)


def _weights(point: ValidationPoint) -> str:
    """The row's ``precision.weights`` (fp16 costs as bf16)."""
    return point.precision if point.precision in WEIGHT_FORMATS else "bf16"


def _arrival(point: ValidationPoint) -> dict[str, Any]:
    if point.arrival == "closed_loop":
        return {"process": "closed_loop", "concurrency": point.concurrency}
    if point.arrival == "poisson":
        return {"process": "poisson", "rate_per_s": point.rate_per_s}
    if point.arrival == "constant":
        return {"process": "gamma", "rate_per_s": point.rate_per_s, "cv": CONSTANT_RATE_CV}
    return {"process": "trace", "path": point.trace}


def pool_prefix(prompt_pool: int, prompt_tokens: int) -> dict[str, Any]:
    """The ``workload.prefix`` mapping of a harness that sends ``prompt_pool`` distinct prompts of
    ``prompt_tokens`` tokens in turn: each prompt is a shared prefix of all its tokens but the last,
    which ``prompt_tokens: 1`` then draws. Raise ValueError if a prompt has fewer than 2 tokens."""
    if prompt_tokens < 2:
        raise ValueError(f"a pooled prompt needs at least 2 tokens, got {prompt_tokens}")
    return {
        "num_shared_prefixes": prompt_pool,
        "shared_prefix_tokens": prompt_tokens - 1,
        "order": "cycle",
    }


def pool_warmup(prompt_pool: int | None) -> int:
    """Requests run before the measured ones so that a pooled run is measured past its first pass
    through the pool (0 without a pool)."""
    return prompt_pool or 0


def build_scenario(point: ValidationPoint, method: str | None = None) -> Scenario:
    """The scenario of ``point``; ``method="none"`` gives the baseline arm of a speedup point.

    Raise ValueError if the point is not expressible (see :func:`inexpressible_reason`), and
    pydantic's ValidationError if the schema rejects the setup.
    """
    return Scenario.model_validate(scenario_document(point, method))


def scenario_document(point: ValidationPoint, method: str | None = None) -> dict[str, Any]:
    """The scenario of ``point`` as the mapping :func:`build_scenario` validates (a fit edits
    its engine values before validating it). Raise ValueError as :func:`build_scenario`."""
    reason = inexpressible_reason(point)
    if reason:
        raise ValueError(f"{point.point_id}: not expressible: {reason}")
    method = point.method if method is None else method
    speculation: dict[str, Any] = {"method": method}
    if method != "none" and point.num_speculative_tokens is not None:
        speculation["num_speculative_tokens"] = point.num_speculative_tokens
    if method != "none" and point.draft_model:
        speculation["draft_model"] = point.draft_model
    if method != "none" and point.acceptance_profile:
        speculation["acceptance"] = {"profile": point.acceptance_profile}
    engine: dict[str, Any] = {"preset": point.preset}
    kernel = _moe_kernel(point)
    if kernel != "triton":
        engine["moe_kernel"] = kernel
    if point.max_num_seqs is not None:
        engine["max_num_seqs"] = point.max_num_seqs
    if point.max_num_batched_tokens is not None:
        engine["max_num_batched_tokens"] = point.max_num_batched_tokens
    warmup = (point.warmup_requests or 0) + pool_warmup(point.prompt_pool)
    workload: dict[str, Any] = {
        "num_requests": (point.num_requests or 0) + warmup,
        "arrival": _arrival(point),
        "temperature": point.temperature or 0.0,
        "dataset": point.dataset or None,
    }
    if point.arrival != "trace":
        workload["prompt_tokens"] = {"distribution": "fixed", "value": point.prompt_tokens}
        workload["output_tokens"] = {"distribution": "fixed", "value": point.output_tokens}
        if point.lengths:
            table = str(length_table_path(point.lengths))
            for key in ("prompt_tokens", "output_tokens"):
                workload[key] = {"distribution": "empirical", "path": table, "column": key}
        if point.prompt_pool and point.prompt_tokens:
            workload["prefix"] = pool_prefix(point.prompt_pool, point.prompt_tokens)
            workload["prompt_tokens"] = {"distribution": "fixed", "value": 1}
    if point.num_turns and point.num_turns > 1:
        workload["sessions"] = {"num_turns": point.num_turns, "think_time_s": 0.0}
    measurement: dict[str, Any] = {"warmup_requests": warmup} if warmup else {}
    if point.warmup_requests and point.arrival == "closed_loop":
        measurement["warmup_drained"] = True
    if point.arrival in RATE_DRIVEN:
        measurement.update(window="steady", warmup_fraction=RATE_DRIVEN_WARMUP)
    extra: dict[str, Any] = {"measurement": measurement} if measurement else {}
    hardware: dict[str, Any] = {"gpu": point.gpu, "num_gpus": point.num_gpus}
    if point.tensor_parallel is not None:
        hardware["tensor_parallel"] = point.tensor_parallel
    if point.expert_parallel is not None:
        hardware["expert_parallel"] = point.expert_parallel
    return {
        **extra,
        "name": f"validate-{point.point_id}-{method}",
        "seed": 0,
        "hardware": hardware,
        "model": point.model,
        "precision": {
            "weights": _weights(point),
            "kv_cache": point.kv_cache or "bf16",
        },
        "engine": engine,
        "speculation": speculation,
        "workload": workload,
    }


def _moe_kernel(point: ValidationPoint) -> str:
    """The expert kernel the row's engine release runs by default (sim/moe.py
    ``engine_moe_kernel``); triton where the row's model or GPU is not in the catalogue."""
    resolved = resolve_model_name(point.model)
    if resolved is None or point.gpu not in gpu_names():
        return "triton"
    model = get_model(resolved).with_precision(_weights(point), point.kv_cache or "bf16")
    ep = point.expert_parallel or 1
    return engine_moe_kernel(point.engine, get_gpu(point.gpu), model, point.num_gpus // ep, ep)


def try_build(point: ValidationPoint, method: str | None = None) -> tuple[Scenario | None, str]:
    """:func:`build_scenario`, with a rejection turned into a not-expressible reason."""
    reason = inexpressible_reason(point)
    if reason:
        return None, reason
    try:
        return build_scenario(point, method), ""
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return None, f"scenario rejected: {where}: {first['msg']}"
