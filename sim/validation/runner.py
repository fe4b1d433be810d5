"""Run the simulator on measured points and pair each prediction with its measurement.

:func:`run_points` is the entry point for a loop over the cost model: it takes a group of rows
(a regime, a source, or explicit ids), runs each expressible one through
:func:`sim.run.run_scenario` (identical scenarios run once), and returns one
:class:`ValidationResult` per point, inexpressible points included with their reason. The batch-1
rows of ``sim/validate.py`` (the points the batch-1 coefficients were fitted on, and their checks)
join as regime ``batch-1``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sim.errors import SpecsimError
from sim.run import run_scenario
from sim.scenario import Scenario
from sim.summary import Summary
from sim.validation.points import ValidationPoint, load_points
from sim.validation.scenarios import RATE_DRIVEN, REGIMES, regime_of, traces_dir, try_build

#: ``--regime`` words that stand for several regimes.
REGIME_ALIASES = {"all": REGIMES, "under-load": REGIMES[1:]}
#: The summary latency each latency quantity of a validation point is.
LATENCY_OF_QUANTITY = {"tpot_ms": "tpot", "ttft_ms": "ttft"}
#: The summary latency whose mean ratio (without / with speculation) a rate sweep's speedup is.
LATENCY_OF_RATIO = {"tpot_ratio": "tpot", "latency_ratio": "e2e_latency"}
#: Which error budget a quantity belongs to.
FAMILY = {
    "tpot_ms": "tpot",
    "ttft_ms": "ttft",
    "output_tok_s": "throughput",
    "decode_tok_s": "throughput",
    "speedup": "speedup",
    "acceptance_length": "acceptance",
}


@dataclass(frozen=True)
class ValidationResult:
    """A measured point, the simulator's prediction of it, and where it stands.

    ``predicted`` is None when the point is not expressible (``reason`` says why); ``fitted_by``
    names the fit that used the point, empty for an out-of-sample point.
    """

    point_id: str
    regime: str
    setup: str
    quantity: str
    statistic: str
    unit: str
    measured: float
    predicted: float | None
    source_group: str
    source: str
    fitted_by: str
    reason: str = ""
    #: The point's offered request rate where its arrivals are rate-driven (Poisson or constant).
    rate_per_s: float | None = None
    #: The point's closed-loop client count (None: not a closed loop).
    concurrency: int | None = None

    @property
    def family(self) -> str:
        """``tpot``, ``ttft``, ``throughput``, ``speedup`` or ``acceptance``."""
        return FAMILY[self.quantity]

    @property
    def is_fitted(self) -> bool:
        """Whether a coefficient was fitted on this point."""
        return bool(self.fitted_by)

    @property
    def relative_error(self) -> float | None:
        """``(predicted − measured) / measured``; None when there is no prediction."""
        if self.predicted is None:
            return None
        return (self.predicted - self.measured) / self.measured


def resolve_regimes(names: Iterable[str]) -> tuple[str, ...]:
    """Expand ``all`` and ``under-load`` and check every name.

    Raise SpecsimError naming the unknown regime and the known ones.
    """
    resolved: list[str] = []
    for name in names:
        group = REGIME_ALIASES.get(name, (name,))
        for regime in group:
            if regime not in REGIMES:
                known = ", ".join((*REGIMES, *REGIME_ALIASES))
                raise SpecsimError(f"--regime: unknown regime {name!r}; known: {known}")
            if regime not in resolved:
                resolved.append(regime)
    return tuple(resolved)


def _setup(point: ValidationPoint) -> str:
    load = {
        "closed_loop": f"{point.concurrency} clients",
        "poisson": f"Poisson {point.rate_per_s:g}/s" if point.rate_per_s else "Poisson",
        "constant": f"{point.rate_per_s:g} req/s" if point.rate_per_s else "constant rate",
        "trace": "trace replay",
    }.get(point.arrival, "load not stated")
    lengths = (
        f", {point.prompt_tokens}/{point.output_tokens} tok"
        if point.prompt_tokens and point.output_tokens
        else ""
    )
    if point.lengths:
        lengths = f", {point.lengths} lengths"
    if point.num_turns and point.num_turns > 1:
        lengths += f" x {point.num_turns} turns"
    spec = "" if point.method == "none" else f", {point.method}"
    if point.method != "none" and point.draft_model:
        spec += f" ({point.draft_model})"
    if point.method != "none" and point.num_speculative_tokens:
        spec += f" k={point.num_speculative_tokens}"
    return (
        f"{point.engine}, {point.model}, {point.gpu} x{point.num_gpus}, {point.precision}"
        f"{spec}, {load}{lengths}"
    )


class _Runs:
    """Run each distinct scenario once and keep its summary."""

    def __init__(self) -> None:
        self._summaries: dict[str, Summary] = {}

    def summary(self, scenario: Scenario) -> Summary:
        key = scenario.model_dump_json()
        if key not in self._summaries:
            self._summaries[key] = run_scenario(scenario, traces_dir()).summary
        return self._summaries[key]


def _predict(point: ValidationPoint, runs: _Runs) -> tuple[float | None, str]:
    scenario, reason = try_build(point)
    if scenario is None:
        return None, reason
    try:
        summary = runs.summary(scenario)
        if point.quantity == "speedup":
            baseline, reason = try_build(point, method="none")
            if baseline is None:
                return None, reason
            if point.statistic in LATENCY_OF_RATIO:
                return _latency_ratio(runs.summary(baseline), summary, point.statistic)
            plain = runs.summary(baseline).output_throughput_tok_s
            return summary.output_throughput_tok_s / plain, ""
    except SpecsimError as exc:  # e.g. the model does not fit on the GPUs
        return None, f"simulation refused: {exc}"
    if point.quantity == "output_tok_s":
        return float(summary.output_throughput_tok_s), ""
    value = summary.latency_stat_ms(LATENCY_OF_QUANTITY[point.quantity], point.statistic)
    if value is None:
        return None, f"the run measured no {point.quantity}"
    return float(value), ""


def _latency_ratio(
    baseline: Summary, speculative: Summary, statistic: str
) -> tuple[float | None, str]:
    """A rate sweep's speedup: the mean latency of ``statistic`` (:data:`LATENCY_OF_RATIO`)
    without speculation over its mean with it.

    Below saturation an open loop's output throughput is its offered load in both arms, so a
    throughput ratio is ~1 whatever speculation does; the sources that sweep the request rate
    report latency ratios (vLLM PR #12755's "Speedup" column is baseline TPOT / k=1 TPOT; the vLLM
    blog of 2024-10 compares end-to-end latencies).
    """
    metric = LATENCY_OF_RATIO[statistic]
    plain = baseline.latency_stat_ms(metric, "mean")
    spec = speculative.latency_stat_ms(metric, "mean")
    if plain is None or spec is None or spec <= 0:
        return None, f"the run measured no {metric}"
    return float(plain / spec), ""


def run_points(
    points: Sequence[ValidationPoint] | None = None,
    *,
    regimes: Iterable[str] | None = None,
    source_groups: Iterable[str] | None = None,
    point_ids: Iterable[str] | None = None,
    on_point: Callable[[str, int, int], None] | None = None,
) -> list[ValidationResult]:
    """Predict the selected points (all shipped under-load points by default).

    ``on_point(point_id, number_done, number_selected)`` is called after each point (progress).

    ``regimes`` (names of :data:`REGIMES`, or ``all`` / ``under-load``), ``source_groups`` and
    ``point_ids`` narrow the selection; ``batch-1`` adds the rows of ``sim/validate.py`` when the
    selection is not narrowed (no ``points``, ``source_groups`` or ``point_ids``).

    Raise SpecsimError for an unknown regime, and CalibrationError if the points file is bad.
    """
    wanted = resolve_regimes(regimes) if regimes is not None else REGIMES
    chosen = list(points) if points is not None else load_points()
    if source_groups is not None:
        groups = set(source_groups)
        chosen = [p for p in chosen if p.source_group in groups]
    if point_ids is not None:
        ids = set(point_ids)
        chosen = [p for p in chosen if p.point_id in ids]
    results: list[ValidationResult] = []
    if "batch-1" in wanted and points is None and source_groups is None and point_ids is None:
        results.extend(batch1_results())
    runs = _Runs()
    chosen = [point for point in chosen if regime_of(point) in wanted]
    for number, point in enumerate(chosen, start=1):
        regime = regime_of(point)
        predicted, reason = _predict(point, runs)
        if on_point is not None:
            on_point(point.point_id, number, len(chosen))
        results.append(
            ValidationResult(
                point_id=point.point_id,
                regime=regime,
                setup=_setup(point),
                quantity=point.quantity,
                statistic=point.statistic,
                unit=point.unit,
                measured=point.measured,
                predicted=predicted,
                source_group=point.source_group,
                source=point.source,
                fitted_by=point.fitted_by,
                reason=reason,
                rate_per_s=point.rate_per_s if point.arrival in RATE_DRIVEN else None,
                concurrency=point.concurrency if point.arrival == "closed_loop" else None,
            )
        )
    return results


def batch1_results() -> list[ValidationResult]:
    """The batch-1 table of ``sim/validate.py`` as results (values unchanged)."""
    from sim import validate

    groups = {
        validate.ISSUE_20780: "vllm-issue-20780",
        validate.PR_16937: "vllm-pr-16937",
        validate.EAGLE3_TABLE4: "eagle3-paper",
    }
    units = {"tpot_ms": "ms", "acceptance_length": "tokens", "output_tok_s": "tok/s"}
    results = []
    for number, row in enumerate(validate.validation_rows(), start=1):
        results.append(
            ValidationResult(
                point_id=f"bs1-{number:02d}",
                regime="batch-1",
                setup=row.setup,
                quantity=row.quantity,
                statistic="mean",
                unit=units.get(row.quantity, "tok/s"),
                measured=row.measured,
                predicted=row.predicted,
                source_group=groups[row.source],
                source=row.source,
                fitted_by=row.used_for,
            )
        )
    return results
