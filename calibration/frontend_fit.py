"""Fit each engine preset's serving front end from measured TTFT at low load.

The front end (``sim/engine/frontend.py``) is what a real server spends outside the engine's step
loop. It is fitted by simulation: every row below is a published serving run (model, GPU, tensor
parallelism, request rate, prompt and output lengths, measured mean TTFT). The simulator replays
each fit row with the front end switched off; what the measurement has left over is the front
end's share, fitted as

    TTFT_measured − TTFT_engine = a + b · prompt_tokens        (least squares, 95% t-intervals)

``a`` is the fixed time both ways and ``b`` the per-prompt-token ingress cost (tokenisation). TTFT
cannot tell ingress from egress (both shift the first token and the last one alike); they differ
only when the front end saturates, since only ingress queues. The split is an assumption, stated:
``a`` is shared equally (``ingress_fixed_s = egress_per_chunk_s = a / 2``), each direction
crossing the same process hop (HTTP/API server ↔ engine core over ZMQ in vLLM V1). Check rows are
never fitted on; they are replayed with the fitted front end and reported apart.

The engine's own TTFT comes from ``sim/cost_model.py``: rerun this script after changing it.
``python -m calibration.frontend_fit`` prints every row; ``--write`` updates the ``frontend``
values in ``sim/data/engine_presets.yaml`` (a test checks they are current).
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from calibration.frontend_rows import ROWS, TtftRow
from sim.engine.presets import get_preset, preset_names, reload_presets
from sim.run import run_scenario
from sim.scenario import Scenario, validate_document
from sim.validation.scenarios import pool_prefix, pool_warmup

#: Presets fitted on their own rows.
FITTED = ("vllm-v1-async",)
#: Presets that carry another preset's fitted front end, and why (also written in the preset file).
CARRIED = {
    "vllm-v1": "vllm-v1-async",
    "vllm-v0": "vllm-v1-async",
    "sglang-0.4": "vllm-v1-async",
    "sglang-0.5": "vllm-v1-async",
    "trtllm-1.0": "vllm-v1-async",
    "llamacpp": "vllm-v1-async",
}
#: Requests per replayed row; the first WARMUP are not measured (the run starts empty).
NUM_REQUESTS = 300
WARMUP = 30


@dataclass(frozen=True)
class FrontendFit:
    """A fitted front end with its 95% intervals and the rows it was fitted on."""

    preset: str
    fixed_s: float
    fixed_ci_s: tuple[float, float]
    per_token_s: float
    per_token_ci_s: tuple[float, float]
    row_ids: tuple[str, ...]
    per_token_on_bound: bool = False
    per_token_free: tuple[float, tuple[float, float]] = (0.0, (0.0, 0.0))
    #: The unconstrained fixed part when it came out negative (the fit then ends on a = 0).
    fixed_free_s: float | None = None

    def values(self) -> dict[str, float]:
        """The preset-file values: ``a`` split equally between ingress and egress."""
        return {
            "ingress_fixed_s": rounded(self.fixed_s / 2),
            "ingress_per_prompt_token_s": rounded(max(self.per_token_s, 0.0), 10),
            "egress_per_chunk_s": rounded(self.fixed_s / 2),
        }


def rounded(value_s: float, digits: int = 7) -> float:
    """Front-end times are shipped to 0.1 microsecond (per-token costs to 0.1 ns)."""
    return round(float(value_s), digits)


def scenario_for(row: TtftRow, frontend: dict[str, Any]) -> Scenario:
    """The serving run of ``row`` as a scenario, with ``frontend`` under ``engine.frontend``; a run
    from a pool of prompts is measured past the pool's first pass, as ``specsim validate`` does."""
    pool = pool_warmup(row.prompt_pool)
    document: dict[str, Any] = {
        "name": f"ttft-{row.row_id}",
        "seed": 0,
        "hardware": {"gpu": row.gpu, "num_gpus": row.num_gpus},
        "model": row.model,
        "engine": {
            "preset": row.preset,
            "max_num_seqs": row.max_num_seqs,
            "max_num_batched_tokens": row.max_num_batched_tokens,
            "frontend": frontend,
        },
        "workload": {
            "num_requests": NUM_REQUESTS + pool,
            "arrival": (
                {"process": "closed_loop", "concurrency": row.concurrency}
                if row.concurrency
                # Near-constant gaps: the harness sends at a constant rate (gamma, cv 0.05).
                else {"process": "gamma", "rate_per_s": row.rate_per_s, "cv": 0.05}
            ),
            "prompt_tokens": {"distribution": "fixed", "value": row.prompt_tokens},
            "output_tokens": {"distribution": "fixed", "value": row.output_tokens},
        },
        "measurement": {"warmup_requests": WARMUP + pool},
    }
    if row.prompt_pool:
        document["workload"]["prefix"] = pool_prefix(row.prompt_pool, row.prompt_tokens)
        document["workload"]["prompt_tokens"] = {"distribution": "fixed", "value": 1}
    return validate_document(document, f"calibration row {row.row_id}")


def simulated_ttft_s(row: TtftRow, frontend: dict[str, Any]) -> float:
    """Mean TTFT the simulator predicts for ``row`` with the given front-end keys."""
    summary = run_scenario(scenario_for(row, frontend), Path.cwd()).summary
    return summary.ttft_ms.figure("mean") / 1e3


def engine_ttft_s(row: TtftRow) -> float:
    """The engine's own mean TTFT for ``row`` (front end off)."""
    return simulated_ttft_s(row, {"enabled": False})


def fit_preset(preset: str) -> FrontendFit:
    """Least-squares fit of ``a + b · prompt_tokens`` to the residual TTFT of ``preset``'s fit rows.

    Raise ValueError if fewer than three fit rows exist (no interval could be given).
    """
    rows = [r for r in ROWS if r.preset == preset and r.role == "fit"]
    if len(rows) < 3:
        raise ValueError(f"{preset}: {len(rows)} fit rows; need at least 3")
    prompt = np.array([r.prompt_tokens for r in rows], dtype=np.float64)
    residual = np.array([r.measured_ttft_s - engine_ttft_s(r) for r in rows])
    design = np.column_stack((np.ones_like(prompt), prompt))
    coef, half = _least_squares(design, residual)
    free = (float(coef[1]), (float(coef[1] - half[1]), float(coef[1] + half[1])))
    on_bound = coef[1] < 0
    if on_bound:
        # Tokenisation cannot take negative time: the fit ends on the bound b = 0, and a is
        # refitted alone (the mean residual, n − 1 degrees of freedom).
        coef1, half1 = _least_squares(design[:, :1], residual)
        coef, half = np.array([coef1[0], 0.0]), np.array([half1[0], 0.0])
    fixed_free_s = None
    if coef[0] < 0:
        # A front end cannot take negative time: the engine alone already accounts for the
        # measured TTFT (or more); the fit ends on the bound a = 0 and says so.
        fixed_free_s = float(coef[0])
        coef = np.array([0.0, coef[1]])
        half = np.array([max(half[0] + fixed_free_s, 0.0), half[1]])
    return FrontendFit(
        preset=preset,
        fixed_free_s=fixed_free_s,
        fixed_s=float(coef[0]),
        fixed_ci_s=(max(float(coef[0] - half[0]), 0.0), float(coef[0] + half[0])),
        per_token_s=float(coef[1]),
        per_token_ci_s=(float(coef[1] - half[1]), float(coef[1] + half[1])),
        row_ids=tuple(r.row_id for r in rows),
        per_token_on_bound=bool(on_bound),
        per_token_free=free,
    )


def _least_squares(design: np.ndarray, observed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients and the half-widths of their 95% t-intervals."""
    coef, *_ = np.linalg.lstsq(design, observed, rcond=None)
    dof = len(observed) - design.shape[1]
    sigma2 = float(((observed - design @ coef) ** 2).sum() / dof)
    cov = sigma2 * np.linalg.inv(design.T @ design)
    return coef, stats.t.ppf(0.975, dof) * np.sqrt(np.diag(cov))


def shipped_frontend(preset: str) -> dict[str, float]:
    """The front-end values the preset file ships for ``preset``."""
    frontend = get_preset(preset).frontend
    return {
        "ingress_fixed_s": frontend.ingress_fixed_s,
        "ingress_per_prompt_token_s": frontend.ingress_per_prompt_token_s,
        "egress_per_chunk_s": frontend.egress_per_chunk_s,
    }


def row_table(rows: list[TtftRow]) -> list[str]:
    """One line per row: measured, engine-only and with the shipped front end, and the error."""
    lines = []
    for row in rows:
        engine = engine_ttft_s(row)
        full = simulated_ttft_s(row, {})
        error = (full - row.measured_ttft_s) / row.measured_ttft_s
        lines.append(
            f"| {row.row_id} | {row.role} | {row.preset} | {row.model} TP{row.num_gpus} | "
            f"{f'{row.concurrency} clients' if row.concurrency else f'{row.rate_per_s:g}'} | "
            f"{row.prompt_tokens} | {row.measured_ttft_s * 1e3:.1f} | "
            f"{engine * 1e3:.1f} | {full * 1e3:.1f} | {error * 100:+.1f}% |"
        )
    return lines


def report(fits: list[FrontendFit]) -> str:
    """The fits, then every row (fit rows first, then out-of-sample rows)."""
    out = []
    for fit in fits:
        lo, hi = fit.fixed_ci_s
        blo, bhi = fit.per_token_ci_s
        out.append(
            f"{fit.preset}: a = {fit.fixed_s * 1e3:.2f} ms [{lo * 1e3:.2f}, {hi * 1e3:.2f}], "
            f"b = {fit.per_token_s * 1e6:.2f} us/token [{blo * 1e6:.2f}, {bhi * 1e6:.2f}] "
            f"from {len(fit.row_ids)} rows -> {fit.values()}"
        )
        if fit.fixed_free_s is not None:
            out.append(
                f"  the fit ends on the bound a = 0: unconstrained a = "
                f"{fit.fixed_free_s * 1e3:.2f} ms (the engine alone reaches the measured TTFT)"
            )
        if fit.per_token_on_bound:
            free, (flo, fhi) = fit.per_token_free
            out.append(
                f"  the fit ends on the bound b = 0: unconstrained b = {free * 1e6:.2f} us/token "
                f"[{flo * 1e6:.2f}, {fhi * 1e6:.2f}] (prompts of the fit rows span too little to "
                "identify tokenisation cost)"
            )
    header = (
        "| row | role | preset | model | rate (req/s) or clients | prompt | measured TTFT (ms) | "
        "engine only (ms) | with front end (ms) | error |"
    )
    out += ["", header, "|" + "---|" * 10]
    out += row_table([r for r in ROWS if r.role == "fit"])
    out += row_table([r for r in ROWS if r.role == "check"])
    return "\n".join(out)


def write_presets(path: Path, values: dict[str, dict[str, float]]) -> None:
    """Rewrite the front-end numbers of each preset in ``path``."""
    text = path.read_text(encoding="utf-8")
    for name, numbers in values.items():
        for key, value in numbers.items():
            pattern = re.compile(
                rf"(^  {re.escape(name)}:\n(?:    .*\n)*?    frontend:\n(?:      .*\n)*?"
                rf"      {key}: )[^\n]*",
                re.M,
            )
            text, count = pattern.subn(rf"\g<1>{value}", text)
            if count != 1:
                raise ValueError(f"{path}: no frontend.{key} line under preset {name}")
    path.write_text(text, encoding="utf-8")


def fitted_values() -> dict[str, dict[str, float]]:
    """Every preset's front-end values: fitted, or carried over as :data:`CARRIED` says."""
    fits = {name: fit_preset(name).values() for name in FITTED}
    return {name: fits[name] if name in fits else fits[CARRIED[name]] for name in preset_names()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="update sim/data/engine_presets.yaml")
    args = parser.parse_args(argv)
    fits = [fit_preset(name) for name in FITTED]
    if args.write:
        values = {f.preset: f.values() for f in fits}
        values.update({name: values[source] for name, source in CARRIED.items()})
        path = Path(str(resources.files("sim").joinpath("data/engine_presets.yaml")))
        write_presets(path, values)
        reload_presets()
        print(f"updated {os.path.relpath(path)}")
    print(report(fits))


if __name__ == "__main__":
    main()
