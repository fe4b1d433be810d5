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
    #: ``--model`` as the user wrote it (a Hugging Face id), when not the catalogue name.
    model_as_given: str | None = None


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
    method: str,
    model: str,
    vocab_size: int,
    task: Task,
    temperature: float,
    draft: str | None = None,
) -> tuple[dict[str, Any], str, str] | str:
    """The scenario keys that give ``method`` shipped acceptance, their source and dataset; or
    why not.

    Looks where a run with no ``speculation.acceptance`` looks (:mod:`sim.acceptance.config`):
    the target's traces, its profiles, then its published pairs, for each of the task's datasets
    in order; a draft model's acceptance is that of the (target, ``draft``) pair. Two stand-ins
    are recommend's own: a profile measured at the nearest temperature above ``temperature``, and
    the traces and profiles of :data:`STAND_IN_MODEL` when it shares the tokenizer (never for a
    draft model, whose acceptance depends on the draft).
    """
    from sim.acceptance.config import pair_name
    from sim.acceptance.shipped_data import SHIPPED_TRACES, profile_key
    from sim.catalogue import get_model
    from sim.speculation import TRACE_METHODS

    own = pair_name(model, draft)
    owners = [own]
    same_tokenizer = get_model(STAND_IN_MODEL).spec.vocab_size == vocab_size
    if draft is None and model != STAND_IN_MODEL and same_tokenizer:
        owners.append(STAND_IN_MODEL)
    for owner in owners:
        stand_in = "" if owner == own else f", measured on {owner} (same tokenizer)"
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
            if owner == own and not isinstance(
                published := _published(method, own, dataset, temperature), str
            ):
                return published
    reason = _published(method, own, task.datasets[0], temperature)
    drafted = f" with draft {draft}" if draft else ""
    because = f": {reason}" if isinstance(reason, str) and reason else ""
    return (
        f"no shipped acceptance for {method} on {model}{drafted} ({', '.join(task.datasets)}) "
        f"at temperature {temperature:g}{because}"
    )


def _published(
    method: str, pair: str, dataset: str, temperature: float
) -> tuple[dict[str, Any], str, str] | str:
    """The published acceptance a run finds for ``pair`` on ``dataset`` at ``temperature``
    (``acceptance_published_pairs.yaml``, as :func:`sim.acceptance.config.published_pair` reads
    it), as explicit scenario keys that build the same model; or the file's reason for none."""
    from sim.acceptance.config import published_pair
    from sim.acceptance.shipped_data import PACKAGE_DATA_DIR

    found = published_pair(method, pair, dataset, temperature, PACKAGE_DATA_DIR)
    if isinstance(found, str):
        return found
    keys = found.model_dump(exclude_none=True)
    return (
        {"acceptance": keys},
        f"published {method}/{pair} on {dataset} at temperature {temperature:g}",
        dataset,
    )


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
    smaller = sorted(
        (
            get_model(name)
            for name in model_names()
            if name != request.model
            and get_model(name).spec.vocab_size == target.spec.vocab_size
            and get_model(name).total_params * 4 <= target.total_params
        ),
        key=lambda m: m.total_params,
    )
    if not smaller:
        skipped["draft_model"] = "no catalogue model with the same tokenizer is 4x smaller"
        return found, skipped, sources
    # Each draft with a shipped (target, draft) measurement runs on it, as `specsim run` of that
    # pair does; --draft-alpha stands in for the smallest draft without one.
    drafts: list[tuple[str, dict[str, Any], str]] = []
    unmeasured: list[str] = []
    for draft in smaller:
        source = find_acceptance(
            "draft_model", request.model, target.spec.vocab_size, _one(task, common),
            request.temperature, draft=draft.name,
        )  # fmt: skip
        if isinstance(source, str):
            unmeasured.append(draft.name)
            continue
        keys, where, dataset = source
        if dataset != common:
            where += f" (dataset {dataset}, not {common}: not like-for-like with the others)"
        drafts.append((draft.name, keys, where))
    if unmeasured and request.draft_alpha is not None:
        assumed = {"acceptance": {"alpha": request.draft_alpha}}
        drafts.append(
            (unmeasured[0], assumed, f"alpha {request.draft_alpha:g} (assumed, --draft-alpha)")
        )
    if not drafts:
        skipped["draft_model"] = (
            f"no shipped acceptance for {request.model} with a draft of its tokenizer "
            f"({', '.join(unmeasured)}) on {', '.join(task.datasets)} at temperature "
            f"{request.temperature:g}; give --draft-alpha"
        )
    for draft_name, keys, where in drafts:
        for k in (3, 5):
            label = f"draft_model {draft_name} k={k}"
            spec = {
                "method": "draft_model",
                "draft_model": draft_name,
                "num_speculative_tokens": k,
                "acceptance": keys["acceptance"],
                "_temperature": keys.get("temperature"),
            }
            found.append(Candidate(label, spec))
            sources[label] = where
    return found, skipped, sources


def _label(method: str, variant: dict[str, Any]) -> str:
    if "tree" in variant:
        return f"{method} tree {variant['tree']['shape']}"
    return f"{method} k={variant['num_speculative_tokens']}"
