"""Fit an engine's host costs (per layer and per sequence) to serving under load.

A batch-1 point alone cannot tell a fixed cost per step from one per layer or per sequence: they
are one number at batch 1 on one model. Serving runs of a deeper model across tensor-parallel
degrees and concurrencies separate them: the per-layer term does not shrink with TP, the
per-sequence term grows with the batch. The fit simulates every row through :mod:`sim.run` exactly
as ``specsim validate`` runs its point of ``sim/data/validation_points.csv`` (the same scenario: a
closed loop at the row's concurrency and lengths, the source harness's warm-up requests run first
and left out, then its measured requests; ``warmup_requests`` and ``num_requests``), so a fitted
row's in-sample error is the one the validation prints, and chooses the free terms by robust
least squares on the log-ratio of simulated to measured mean TPOT (scipy ``least_squares``,
soft-L1, scale 0.05). At every trial the per-step overhead is recalibrated so that the preset's
batch-1 point stays exact (``calibration/engine_overhead.py``). The 95 % intervals come from a
bootstrap over rows (refitting each time, ``--bootstrap N``); with ``--bootstrap 0`` from the
fit's own curvature instead (Gauss-Newton: ``cov = s²·(JᵀJ)⁻¹`` at the solution, ``s²`` the
residual variance; ±1.96 standard errors), which costs no further simulation.

Fit rows for ``vllm-v1``: vLLM 0.12.0 on H100 SXM, Qwen3-32B bf16, TP 2/4/8, 1,024-token prompts,
512- and 1,024-token outputs, concurrency 8-128; for ``sglang-0.5``: SGLang 0.5.1 on the same
model and GPU, 256- and 512-token outputs, concurrency 16-128 (ai-dynamo/aiconfigurator commit
095f58a51c, ``aic-core/src/aiconfigurator_core/systems/silicon_sample.csv``, Apache-2.0). Every
other under-load row is out of sample (``specsim validate``). Presets without such rows carry
their terms from a fitted preset, and say so.

Run ``python -m calibration.host_cost_fit --shared PATH --preset NAME [--write]``; then
``python -m calibration.engine_overhead --write`` stores the per-step overheads.
"""

from __future__ import annotations

import argparse
import csv
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from scipy.optimize import least_squares

from calibration.engine_overhead import modeled_step_without_overhead_s
from sim.engine.presets import get_preset
from sim.errors import CalibrationError
from sim.host_costs import load_host_profile
from sim.run import run_scenario
from sim.scenario import Scenario
from sim.validation.points import ValidationPoint, load_points
from sim.validation.scenarios import scenario_document

SILICON = "under-load/aiconfigurator/silicon/silicon_sample.csv"
SILICON_SOURCE = (
    "ai-dynamo/aiconfigurator 095f58a51c aic-core/src/aiconfigurator_core/systems/"
    "silicon_sample.csv (Apache-2.0)"
)
PARAMETERS = ("per_layer_overhead_s", "per_sequence_overhead_s")
#: Starting point and bounds, in milliseconds.
X0_MS, LOWER_MS, UPPER_MS = (0.02, 0.02), (0.0, 0.0), (0.2, 0.5)
#: Resamples of the row bootstrap (each a whole refit: minutes); 0 takes the curvature interval.
NUM_BOOTSTRAP, BOOTSTRAP_SEED = 0, 20262
HOST_FILE = Path(__file__).resolve().parents[1] / "sim" / "data" / "host_costs.yaml"
HEADER = """\
# Host-side step costs per engine preset (sim/host_costs.py): CPU work per step, layer, sequence
# and token; CUDA-graph capture; eager launch cost; overlap of CPU work with the forward; and what
# each engine changes when a speculative method drafts. The `fit` entries are written by
# calibration/host_cost_fit.py (rerun it after changing the cost model; tests check the fitted
# points still agree).
"""


@dataclass(frozen=True)
class Row:
    """One measured serving point: model, GPU, TP, closed-loop concurrency, lengths, mean TPOT,
    and the validation point that runs it (its harness's warm-up and measured requests)."""

    model: str
    gpu: str
    tp: int
    concurrency: int
    input_tokens: int
    output_tokens: int
    tpot_ms: float
    source: str
    point: ValidationPoint


@dataclass(frozen=True)
class FitSet:
    """What one preset's host costs are fitted on.

    ``silicon``: (backend, version, output lengths) of the silicon rows, or None; ``free``: the
    parameters fitted; ``carried``: the others, each read from another preset's entry (the reason
    is in ``note``).
    """

    silicon: tuple[str, str, tuple[str, ...]] | None
    free: tuple[str, ...]
    carried: dict[str, str]
    note: str


FIT_SETS = {
    "vllm-v1": FitSet(
        ("vllm", "0.12.0", ("512", "1024")),
        PARAMETERS,
        {},
        "both terms fitted: vLLM V1 runs its CPU work in line with the forward, so the batch "
        "dependence shows in TPOT",
    ),
    "vllm-v1-async": FitSet(
        None,
        (),
        {"per_layer_overhead_s": "vllm-v1", "per_sequence_overhead_s": "vllm-v1"},
        "not fitted: the serving rows of vLLM 0.14 and later (the sim-to-real study's 0.15.1 runs, "
        "vLLM 0.18.0's gpt-oss runs, the January 2026 concurrency sweep) are kept out of sample to "
        "check what is carried; both terms of the synchronous vLLM V1 fit are carried over (the "
        "same GPU kernels per layer, the same CPU work per sequence, which async scheduling now "
        "overlaps with the forward)",
    ),
    "sglang-0.5": FitSet(
        ("sglang", "0.5.1.post1", ("256", "512")),
        ("per_layer_overhead_s",),
        {"per_sequence_overhead_s": "vllm-v1"},
        "SGLang's overlap scheduler hides its per-sequence CPU work behind the forward in these "
        "non-speculative runs, so that term is not identified here; vLLM V1's fitted value is "
        "carried over (it shows only where overlap is off, e.g. for EAGLE)",
    ),
    "sglang-0.4": FitSet(
        None,
        (),
        {"per_sequence_overhead_s": "vllm-v1"},
        "no SGLang 0.4 serving rows under load: the per-sequence term of vLLM V1 is carried over "
        "(it shows only where overlap is off, e.g. for EAGLE); SGLang 0.5's per-layer term is not "
        "(with it, SGLang 0.4.4's own batch-1 point could not be met), so the per-step overhead "
        "holds the whole fixed cost of that point",
    ),
    "vllm-v0": FitSet(
        None,
        (),
        {"per_layer_overhead_s": "vllm-v1"},
        "no vLLM 0.5/0.6 serving rows under load: the per-layer term of vLLM V1 is carried over; "
        "the per-sequence term is a V0-like engine's measured CPU cost (see sources)",
    ),
    "trtllm-1.0": FitSet(
        None,
        (),
        {"per_layer_overhead_s": "vllm-v1", "per_sequence_overhead_s": "vllm-v1"},
        "no TensorRT-LLM serving rows with a host-cost signal were fitted: both terms of the vLLM "
        "V1 fit are carried over (an assumption: the same kernels per layer, comparable CPU work "
        "per sequence, overlapped with the forward)",
    ),
}


def fit_points() -> dict[str, ValidationPoint]:
    """The TPOT points of the host-cost fit in ``sim/data/validation_points.csv``, by the silicon
    row id their source names."""
    out = {}
    for point in load_points():
        if point.fitted_by == "host_cost_fit" and point.quantity == "tpot_ms":
            out[point.source.rsplit("row id ", 1)[-1].strip()] = point
    return out


def silicon_rows(shared: Path, preset: str = "vllm-v1") -> list[Row]:
    """The fit rows of ``preset`` from the silicon sample (see the module docstring).

    Raise CalibrationError naming the row if a fit row has no validation point marked
    ``fitted_by: host_cost_fit`` (rebuild the points with tools/build_validation_points.py).
    """
    selection = FIT_SETS[preset].silicon
    if selection is None:
        return []
    backend, version, outputs = selection
    points = fit_points()
    rows: list[Row] = []
    with open(shared / "data" / SILICON, newline="", encoding="utf-8") as handle:
        for r in csv.DictReader(handle):
            if (
                r["system"] == "h100_sxm"
                and r["backend"] == backend
                and r["backend_version"] == version
                and r["model_path"] == "Qwen/Qwen3-32B"
                and r["precision"] == ""
                and r["mode"] == "agg"
                and r["isl"] == "1024"
                and r["osl"] in outputs
            ):
                if r["id"] not in points:
                    raise CalibrationError(
                        f"sim/data/validation_points.csv: no host_cost_fit TPOT point for silicon "
                        f"row {r['id']}; rebuild it with tools/build_validation_points.py"
                    )
                rows.append(
                    Row(
                        "qwen3-32b",
                        "h100-sxm",
                        int(float(r["tp_size"])),
                        int(float(r["batch_size"])),
                        int(r["isl"]),
                        int(r["osl"]),
                        float(r["silicon_tpot_ms"]),
                        f"{SILICON_SOURCE}, id {r['id']}",
                        points[r["id"]],
                    )
                )
    return sorted(rows, key=lambda x: (x.tp, x.output_tokens, x.concurrency))


def step_overhead_for(preset: str, values_s: dict[str, float]) -> float:
    """The per-step overhead that keeps ``preset``'s batch-1 point exact with these host terms."""
    engine = get_preset(preset)
    costs = load_host_profile(preset).costs
    costs = replace(
        costs,
        per_layer_overhead_s=values_s.get("per_layer_overhead_s", costs.per_layer_overhead_s),
        per_sequence_overhead_s=values_s.get(
            "per_sequence_overhead_s", costs.per_sequence_overhead_s
        ),
    )
    measured = float(engine.calibration["measured_tpot_s"])
    return measured - modeled_step_without_overhead_s(engine, host=costs)


def row_scenario(row: Row, preset: str, values_s: dict[str, float]) -> Scenario:
    """``row``'s validation scenario (warm-up and measured requests as its source's harness ran
    them) on ``preset`` with the host values ``values_s`` set on the engine."""
    document = scenario_document(row.point)
    engine: dict[str, Any] = {**document["engine"], "preset": preset, **values_s}
    engine["step_overhead_s"] = max(step_overhead_for(preset, values_s), 0.0)
    document["engine"] = engine
    document["name"] = f"host-fit-{row.point.point_id}"
    return Scenario.model_validate(document)


def simulate_tpot_ms(rows: list[Row], preset: str, values_s: dict[str, float]) -> np.ndarray:
    """Mean TPOT (ms) the simulator predicts for every row with these host values."""
    out = []
    for row in rows:
        summary = run_scenario(row_scenario(row, preset, values_s), Path.cwd()).summary
        out.append(summary.tpot_ms.mean)
    return np.asarray(out, dtype=np.float64)


def carried_values(preset: str) -> dict[str, float]:
    """The carried parameters of ``preset``, read from the presets they come from."""
    document = yaml.safe_load(HOST_FILE.read_text(encoding="utf-8"))["presets"]
    return {
        name: float(document[source][name]) for name, source in FIT_SETS[preset].carried.items()
    }


#: Weight of the batch-1 point against one row under load. The per-step overhead keeps that
#: point exact while it can; where the terms under load alone exceed it (the overhead would be
#: negative) the point pulls the fit back.
ANCHOR_WEIGHT = 4.0


def anchor_excess(preset: str, values_s: dict[str, float]) -> float:
    """The log-ratio by which ``preset``'s batch-1 point is missed with these host terms (0 while
    a non-negative per-step overhead can absorb the difference)."""
    engine = get_preset(preset)
    measured = float(engine.calibration["measured_tpot_s"])
    return float(np.log(max(measured - step_overhead_for(preset, values_s), measured) / measured))


def fit(rows: list[Row], preset: str, x0_ms: np.ndarray | None = None) -> np.ndarray:
    """The free parameters (ms) minimising the soft-L1 log-ratio residuals over ``rows`` and the
    batch-1 point (:func:`anchor_excess`, weighted :data:`ANCHOR_WEIGHT`)."""
    return np.asarray(fit_result(rows, preset, x0_ms).x)


def fit_result(rows: list[Row], preset: str, x0_ms: np.ndarray | None = None) -> Any:
    """:func:`fit`'s whole ``scipy.optimize.least_squares`` result (its Jacobian included)."""
    spec = FIT_SETS[preset]
    index = [PARAMETERS.index(name) for name in spec.free]
    measured = np.array([r.tpot_ms for r in rows])
    start = np.asarray(X0_MS)[index] if x0_ms is None else x0_ms

    def residuals(x_ms: np.ndarray) -> np.ndarray:
        values = all_values(preset, x_ms)
        predicted = simulate_tpot_ms(rows, preset, values)
        anchor = ANCHOR_WEIGHT * anchor_excess(preset, values)
        return np.append(np.log(predicted / measured), anchor)

    result = least_squares(
        residuals,
        start,
        bounds=(np.asarray(LOWER_MS)[index], np.asarray(UPPER_MS)[index]),
        loss="soft_l1",
        f_scale=0.05,
        diff_step=0.05,
        max_nfev=40,
    )
    return result


def curvature_ci_ms(result: Any) -> tuple[np.ndarray, np.ndarray]:
    """95 % intervals (ms) from the fit's curvature: ``x ± 1.96·sqrt(diag(s²·(JᵀJ)⁻¹))`` with
    ``s² = 2·cost / (m − n)`` (``least_squares``'s Jacobian is the loss-weighted Gauss-Newton
    one). Raise ValueError if there are no more residuals than parameters."""
    jac = np.asarray(result.jac, dtype=np.float64)
    m, n = jac.shape
    if m <= n:
        raise ValueError(f"{m} residuals cannot bound {n} parameters")
    variance = 2.0 * float(result.cost) / (m - n)
    covariance = variance * np.linalg.pinv(jac.T @ jac)
    half = 1.96 * np.sqrt(np.maximum(np.diag(covariance), 0.0))
    x = np.asarray(result.x, dtype=np.float64)
    return x - half, x + half


def all_values(preset: str, x_ms: np.ndarray) -> dict[str, float]:
    """Free parameters ``x_ms`` (ms) and the carried ones, in seconds."""
    out = carried_values(preset)
    out.update({name: float(v) * 1e-3 for name, v in zip(FIT_SETS[preset].free, x_ms, strict=True)})
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--shared", type=Path, required=True, help="the data folder's parent")
    parser.add_argument("--preset", default="vllm-v1", choices=sorted(FIT_SETS))
    parser.add_argument("--write", action="store_true", help="write the values into the file")
    parser.add_argument("--bootstrap", type=int, default=NUM_BOOTSTRAP)
    args = parser.parse_args(argv)
    spec = FIT_SETS[args.preset]
    rows = silicon_rows(args.shared, args.preset)
    result = fit_result(rows, args.preset) if spec.free else None
    x = np.asarray(result.x) if result is not None else np.zeros(0)
    values = all_values(args.preset, x)
    predicted = simulate_tpot_ms(rows, args.preset, values)
    print(f"host costs of {args.preset} ({spec.note}):")
    for row, p in zip(rows, predicted, strict=True):
        err = (p - row.tpot_ms) / row.tpot_ms
        print(
            f"  {row.model} TP{row.tp} c={row.concurrency} out={row.output_tokens}: "
            f"measured {row.tpot_ms:.2f} ms, predicted {p:.2f} ms ({err:+.1%})"
        )
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    samples = []
    for _ in range(args.bootstrap if spec.free else 0):
        pick = rng.integers(0, len(rows), len(rows))
        samples.append(fit([rows[i] for i in pick], args.preset, x))
    if samples:
        low, high = np.percentile(np.array(samples), [2.5, 97.5], axis=0)
        interval = f"bootstrap over rows, {len(samples)} resamples"
    elif result is not None:
        low, high = curvature_ci_ms(result)
        interval = "curvature of the fit (Gauss-Newton, +-1.96 standard errors)"
    else:
        low, high = x.copy(), x.copy()
        interval = "none (nothing fitted)"
    low = np.maximum(
        np.minimum(low, x), np.asarray(LOWER_MS)[[PARAMETERS.index(n) for n in spec.free]]
    )
    high = np.maximum(high, x)
    on_bound = []
    for i, name in enumerate(spec.free):
        j = PARAMETERS.index(name)
        bound = x[i] <= LOWER_MS[j] + 1e-9 or x[i] >= UPPER_MS[j] - 1e-9
        on_bound += [name] if bound else []
        flag = " (on a bound)" if bound else ""
        print(f"  {name}: {x[i]:.4f} ms, 95% CI [{low[i]:.4f}, {high[i]:.4f}]{flag}")
    for name, source in spec.carried.items():
        print(f"  {name}: {values[name] * 1e3:.4f} ms, carried from {source}")
    step_ms = step_overhead_for(args.preset, values) * 1e3
    miss = np.expm1(anchor_excess(args.preset, values))
    print(f"  step_overhead_s: {max(step_ms, 0.0):.4f} ms; batch-1 point missed by {miss:+.1%}")
    if args.write:
        document = yaml.safe_load(HOST_FILE.read_text(encoding="utf-8"))
        entry = document["presets"][args.preset]
        fitted: dict[str, Any] = {}
        for i, name in enumerate(spec.free):
            entry[name] = round(float(x[i]) * 1e-3, 8)
            fitted[name] = {
                "ci95_s": [round(float(low[i]) * 1e-3, 8), round(float(high[i]) * 1e-3, 8)]
            }
        for name in spec.carried:
            entry[name] = values[name]
        entry["fit"] = {
            "free": fitted,
            "carried": {name: f"from {source}" for name, source in spec.carried.items()},
            "on_bound": on_bound,
            "note": spec.note,
            "rows": len(rows),
            "mean_abs_error": round(
                float(np.mean(np.abs(predicted / [r.tpot_ms for r in rows] - 1))), 4
            )
            if rows
            else None,
            "sources": [SILICON_SOURCE] if spec.silicon else [],
            "method": "calibration/host_cost_fit.py: soft-L1 least squares on log TPOT ratios "
            "of the rows' validation runs (harness warm-up left out), the batch-1 point kept "
            f"exact; 95% intervals: {interval}",
        }
        HOST_FILE.write_text(
            HEADER + yaml.safe_dump(document, sort_keys=False, width=100), encoding="utf-8"
        )


if __name__ == "__main__":
    main()
