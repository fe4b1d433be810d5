"""The candidates ``specsim recommend`` runs: the user's request, the tasks and their datasets, the
acceptance each method reads (the shipped measurements, with the nearest measured temperature
above and a same-tokenizer model standing in where needed), and every drafting configuration
the node can run (method × draft length × tree shape), each with its scenario document.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sim.errors import ScenarioError

#: A model measured with the same tokenizer whose acceptance stands in for unmeasured targets.
STAND_IN_MODEL = "llama-3.1-8b"


@dataclass(frozen=True)
class Task:
    """A task's workload: datasets for acceptance (first measured wins) and lengths."""

    datasets: tuple[str, ...]
    prompt_mean: float
    prompt_sigma: float
    output_mean: float
    output_sigma: float
    max_output_tokens: int
    interactive: bool


NOTES = {"structured": "no JSON-output acceptance is shipped; code-editing measurements stand in"}
TASKS = {
    "chat": Task(("sharegpt", "mt-bench"), 512, 0.8, 256, 0.6, 2048, True),
    "code": Task(("instructcoder", "humaneval"), 400, 0.6, 300, 0.6, 2048, True),
    # No JSON-output acceptance is shipped; the code-editing measurements stand in (NOTES).
    "structured": Task(("instructcoder", "humaneval"), 600, 0.5, 150, 0.4, 1024, True),
    "summarisation": Task(("cnn",), 900, 0.4, 120, 0.4, 512, False),
    "long-generation": Task(("sharegpt", "mt-bench"), 256, 0.5, 3000, 0.3, 8192, False),
    "reasoning": Task(("gsm8k",), 200, 0.5, 1200, 0.5, 4096, False),
}


@dataclass(frozen=True)
class Request:
    """What the user asked: node, load, task, temperature and latency bounds."""

    model: str
    gpu: str
    task: str
    num_gpus: int = 1
    concurrency: int | None = None
    rate_per_s: float | None = None
    temperature: float = 0.0
    ttft_p99_ms: float | None = None
    tpot_p50_ms: float | None = None
    draft_alpha: float | None = None
    num_requests: int = 200
    seed: int = 0
    #: Engine preset (``specsim catalogue presets``) and a calibrated profile's path.
    preset: str = "vllm-v1"
    profile: str | None = None


@dataclass(frozen=True)
class Candidate:
    """One configuration to simulate."""

    label: str
    speculation: dict[str, Any]


def _workload(request: Request, task: Task) -> dict[str, Any]:
    if (request.concurrency is None) == (request.rate_per_s is None):
        raise ScenarioError("give exactly one of --concurrency and --rate")
    if request.rate_per_s is not None and not request.rate_per_s > 0:
        raise ScenarioError(f"--rate: must be > 0, got {request.rate_per_s}")
    if request.concurrency is not None:
        arrival: dict[str, Any] = {"process": "closed_loop", "concurrency": request.concurrency}
        num_requests = max(request.num_requests, 3 * request.concurrency)
    else:
        arrival = {"process": "poisson", "rate_per_s": request.rate_per_s}
        num_requests = request.num_requests
    return {
        "num_requests": num_requests,
        "arrival": arrival,
        "prompt_tokens": {
            "distribution": "lognormal",
            "mean": task.prompt_mean,
            "sigma": task.prompt_sigma,
        },
        "output_tokens": {
            "distribution": "lognormal",
            "mean": task.output_mean,
            "sigma": task.output_sigma,
        },
        "max_prompt_tokens": 8192,
        "max_output_tokens": task.max_output_tokens,
        "temperature": request.temperature,
        "dataset": task.datasets[0],
    }


def base_document(request: Request) -> dict[str, Any]:
    """The scenario without speculation. Raise ScenarioError for an unknown task or bad load."""
    task = TASKS.get(request.task)
    if task is None:
        raise ScenarioError(f"--task: unknown task {request.task!r}; known: {', '.join(TASKS)}")
    return {
        "name": f"recommend-{request.task}",
        "seed": request.seed,
        "hardware": {"gpu": request.gpu, "num_gpus": request.num_gpus},
        "model": request.model,
        "engine": {"preset": request.preset}
        | ({"profile": request.profile} if request.profile else {}),
        "speculation": {"method": "none"},
        "workload": _workload(request, task),
        "measurement": {"warmup_requests": min(20, request.num_requests // 10)},
    }


def _measured_temperatures(key: str) -> list[float]:
    from sim.acceptance.shipped_data import load_profile_document

    entries = load_profile_document()["profiles"].get(key, [])
    return sorted(float(entry["temperature"]) for entry in entries)


def find_acceptance(
    method: str, model: str, vocab_size: int, task: Task, temperature: float
) -> tuple[dict[str, Any], str, str] | str:
    """The scenario keys that give ``method`` shipped acceptance, their source and dataset; or
    why not.

    Tries the target's own traces and profiles, then those of :data:`STAND_IN_MODEL` when it
    shares the tokenizer; for each, the task's datasets in order, at ``temperature`` or the
    nearest measured one above it.
    """
    from sim.acceptance.shipped_data import SHIPPED_TRACES, profile_key
    from sim.catalogue import get_model
    from sim.speculation import TRACE_METHODS

    owners = [model]
    if model != STAND_IN_MODEL and get_model(STAND_IN_MODEL).spec.vocab_size == vocab_size:
        owners.append(STAND_IN_MODEL)
    for owner in owners:
        stand_in = "" if owner == model else f", measured on {owner} (same tokenizer)"
        for dataset in task.datasets:
            trace = f"{owner}/{dataset}"
            if method in TRACE_METHODS and temperature == 0.0 and trace in SHIPPED_TRACES:
                keys = {"trace": trace, "trace_field": TRACE_METHODS[method]}
                return {"acceptance": keys}, f"traces {trace}{stand_in}", dataset
            key = profile_key(method, owner, dataset)
            above = [t for t in _measured_temperatures(key) if t >= temperature]
            if above:
                shown = "" if above[0] == temperature else f" at temperature {above[0]:g}"
                return (
                    {"acceptance": {"profile": key}, "temperature": above[0]},
                    f"profile {key}{shown}{stand_in}",
                    dataset,
                )
    return f"no shipped acceptance for {method} on {model} ({', '.join(task.datasets)})"


def common_dataset(request: Request, methods: list[str]) -> str:
    """The task's dataset with shipped acceptance for the most of ``methods`` (task order breaks
    ties): the one the candidates are ranked on."""
    from sim.catalogue import get_model

    task = TASKS[request.task]
    vocab = get_model(request.model).spec.vocab_size
    covered = {
        dataset: sum(
            not isinstance(
                find_acceptance(
                    m, request.model, vocab, replace(task, datasets=(dataset,)), request.temperature
                ),
                str,
            )
            for m in methods
        )
        for dataset in task.datasets
    }
    return max(task.datasets, key=lambda d: (covered[d], -task.datasets.index(d)))


def _one(task: Task, first: str) -> Task:
    """``task`` with ``first`` tried before its other datasets."""
    return replace(task, datasets=(first, *(d for d in task.datasets if d != first)))


def candidates(request: Request) -> tuple[list[Candidate], dict[str, str], dict[str, str]]:
    """The configurations to simulate, what cannot be, and each candidate's acceptance source
    (a source on another dataset than the common one says so)."""
    from sim.catalogue import get_model, model_names

    target = get_model(request.model)
    task = TASKS[request.task]
    found: list[Candidate] = [Candidate("none", {"method": "none"})]
    skipped: dict[str, str] = {}
    sources: dict[str, str] = {}
    shapes: dict[str, list[dict[str, Any]]] = {
        "eagle3": [{"num_speculative_tokens": k} for k in (2, 3, 5)]
        + [{"tree": {"shape": [2, 2, 1]}}],
        "eagle": [{"num_speculative_tokens": k} for k in (3, 5)],
        "ngram": [{"num_speculative_tokens": k} for k in (2, 4)],
        "mtp": [{"num_speculative_tokens": k} for k in (1, 2)],
    }
    runnable = [m for m in shapes if m != "mtp" or target.spec.num_mtp_modules > 0]
    common = common_dataset(request, runnable)
    for method, variants in shapes.items():
        if method not in runnable:
            skipped[method] = f"{request.model} ships no MTP modules"
            continue
        source = find_acceptance(
            method, request.model, target.spec.vocab_size, _one(task, common), request.temperature
        )
        if isinstance(source, str):
            skipped[method] = source
            continue
        keys, where, dataset = source
        if dataset != common:
            where += f" (dataset {dataset}, not {common}: not like-for-like with the others)"
        for variant in variants:
            label = _label(method, variant)
            spec = {"method": method, **variant, "acceptance": keys["acceptance"]}
            found.append(Candidate(label, {**spec, "_temperature": keys.get("temperature")}))
            sources[label] = where
    smaller = [
        get_model(name)
        for name in model_names()
        if name != request.model
        and get_model(name).spec.vocab_size == target.spec.vocab_size
        and get_model(name).total_params * 4 <= target.total_params
    ]
    if not smaller:
        skipped["draft_model"] = "no catalogue model with the same tokenizer is 4x smaller"
    elif request.draft_alpha is None:
        skipped["draft_model"] = "no shipped acceptance for a draft model; give --draft-alpha"
    else:
        draft = min(smaller, key=lambda m: m.total_params).name
        for k in (3, 5):
            label = f"draft_model {draft} k={k}"
            found.append(
                Candidate(
                    label,
                    {
                        "method": "draft_model",
                        "draft_model": draft,
                        "num_speculative_tokens": k,
                        "acceptance": {"alpha": request.draft_alpha},
                    },
                )
            )
            sources[label] = f"alpha {request.draft_alpha:g} (assumed, --draft-alpha)"
    return found, skipped, sources


def _label(method: str, variant: dict[str, Any]) -> str:
    if "tree" in variant:
        return f"{method} tree {variant['tree']['shape']}"
    return f"{method} k={variant['num_speculative_tokens']}"
