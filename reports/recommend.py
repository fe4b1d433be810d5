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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reports.recommend_candidates import (
    NOTES,
    TASKS,
    Candidate,
    Request,
    base_document,
    candidates,
    common_dataset,
)
from sim.errors import SpecsimError

#: Fraction by which a drafting method must cut mean latency below ``none`` to be recommended.
MIN_GAIN = 0.03


#: Below this many parameters a target is "small" for the rule of thumb.
SMALL_TARGET_PARAMS = 3e9
#: From this temperature on, sampling is "high temperature" for the rule of thumb.
HIGH_TEMPERATURE = 0.7
#: From this mean batch size (of the run without speculation) on, the load is "high".
HIGH_LOAD_BATCH = 32.0


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
    summary = result.summary
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
