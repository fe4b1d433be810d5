"""Fit the engine's per-step overheads by replaying a measured run through the simulator.

When an artifact records only request timings (a ``vllm bench serve --save-detailed`` result or a
request-timing ``requests.jsonl``), the step cost cannot be regressed on steps. Instead the run is
replayed — its own arrivals, prompt and output lengths, on the stated GPU, model and engine limits —
and the two engine overheads of :class:`sim.cost_model.StepCostModel` (``T_fixed = s + b·B``:
``s`` per step, ``b`` per scheduled sequence) are chosen so that the simulated TTFT and TPOT agree
with the measured ones: robust least squares (scipy ``least_squares``, soft-L1) on the log-ratios
of mean and median TTFT and TPOT, over the requests in the fit set. Every evaluation is one
simulation (about 0.4 s for 300 requests); the optimiser is capped at :data:`MAX_SIMULATIONS`.

Intervals are a linearised bootstrap: requests of the fit set are resampled (both the measured and
the simulated statistics are recomputed on the resample, with no new simulation), and each resample
moves the parameters by ``−J⁺ r`` with ``J`` the optimiser's Jacobian at the solution. All requests
are always simulated — they share the batch — and a held-out set only changes which are compared.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from calibration.fit_simulation import Experiment, as_flags
from sim.artifacts import detect_kind, parse_artifact
from sim.artifacts.replay import read_replay_requests
from sim.artifacts.request_timings import resolve_requests_file
from sim.artifacts.schema import ParsedArtifact
from sim.errors import CalibrationError, SpecsimError
from sim.run import run_scenario
from sim.scenario import validate_document
from sim.workload.trace import TraceRequests, trace_of_replay

#: Upper bound on simulations per fit (the issue's budget: a few dozen, seconds in all).
MAX_SIMULATIONS = 30
#: Parameter vector: step overhead and per-sequence overhead in milliseconds (one scale for both).
PARAMETERS = ("step_overhead_s", "per_sequence_overhead_s")
X0_MS, LOWER_MS, UPPER_MS = (1.5, 0.02), (0.0, 0.0), (30.0, 2.0)
#: Residual weights: the means are the target; the medians keep the shape honest.
STAT_WEIGHTS = {"ttft_mean": 1.0, "tpot_mean": 1.0, "ttft_p50": 0.5, "tpot_p50": 0.5}
NUM_BOOTSTRAP, BOOTSTRAP_SEED = 400, 20261


@dataclass(frozen=True, eq=False)
class MeasuredRun:
    """A run's requests in replay order with their measured TTFT and TPOT (seconds; TPOT NaN for
    one-token outputs), the engine settings the artifact states, and the requests to replay,
    read once and handed to every simulation of the fit."""

    path: Path
    artifact: ParsedArtifact
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    engine: dict[str, Any]
    trace: TraceRequests

    @property
    def num_requests(self) -> int:
        """Requests replayed."""
        return len(self.ttft_s)


@dataclass(frozen=True)
class ReplayFit:
    """Fitted overheads (seconds) with 95 % intervals, per-statistic residuals and the cost."""

    values: dict[str, float]
    ci95: dict[str, tuple[float, float]]
    residuals: dict[str, float]
    num_simulations: int
    method: str
    settings: dict[str, Any] = field(default_factory=dict)


def read_measured_run(path: Path) -> MeasuredRun:
    """Read a request-timing artifact in the order the workload replays it.

    The replay keeps successful requests with at least one output token and sorts them by arrival
    (:func:`sim.artifacts.replay.read_replay_requests`); the same selection is applied here so that
    simulated request i is measured request i.
    Raise CalibrationError naming the file if it has no per-request TTFT and end-to-end latency.
    """
    path = Path(path)
    if detect_kind(path) == "vllm_request_timings":
        path = resolve_requests_file(path)
    replay = read_replay_requests(path)
    artifact = parse_artifact(path, detect_kind(path))
    requests = artifact.requests
    if requests is None or requests.ttft_s is None or requests.e2e_s is None:
        raise CalibrationError(f"{path}: expected per-request ttft and end-to-end latency; none")
    if requests.output_tokens is None:
        raise CalibrationError(f"{path}: expected per-request output lengths; none")
    keep = requests.succeeded & (requests.output_tokens >= 1)
    ttft, e2e = requests.ttft_s[keep], requests.e2e_s[keep]
    output = requests.output_tokens[keep].astype(np.float64)
    if replay.arrival_at_s is not None and requests.arrival_at_s is not None:
        order = np.argsort(requests.arrival_at_s[keep], kind="stable")
        ttft, e2e, output = ttft[order], e2e[order], output[order]
    if not np.all(np.isfinite(ttft)):
        raise CalibrationError(f"{path}: expected a finite TTFT for every successful request")
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(output > 1, (e2e - ttft) / (output - 1), np.nan)
    settings = artifact.metadata.settings
    engine = {
        key: int(settings[f"engine.{key}"])  # type: ignore[arg-type]
        for key in ("max_num_seqs", "max_num_batched_tokens")
        if isinstance(settings.get(f"engine.{key}"), int)
    }
    return MeasuredRun(path, artifact, ttft, tpot, engine, trace_of_replay(replay))


def replay_document(
    run: MeasuredRun, gpu: str, model: str, tp: int, overheads_s: tuple[float, float]
) -> dict[str, Any]:
    """The scenario that replays ``run`` with the given step and per-sequence overheads."""
    return {
        "name": f"replay-{run.path.parent.name or run.path.stem}",
        "hardware": {"gpu": gpu, "num_gpus": tp},
        "model": model,
        "engine": {
            "preset": "vllm-v1",
            **run.engine,
            "step_overhead_s": overheads_s[0],
            "per_sequence_overhead_s": overheads_s[1],
            # Request timings are taken on the engine's clock from queued_ts: the serving front
            # end lies outside them. Client-side timings (bench results) include it.
            "frontend": {"enabled": run.artifact.kind != "vllm_request_timings"},
        },
        "workload": {
            "num_requests": run.num_requests,
            "arrival": {"process": "trace", "path": str(run.path.resolve())},
        },
    }


def simulate(
    run: MeasuredRun, gpu: str, model: str, tp: int, overheads_s: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray]:
    """Simulated per-request TTFT and TPOT (seconds), in replay order.

    Raise CalibrationError naming the replay if the scenario cannot be built or run.
    """
    document = replay_document(run, gpu, model, tp, overheads_s)
    try:
        scenario = validate_document(document, f"replay of {run.path}")
        result = run_scenario(scenario, Path.cwd(), trace=run.trace)
    except SpecsimError as exc:
        raise CalibrationError(f"{run.path}: cannot replay the run: {as_flags(str(exc))}") from None
    r = result.requests
    ttft = r["first_token_at_s"] - r["arrival_at_s"]
    output = r["output_tokens"].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(output > 1, (r["finished_at_s"] - r["first_token_at_s"]) / (output - 1), 0)
    tpot = np.where(output > 1, tpot, np.nan)
    return ttft, tpot


def statistics(ttft: np.ndarray, tpot: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Mean TTFT, mean TPOT, median TTFT, median TPOT over the requests ``index`` (seconds)."""
    t, p = ttft[index], tpot[index]
    return np.array([t.mean(), np.nanmean(p), np.median(t), np.nanmedian(p)])


def fit_overheads(
    run: MeasuredRun, gpu: str, model: str, tp: int, fit_index: np.ndarray | None = None
) -> ReplayFit:
    """Fit step and per-sequence overheads so the replay matches the measured requests in
    ``fit_index`` (every request by default).

    Raise CalibrationError if the replay fails or the fit set has no multi-token request.
    """
    index = np.arange(run.num_requests) if fit_index is None else np.asarray(fit_index)
    if not np.any(np.isfinite(run.tpot_s[index])):
        raise CalibrationError(f"{run.path}: the fit set has no request with two output tokens")
    measured = statistics(run.ttft_s, run.tpot_s, index)
    weights = np.sqrt(np.array(list(STAT_WEIGHTS.values())))
    cache: dict[tuple[float, float], tuple[np.ndarray, np.ndarray]] = {}

    def simulated(x_ms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        key = (round(float(x_ms[0]), 9), round(float(x_ms[1]), 9))
        if key not in cache:
            cache[key] = simulate(run, gpu, model, tp, (key[0] * 1e-3, key[1] * 1e-3))
        return cache[key]

    def residuals(x_ms: np.ndarray) -> np.ndarray:
        ttft, tpot = simulated(x_ms)
        return weights * np.log(statistics(ttft, tpot, index) / measured)

    # The simulator is event-driven, so its output is piecewise constant at tiny steps; a relative
    # finite-difference step of 5 % sees the trend instead of the steps.
    result = least_squares(
        residuals,
        np.array(X0_MS),
        bounds=(LOWER_MS, UPPER_MS),
        loss="soft_l1",
        f_scale=0.05,
        diff_step=[0.05, 0.05],
        max_nfev=MAX_SIMULATIONS // 3,
    )
    best_ms = np.asarray(result.x, dtype=np.float64)
    ttft, tpot = simulated(best_ms)
    ci = _bootstrap_ci(run, ttft, tpot, index, best_ms, np.asarray(result.jac), weights)
    # The linearised bootstrap is centred on the Jacobian's step, not on the optimum; an interval
    # always holds its estimate.
    ci = (
        [min(lo, b) for lo, b in zip(ci[0], best_ms.tolist(), strict=True)],
        [max(hi, b) for hi, b in zip(ci[1], best_ms.tolist(), strict=True)],
    )
    final = statistics(ttft, tpot, index) / measured - 1.0
    names = list(STAT_WEIGHTS)
    return ReplayFit(
        values={name: float(best_ms[i]) * 1e-3 for i, name in enumerate(PARAMETERS)},
        ci95={name: (ci[0][i] * 1e-3, ci[1][i] * 1e-3) for i, name in enumerate(PARAMETERS)},
        residuals={f"{names[i]}_rel_error": float(final[i]) for i in range(len(names))},
        num_simulations=len(cache),
        method=(
            "replay of the measured run through the simulator; soft_l1 least squares on the "
            "log-ratios of simulated to measured mean TTFT, mean TPOT (weight 1) and median TTFT, "
            f"TPOT (weight 0.5) over {index.size} requests; 95% interval by a {NUM_BOOTSTRAP}-"
            "resample bootstrap over requests, linearised through the fit's Jacobian"
        ),
        settings={"gpu": gpu, "model": model, "tp": tp, **run.engine},
    )


def _bootstrap_ci(
    run: MeasuredRun,
    ttft: np.ndarray,
    tpot: np.ndarray,
    index: np.ndarray,
    best_ms: np.ndarray,
    jac: np.ndarray,
    weights: np.ndarray,
) -> tuple[list[float], list[float]]:
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    pinv = np.linalg.pinv(jac)
    draws = []
    for _ in range(NUM_BOOTSTRAP):
        sample = rng.choice(index, size=index.size, replace=True)
        measured = statistics(run.ttft_s, run.tpot_s, sample)
        predicted = statistics(ttft, tpot, sample)
        r = weights * np.log(predicted / measured)
        draws.append(np.clip(best_ms - pinv @ r, LOWER_MS, UPPER_MS))
    low, high = np.percentile(np.array(draws), [2.5, 97.5], axis=0)
    return [float(v) for v in low], [float(v) for v in high]


def replay_experiment(run: MeasuredRun, gpu: str, model: str, tp: int, label: str) -> Experiment:
    """The replay of ``run`` as an experiment of a fit by simulation
    (:func:`calibration.fit_simulation.fit_by_simulation`): its own arrivals, lengths and engine
    limits, matched on the mean, median and p99 of its measured TTFT and TPOT (ms).

    Raise CalibrationError naming the file if no request has a finite TTFT.
    """
    document = replay_document(run, gpu, model, tp, (0.0, 0.0))
    for key in ("step_overhead_s", "per_sequence_overhead_s"):
        del document["engine"][key]
    measured: dict[str, float] = {}
    for metric, values in (("ttft", run.ttft_s), ("tpot", run.tpot_s)):
        finite = values[np.isfinite(values)] * 1e3
        if finite.size:
            measured[f"{metric}_mean"] = float(finite.mean())
            measured[f"{metric}_p50"] = float(np.percentile(finite, 50))
            measured[f"{metric}_p99"] = float(np.percentile(finite, 99))
    if not measured:
        raise CalibrationError(f"{run.path}: expected a finite TTFT for some request; none")
    notes = (f"replayed with its own arrivals and lengths ({run.num_requests} requests)",)
    return Experiment(label, document, measured, notes, trace=run.trace)
