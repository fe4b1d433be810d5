"""Fit step-cost parameters by simulation: rerun each measured experiment, match its statistics.

An :class:`Experiment` is one measured run rebuilt as a scenario document plus the statistics it
reported (mean, median and p99 TTFT, TPOT and ITL in ms, output and request throughput).
:func:`fit_by_simulation` moves the parameters of :mod:`calibration.parameters` until the simulated
statistics of every experiment agree with the measured ones; every evaluation runs the scenario
through :func:`sim.run.run_scenario`, so the fit stays right whatever the cost model prices.

Residual of a statistic: ``log(simulated / measured) / sigma``. ``sigma`` is the statistic's
relative sampling error, estimated by bootstrapping the simulated run's requests at the shipped
values, but never below :data:`SIGMA_FLOOR` (the spread a rebuilt run cannot reproduce: an aggregate
file keeps no length distribution, so requests are simulated at the mean lengths).

Identifiability, before fitting: the Jacobian ``J`` of the residuals in the parameters' declared
scales is taken at the shipped values by forward differences, and
:func:`calibration.identifiability.select_identifiable` frees only what it separates; the others
stay at their shipped values, with the reason.

Optimiser: scipy ``least_squares`` (trust-region reflective) within the declared bounds, forward
differences of :data:`DIFF_STEP` of the value (at least a tenth of the scale), at most
:data:`MAX_ITERATIONS` Jacobians. Interval: ``x ± 1.96·sqrt(diag((JᵀJ)⁻¹)·max(1, χ²/dof))`` at the
solution, clipped to the bounds and always containing the estimate.
"""

from __future__ import annotations

import copy
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from scipy.optimize import least_squares

from calibration.identifiability import (
    BOUND_TOLERANCE,
    MAX_CONDITION,
    parameter_intervals,
    select_identifiable,
)
from calibration.parameters import (
    FitParameter,
    efficiency_override,
    engine_settings,
    shipped_values,
)
from sim.errors import CalibrationError, SpecsimError
from sim.run import ScenarioResult, run_scenario
from sim.scenario import validate_document
from sim.summary import Summary
from sim.workload.trace import TraceRequests

MAX_ITERATIONS = 8
DIFF_STEP = 0.05
NUM_BOOTSTRAP, BOOTSTRAP_SEED = 200, 20264
#: Smallest relative error assumed per statistic kind (see the module docstring).
SIGMA_FLOOR = {"mean": 0.02, "p50": 0.03, "p99": 0.10, "throughput": 0.02}
METRICS = ("ttft", "tpot", "itl")
STATS = ("mean", "p50", "p99")
#: The throughput statistics (:func:`statistics_of`: output tokens and requests per second).
THROUGHPUTS = ("output_throughput", "request_throughput")


@dataclass(frozen=True)
class Experiment:
    """One measured run: the scenario that rebuilds it and the statistics it reported.

    ``measured`` maps statistic names (``ttft_mean``, ``tpot_p50``, ``itl_p99`` in ms,
    ``output_throughput`` in tok/s, ``request_throughput`` in req/s) to positive values.
    ``reported`` holds statistics only compared after the fit, not fitted against (e.g. the
    throughput of an open-loop run, set by its arrivals and its longest requests).
    ``trace``: the requests a replayed run's ``workload.arrival.path`` holds, read once for
    every simulation of the fit.
    """

    label: str
    document: dict[str, Any]
    measured: dict[str, float]
    notes: tuple[str, ...] = ()
    reported: dict[str, float] = field(default_factory=dict)
    trace: TraceRequests | None = None


@dataclass(frozen=True)
class SimulationFit:
    """The fitted parameters (free ones fitted, fixed ones at their shipped values)."""

    values: dict[str, float]
    shipped: dict[str, float]
    free: tuple[str, ...]
    fixed: dict[str, str]
    ci95: dict[str, tuple[float, float]]
    comparison: dict[str, dict[str, dict[str, float]]]
    warnings: tuple[str, ...]
    num_simulations: int
    seconds: float
    method: str
    condition_number: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


#: Scenario key paths and the ``specsim calibrate`` flags that set them, for error hints.
FLAG_HINTS = (("hardware.num_gpus", "--tp"), ("hardware.gpu", "--gpu"), ("model:", "--model:"))


def as_flags(message: str) -> str:
    """A simulator error with each scenario key the user cannot see replaced by its flag."""
    for key, flag in FLAG_HINTS:
        message = message.replace(key, flag)
    return message


def statistics_of(summary: Summary) -> dict[str, float]:
    """The fit statistics of a simulated run's summary (NaN where the run has none)."""
    out: dict[str, float] = {}
    for metric in METRICS:
        for stat in STATS:
            value = summary.latency_stat_ms(metric, stat)
            out[f"{metric}_{stat}"] = float("nan") if value is None else float(value)
    out["output_throughput"] = float(summary.output_throughput_tok_s)
    out["request_throughput"] = float(summary.request_throughput_req_s)
    return out


def _floor(name: str) -> float:
    if name in THROUGHPUTS:
        return SIGMA_FLOOR["throughput"]
    return SIGMA_FLOOR[name.rsplit("_", 1)[1]]


def sampling_sigma(result: ScenarioResult, names: Sequence[str]) -> dict[str, float]:
    """Relative standard error of each statistic, by bootstrap over the simulated requests (ITL
    takes TPOT's; throughput ``1/sqrt(completed)``), floored at :data:`SIGMA_FLOOR`."""
    r = result.requests
    done = np.isfinite(r["finished_at_s"])
    ttft = (r["first_token_at_s"] - r["arrival_at_s"])[done]
    out_tokens = r["output_tokens"][done]
    multi = out_tokens > 1
    tpot = ((r["finished_at_s"] - r["first_token_at_s"])[done][multi]) / (out_tokens[multi] - 1)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    spread: dict[str, float] = {}
    for metric, values in (("ttft", ttft), ("tpot", tpot)):
        for stat in STATS:
            spread[f"{metric}_{stat}"] = _bootstrap_rel_se(values, stat, rng)
    for stat in STATS:
        spread[f"itl_{stat}"] = spread[f"tpot_{stat}"]
    count = max(int(done.sum()), 1)
    for name in THROUGHPUTS:
        spread[name] = 1.0 / np.sqrt(count)
    return {name: max(spread.get(name, 0.0), _floor(name)) for name in names}


def _bootstrap_rel_se(values: np.ndarray, stat: str, rng: np.random.Generator) -> float:
    if values.size < 2:
        return 0.0
    picks = values[rng.integers(0, values.size, size=(NUM_BOOTSTRAP, values.size))]
    if stat == "mean":
        draws = picks.mean(axis=1)
        centre = values.mean()
    else:
        q = 50 if stat == "p50" else 99
        draws = np.percentile(picks, q, axis=1)
        centre = np.percentile(values, q)
    return float(np.std(draws) / centre) if centre > 0 else 0.0


class _Evaluator:
    """Runs the experiments at given parameter values, caching each distinct evaluation."""

    def __init__(
        self,
        experiments: Sequence[Experiment],
        gpu: str,
        model: str,
        tp: int,
        workdir: Path,
    ) -> None:
        self.experiments = experiments
        self.gpu, self.model, self.tp = gpu, model, tp
        self.workdir = workdir
        self.cache: dict[tuple[tuple[str, float], ...], list[ScenarioResult]] = {}

    def run(self, values: dict[str, float]) -> list[ScenarioResult]:
        key = tuple(sorted((k, round(v, 12)) for k, v in values.items()))
        if key not in self.cache:
            self.cache[key] = [self._one(e, values) for e in self.experiments]
        return self.cache[key]

    def _one(self, experiment: Experiment, values: dict[str, float]) -> ScenarioResult:
        document = copy.deepcopy(experiment.document)
        engine = document.setdefault("engine", {})
        engine.update(engine_settings(values))
        efficiency = efficiency_override(self.gpu, values)
        if efficiency is not None:
            engine["profile"] = str(self._profile(engine, efficiency))
        try:
            scenario = validate_document(document, f"rebuilt run of {experiment.label}")
            return run_scenario(scenario, Path.cwd(), trace=experiment.trace)
        except SpecsimError as exc:
            raise CalibrationError(
                f"{experiment.label}: cannot simulate the run: {as_flags(str(exc))}"
            ) from None

    def _profile(self, engine: dict[str, Any], efficiency: dict[str, float]) -> Path:
        path = self.workdir / f"evaluation-{len(self.cache)}-{abs(hash(str(efficiency)))}.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "provenance": {"note": "one evaluation of a fit by simulation"},
                    "engine": {
                        "gpu": self.gpu,
                        "model": self.model,
                        "tensor_parallel_size": self.tp,
                        "step_overhead_s": float(engine.get("step_overhead_s", 0.0) or 0.0),
                        "per_sequence_overhead_s": float(
                            engine.get("per_sequence_overhead_s", 0.0) or 0.0
                        ),
                        "efficiency": efficiency,
                    },
                }
            ),
            encoding="utf-8",
        )
        return path


def fit_by_simulation(
    experiments: Sequence[Experiment],
    parameters: Sequence[FitParameter],
    gpu: str,
    model: str,
    tp: int,
    preset: str = "vllm-v1",
    progress: Callable[[str], None] | None = None,
) -> SimulationFit:
    """Fit the identifiable ``parameters`` so the experiments' simulated statistics match.

    Raise CalibrationError if no experiment has a statistic to fit against, a simulation fails,
    or no parameter can be identified from the data.
    """
    started = time.perf_counter()
    names = [(i, s) for i, e in enumerate(experiments) for s in sorted(e.measured)]
    if not names:
        labels = ", ".join(e.label for e in experiments) or "no input"
        raise CalibrationError(
            f"{labels}: no statistic to fit against (TTFT, TPOT, ITL, throughput)"
        )
    shipped = shipped_values(parameters, gpu, preset)
    measured = np.array([experiments[i].measured[s] for i, s in names])
    say = progress or (lambda _text: None)
    dropped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="specsim-fit-") as tmp:
        evaluator = _Evaluator(experiments, gpu, model, tp, Path(tmp))
        base = evaluator.run(shipped)
        base_stats = [statistics_of(r.summary) for r in base]
        missing = [(i, s) for i, s in names if not np.isfinite(base_stats[i][s])]
        for i, s in missing:
            dropped.append(f"{experiments[i].label}: {s} not fitted: the simulated run has none")
        names = [(i, s) for i, s in names if (i, s) not in missing]
        if not names:
            raise CalibrationError(
                f"{', '.join(e.label for e in experiments)}: no reported statistic can be simulated"
            )
        measured = np.array([experiments[i].measured[s] for i, s in names])
        sigma = np.array([sampling_sigma(base[i], [s])[s] for i, s in names])

        def simulated(values: dict[str, float]) -> np.ndarray:
            results = evaluator.run(values)
            stats = [statistics_of(r.summary) for r in results]
            return np.array([stats[i][s] for i, s in names])

        def residuals(values: dict[str, float]) -> np.ndarray:
            predicted = simulated(values)
            with np.errstate(divide="ignore", invalid="ignore"):
                r = np.log(predicted / measured) / sigma
            return np.where(np.isfinite(r), r, 1e3)

        scales = {p.name: p.scale for p in parameters}

        def jacobian(values: dict[str, float], free: Sequence[FitParameter]) -> np.ndarray:
            r0 = residuals(values)
            columns = []
            for p in free:
                step = max(DIFF_STEP * abs(values[p.name]), 0.1 * p.scale)
                if values[p.name] + step > p.upper:
                    step = -step
                moved = dict(values, **{p.name: values[p.name] + step})
                columns.append((residuals(moved) - r0) / (step / p.scale))
            return np.column_stack(columns) if columns else np.zeros((r0.size, 0))

        say(f"identifiability: {len(parameters)} candidate parameters at shipped values")
        j0 = jacobian(shipped, parameters)
        free, fixed, condition = select_identifiable(parameters, j0, shipped)
        if not free:
            raise CalibrationError(
                f"{', '.join(e.label for e in experiments)}: the data identify none of "
                f"{', '.join(p.name for p in parameters)}: "
                + "; ".join(f"{k}: {v}" for k, v in fixed.items())
            )
        say(f"fitting {', '.join(p.name for p in free)} ({len(fixed)} fixed)")

        def to_values(z: np.ndarray) -> dict[str, float]:
            values = dict(shipped)
            for k, p in enumerate(free):
                values[p.name] = float(np.clip(z[k] * p.scale, p.lower, p.upper))
            return values

        z0 = np.array([shipped[p.name] / p.scale for p in free])
        lower = np.array([p.lower / p.scale for p in free])
        upper = np.array([p.upper / p.scale for p in free])
        # Start strictly inside the bounds: from a shipped value on a bound (an overhead at 0)
        # the optimiser's first steps would otherwise stay pinned there.
        z0 = np.clip(z0, lower + 0.1 * np.minimum(1.0, upper - lower), upper)
        result = least_squares(
            lambda z: residuals(to_values(z)),
            z0,
            jac=lambda z: jacobian(to_values(z), free),
            bounds=(lower, upper),
            method="trf",
            x_scale=1.0,
            max_nfev=MAX_ITERATIONS,
        )
        best = to_values(np.asarray(result.x))
        for p in free:  # a value within the tolerance of a bound is on it
            for bound in (p.lower, p.upper):
                if abs(best[p.name] - bound) <= BOUND_TOLERANCE * (p.upper - p.lower):
                    best[p.name] = bound
        r_best = residuals(best)
        j_best = jacobian(best, free)
        results = evaluator.run(best)
        num_simulations = len(evaluator.cache) * len(experiments)
    ci95, warnings = parameter_intervals(free, best, r_best, j_best, scales)
    warnings = dropped + warnings
    for name, reason in fixed.items():
        warnings.append(f"{name} fixed at its shipped value {shipped[name]:.6g}: {reason}")
    comparison: dict[str, dict[str, dict[str, float]]] = {}
    for i, experiment in enumerate(experiments):
        predicted = statistics_of(results[i].summary)
        for stat, value in sorted({**experiment.measured, **experiment.reported}.items()):
            comparison.setdefault(experiment.label, {})[stat] = {
                "measured": float(value),
                "predicted": predicted[stat],
                "rel_error": predicted[stat] / value - 1.0,
                "fitted": float(stat in experiment.measured),
            }
    return SimulationFit(
        values=best,
        shipped=shipped,
        free=tuple(p.name for p in free),
        fixed=fixed,
        ci95=ci95,
        comparison=comparison,
        warnings=tuple(warnings),
        num_simulations=num_simulations,
        seconds=time.perf_counter() - started,
        condition_number=condition,
        method=(
            f"fit by simulation of {len(experiments)} rebuilt run(s) through specsim's own "
            "scenario runner; least squares on log(simulated/measured) of each reported "
            "statistic over its relative sampling error (bootstrap of the simulated requests, "
            "floors: mean 2%, median 3%, p99 10%, throughput 2%); parameters identifiable by "
            f"Jacobian condition <= {MAX_CONDITION:g} and 95% half-width <= half their magnitude; "
            "95% interval from the Jacobian covariance scaled by max(1, chi2/dof)"
        ),
    )
