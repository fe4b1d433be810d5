"""``specsim recommend``: simulate every drafting configuration a node can run, pick the best.

The answer comes from runs, never from a table of advice: each candidate (method × draft length ×
tree shape) runs the same requests at the same times (one seed, so the arrival and length streams
are common random numbers) and the candidates are ranked by what the runs measured. Change the
calibration and the answer moves with it.

Ranking: candidates that meet every latency bound given come first; among them the lowest mean
end-to-end latency wins (at a fixed request rate it is the user's whole wait; in a closed loop,
by Little's law, throughput is concurrency over it). A drafting method must beat ``none`` by
:data:`MIN_GAIN` to be recommended over it: a smaller gain is inside the simulator's validation
error (``specsim validate``), so it is not worth a second model in memory.

Acceptance comes from the shipped measurements for the model, the task's datasets and the
temperature. When the temperature was not measured, the nearest measured temperature above it
stands in (acceptance falls as temperature rises, so this errs against speculation); when the
model was not measured, the measurements of a model with the same tokenizer stand in. Every
stand-in is named in the answer. The methods are ranked on one dataset: the task's dataset
measured for the most methods (the task's order breaks ties); a method measured only on another
dataset still runs, and the answer says that its acceptance comes from elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from sim.errors import ScenarioError, SpecsimError
from sim.summary import Summary

#: Fraction by which a drafting method must cut mean latency below ``none`` to be recommended.
MIN_GAIN = 0.03
#: A model measured with the same tokenizer whose acceptance stands in for unmeasured targets.
STAND_IN_MODEL = "llama-3.1-8b"
#: Below this many parameters a target is "small" for the rule of thumb.
SMALL_TARGET_PARAMS = 3e9
#: From this temperature on, sampling is "high temperature" for the rule of thumb.
HIGH_TEMPERATURE = 0.7
#: From this mean batch size (of the run without speculation) on, the load is "high".
HIGH_LOAD_BATCH = 32.0


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


@dataclass
class Outcome:
    """A simulated candidate's figures (milliseconds, tokens per second)."""

    label: str
    method: str
    mean_e2e_latency_ms: float
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    itl_p50_ms: float | None
    output_throughput_tok_s: float
    mean_acceptance_length: float
    mean_batch_size: float
    meets_slo: bool
    acceptance_source: str | None = None
    #: ``supported`` or ``experimental``: how the engine offers this configuration.
    engine_support: str = "supported"


@dataclass
class Recommendation:
    """The answer: best and runner-up, every candidate, those not simulated, and why."""

    request: Request
    best: Outcome
    runner_up: Outcome | None
    outcomes: list[Outcome]
    not_simulated: dict[str, str]
    explanation: list[str]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    from sim.acceptance.config import TRACE_METHODS
    from sim.acceptance.shipped_data import SHIPPED_TRACES, profile_key
    from sim.catalogue import get_model

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


def simulate(
    document: dict[str, Any], candidate: Candidate, request: Request, source: str | None
) -> Outcome:
    """Run one candidate on the common workload. Raise SpecsimError if it cannot run."""
    from sim.run import run_scenario
    from sim.scenario import validate_document

    variant = {**document, "speculation": dict(candidate.speculation)}
    temperature = variant["speculation"].pop("_temperature", None)
    if temperature is not None:
        variant["workload"] = {**document["workload"], "temperature": temperature}
    scenario = validate_document(variant, f"candidate {candidate.label}")
    result = run_scenario(scenario, Path.cwd())
    summary = Summary.from_dict(result.summary)
    support = str(
        result.resolved_scenario["derived"]["strategy"].get("engine_support", "supported")
    )
    ttft, tpot = summary.ttft_ms.p99, summary.tpot_ms.p50
    e2e_mean_ms = summary.e2e_latency_ms.mean
    e2e_mean_ms = float("nan") if e2e_mean_ms is None else e2e_mean_ms
    meets = (
        request.ttft_p99_ms is None or (ttft is not None and ttft <= request.ttft_p99_ms)
    ) and (request.tpot_p50_ms is None or (tpot is not None and tpot <= request.tpot_p50_ms))
    return Outcome(
        candidate.label, summary.method, e2e_mean_ms,
        ttft, tpot, summary.itl_ms.p50, summary.output_throughput_tok_s,
        summary.mean_acceptance_length, summary.mean_batch_size, meets, source, support,
    )  # fmt: skip


def rank(outcomes: list[Outcome]) -> list[Outcome]:
    """Best first: SLO met, then lower mean latency; ``none`` wins within :data:`MIN_GAIN`."""
    base = next(o for o in outcomes if o.method == "none")

    def key(o: Outcome) -> tuple[bool, float]:
        latency = o.mean_e2e_latency_ms
        if o.method != "none" and latency > base.mean_e2e_latency_ms * (1.0 - MIN_GAIN):
            latency = max(latency, base.mean_e2e_latency_ms * (1.0 + 1e-9))
        return (not o.meets_slo, latency)

    return sorted(outcomes, key=key)


def explain(request: Request, outcomes: list[Outcome], best: Outcome) -> list[str]:
    """What the runs show, in numbers, and which rule of thumb they confirm or contradict."""
    from sim.catalogue import get_model

    base = next(o for o in outcomes if o.method == "none")
    drafted = [o for o in rank(outcomes) if o.method != "none"]
    lines: list[str] = []
    if not drafted:
        return ["no drafting configuration could be simulated; nothing to compare with none"]
    top = drafted[0]
    gain = 1.0 - top.mean_e2e_latency_ms / base.mean_e2e_latency_ms
    pays = best.method != "none"
    if top.itl_p50_ms and base.itl_p50_ms:
        lines.append(
            f"{top.label}: each verify step emits {top.mean_acceptance_length:.2f} tokens per "
            f"sequence but takes {top.itl_p50_ms / base.itl_p50_ms:.2f}x as long as a plain step "
            f"(ITL p50 {top.itl_p50_ms:.1f} vs {base.itl_p50_ms:.1f} ms); mean latency "
            f"{'falls' if gain > 0 else 'rises'} by {abs(gain) * 100:.1f}% against none"
        )
    small = get_model(request.model).total_params < SMALL_TARGET_PARAMS
    hot = request.temperature >= HIGH_TEMPERATURE
    busy = base.mean_batch_size >= HIGH_LOAD_BATCH
    interactive = TASKS[request.task].interactive
    if small:
        rule, expected = "speculation does not pay for targets under 3B parameters", False
    elif hot:
        rule, expected = "speculation loses at high temperature", False
    elif busy:
        rule, expected = (
            f"speculation loses at high load (mean batch {base.mean_batch_size:.0f} without it)",
            False,
        )
    elif interactive:
        rule, expected = f"speculation pays for interactive {request.task} at low load", True
    else:
        rule, expected = "speculation pays at low load", True
    if not (small or hot or busy):
        rule += f" (mean batch {base.mean_batch_size:.0f} without it)"
    verdict = "confirms" if pays == expected else "runs against"
    lines.append(f"the simulation {verdict} the rule of thumb: {rule}")
    return lines


def recommend_configuration(
    request: Request, on_candidate: Callable[[str, int, int], None] | None = None
) -> Recommendation:
    """Simulate every candidate on common random numbers and return the best and runner-up.

    ``on_candidate(label, number_done, number_of_candidates)`` is called after each run.
    Raise ScenarioError if the request is invalid (unknown task, model, GPU, or load), and
    SpecsimError if even the configuration without speculation cannot run on this node.
    """
    from sim.scenario import validate_document

    document = base_document(request)
    validate_document(document, "recommend")
    found, skipped, sources = candidates(request)
    outcomes: list[Outcome] = []
    for number, candidate in enumerate(found, start=1):
        try:
            outcomes.append(simulate(document, candidate, request, sources.get(candidate.label)))
        except SpecsimError as exc:
            if candidate.label == "none":
                raise SpecsimError(f"the target cannot be served on this node: {exc}") from None
            skipped[candidate.label] = str(exc).splitlines()[0]
        if on_candidate is not None:
            on_candidate(candidate.label, number, len(found))
    ranked = rank(outcomes)
    best = ranked[0]
    notes = [f"acceptance for {label}: {source}" for label, source in sources.items()]
    if len(TASKS[request.task].datasets) > 1:
        methods = sorted({c.speculation["method"] for c in found if c.label != "none"})
        notes.insert(0, f"methods ranked on one dataset: {common_dataset(request, methods)}")
    if request.task in NOTES:
        notes.append(f"{request.task}: {NOTES[request.task]}")
    if not any(o.meets_slo for o in outcomes):
        notes.append("no configuration meets the latency bounds; the closest is shown")
    return Recommendation(
        request,
        best,
        ranked[1] if len(ranked) > 1 else None,
        ranked,
        skipped,
        explain(request, outcomes, best),
        notes,
    )
