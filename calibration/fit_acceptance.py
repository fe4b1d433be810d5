"""Fit acceptance models to what a run recorded: per-request traces or spec-decode counters.

From **traces** (a long proposal's ``acc_len`` per output position) each chain length k = 1..K is
replayed exactly as the dataset statistic defines it (a step at ``pos`` emits
``min(acc_len[pos], k + 1)``; :func:`sim.artifacts.emitted_tokens_per_step`), giving the
token-weighted mean acceptance length ``τ_k`` (tokens over steps, pooled over requests). An
independent-step model with cumulative rates ``c_j = P(at least j drafts accepted)`` has
``τ_k = 1 + Σ_{j≤k} c_j``, so ``c_k = τ_k − τ_{k−1}`` (``sim.acceptance.conversions``); the
increments are made non-increasing by pool-adjacent-violators (a model cannot reach position j+1
more often than j) and turned into conditional rates ``a_j = c_j / c_{j−1}``. Requests are
resampled for a bootstrap interval of every rate. The per-request dispersion is reported as the
spread of each request's own τ at :data:`DISPERSION_K` and a beta law of its draft acceptance rate
``(τ_i − 1)/k`` by the method of moments.

From **counters** (vLLM ``spec_decode_num_accepted_tokens_per_pos`` over ``num_drafts``, i.e.
cumulative rates) the same conversion applies; the interval is a binomial bootstrap on the counts.
An artifact that gives only a mean acceptance length gets that τ, with an interval from the spread
of its logging intervals when it has several.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim.acceptance.conversions import cumulative_to_conditional
from sim.artifacts import emitted_tokens_per_step
from sim.artifacts.schema import AcceptanceTraces, ParsedArtifact
from sim.errors import CalibrationError

MAX_K = 7
DISPERSION_K = 3
NUM_BOOTSTRAP, BOOTSTRAP_SEED = 200, 20262
#: Trace method names as scenario methods (the traced EAGLE head is an EAGLE-3 head).
TRACE_METHOD_NAMES = {"eagle": "eagle3", "ngram": "ngram"}


@dataclass(frozen=True)
class AcceptanceFit:
    """One fitted acceptance law with its intervals and residuals; absent parts are None."""

    method: str
    conditional_rates: tuple[float, ...] | None
    conditional_rates_ci95: tuple[tuple[float, float], ...] | None
    mean_acceptance_length: float | None
    mean_acceptance_length_ci95: tuple[float, float] | None
    num_speculative_tokens: int | None
    fit_method: str
    measured_tau: dict[int, float] = field(default_factory=dict)
    residuals: dict[str, float] = field(default_factory=dict)
    dispersion: dict[str, float] | None = None

    def as_document(self) -> dict[str, Any]:
        """The profile YAML entry (plain lists and floats)."""
        document: dict[str, Any] = {
            "conditional_rates": _rounded(self.conditional_rates),
            "conditional_rates_ci95": (
                [_rounded(pair) for pair in self.conditional_rates_ci95]
                if self.conditional_rates_ci95
                else None
            ),
            "mean_acceptance_length": _round(self.mean_acceptance_length),
            "mean_acceptance_length_ci95": _rounded(self.mean_acceptance_length_ci95),
            "num_speculative_tokens": self.num_speculative_tokens,
            "fit": self.fit_method,
            "measured_tau": {int(k): _round(v) for k, v in self.measured_tau.items()},
            "residuals": {k: _round(v) for k, v in self.residuals.items()},
        }
        if self.dispersion is not None:
            document["dispersion"] = {k: _round(v) for k, v in self.dispersion.items()}
        return document


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)


def _rounded(values: Any) -> list[float | None] | None:
    return None if values is None else [_round(v) for v in values]


def non_increasing(values: np.ndarray) -> np.ndarray:
    """The least-squares non-increasing fit of ``values`` (pool-adjacent-violators), in [0, 1]."""
    blocks: list[list[float]] = []  # [sum, count]
    for value in np.asarray(values, dtype=np.float64):
        blocks.append([float(value), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] < blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    out = np.concatenate([np.full(int(c), s / c) for s, c in blocks])
    return np.clip(out, 0.0, 1.0)


def conditional_from_taus(taus: np.ndarray) -> np.ndarray:
    """Conditional rates ``a_1..a_K`` from ``τ_1..τ_K`` (``τ_0 = 1``) as the module describes."""
    increments = np.diff(np.concatenate([[1.0], np.asarray(taus, dtype=np.float64)]))
    return cumulative_to_conditional(non_increasing(increments))


def tau_from_conditional_rates(rates: np.ndarray, k: int) -> float:
    """``τ_k = 1 + Σ_{j≤k} Π_{i≤j} a_i`` (positions past the list reuse its last rate)."""
    extended = np.concatenate([rates, np.full(max(0, k - len(rates)), rates[-1])])[:k]
    return float(1.0 + np.cumprod(extended).sum())


def _step_counts(traces: AcceptanceTraces, method: str, max_k: int) -> np.ndarray:
    """Per request and k: (tokens emitted, verify steps), shape (requests, max_k, 2)."""
    per_request = traces.acc_len[method]
    counts = np.zeros((len(per_request), max_k, 2), dtype=np.float64)
    for i, acc_len in enumerate(per_request):
        for k in range(1, max_k + 1):
            steps = emitted_tokens_per_step(acc_len, k)
            counts[i, k - 1] = (steps.sum(), steps.size)
    return counts


def fit_traces(
    traces: AcceptanceTraces, method: str, max_k: int = MAX_K, num_bootstrap: int = NUM_BOOTSTRAP
) -> AcceptanceFit:
    """Fit conditional rates for ``method`` (``"eagle"`` or ``"ngram"``) from per-request traces.

    Raise CalibrationError if the method is not traced or no request has an output position.
    """
    if method not in traces.acc_len:
        raise CalibrationError(f"no traces for method {method!r}; traced: {list(traces.methods)}")
    counts = _step_counts(traces, method, max_k)
    counts = counts[counts[:, 0, 1] > 0]
    if counts.size == 0:
        raise CalibrationError(f"traces of {method!r} hold no output position to fit")
    pooled = counts.sum(axis=0)
    taus = pooled[:, 0] / pooled[:, 1]
    rates = conditional_from_taus(taus)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    draws = []
    for _ in range(num_bootstrap):
        sample = counts[rng.integers(0, len(counts), len(counts))].sum(axis=0)
        draws.append(conditional_from_taus(sample[:, 0] / sample[:, 1]))
    low, high = np.percentile(np.array(draws), [2.5, 97.5], axis=0)
    predicted = {k: tau_from_conditional_rates(rates, k) for k in range(1, max_k + 1)}
    per_request_tau = counts[:, DISPERSION_K - 1, 0] / counts[:, DISPERSION_K - 1, 1]
    return AcceptanceFit(
        method=TRACE_METHOD_NAMES.get(method, method),
        conditional_rates=tuple(float(r) for r in rates),
        conditional_rates_ci95=tuple((float(a), float(b)) for a, b in zip(low, high, strict=True)),
        mean_acceptance_length=float(taus[DISPERSION_K - 1]),
        mean_acceptance_length_ci95=_tau_interval(counts, DISPERSION_K, rng, num_bootstrap),
        num_speculative_tokens=DISPERSION_K,
        fit_method=(
            f"token-weighted tau_k of the trace replayed at k = 1..{max_k}; cumulative rates "
            "c_k = tau_k - tau_(k-1) made non-increasing (pool-adjacent-violators), conditional "
            f"a_k = c_k / c_(k-1); 95% interval by a {num_bootstrap}-resample bootstrap over "
            f"{len(counts)} requests"
        ),
        measured_tau={k: float(taus[k - 1]) for k in range(1, max_k + 1)},
        residuals={f"tau_k{k}_rel_error": predicted[k] / taus[k - 1] - 1.0 for k in predicted},
        dispersion=_dispersion(per_request_tau, DISPERSION_K),
    )


def _tau_interval(
    counts: np.ndarray, k: int, rng: np.random.Generator, num_bootstrap: int
) -> tuple[float, float]:
    sums = [
        counts[rng.integers(0, len(counts), len(counts)), k - 1].sum(axis=0)
        for _ in range(num_bootstrap)
    ]
    values = np.array([s[0] / s[1] for s in sums])
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def _dispersion(per_request_tau: np.ndarray, k: int) -> dict[str, float]:
    # Beta(a, b) by moments on each request's draft acceptance rate r = (tau_i - 1)/k:
    # a + b = m(1 - m)/v - 1, a = m·(a + b) (valid while v < m(1 - m)).
    rate = np.clip((per_request_tau - 1.0) / k, 1e-6, 1 - 1e-6)
    mean, var = float(rate.mean()), float(rate.var(ddof=1)) if rate.size > 1 else 0.0
    spread = mean * (1 - mean) / var - 1.0 if var > 0 else float("inf")
    return {
        "k": float(k),
        "per_request_tau_mean": float(per_request_tau.mean()),
        "per_request_tau_std": float(per_request_tau.std(ddof=1)) if rate.size > 1 else 0.0,
        "per_request_rate_beta_a": mean * spread,
        "per_request_rate_beta_b": (1 - mean) * spread,
    }


def fit_counters(artifact: ParsedArtifact, num_bootstrap: int = NUM_BOOTSTRAP) -> AcceptanceFit:
    """Fit acceptance from an artifact's spec-decode counters or reported acceptance length.

    Raise CalibrationError naming the file if the artifact has no spec-decode data.
    """
    summary, path = artifact.spec_decode, artifact.metadata.source_path
    if summary is None:
        raise CalibrationError(f"{path}: no speculative-decoding counters to fit acceptance to")
    method = artifact.metadata.method or "any"
    k = artifact.metadata.num_speculative_tokens
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    if summary.per_position_acceptance_rate:
        cumulative = non_increasing(np.array(summary.per_position_acceptance_rate))
        rates = cumulative_to_conditional(cumulative)
        n = summary.num_drafts
        ci = None
        if n:
            draws = [
                cumulative_to_conditional(non_increasing(rng.binomial(n, cumulative) / n))
                for _ in range(num_bootstrap)
            ]
            low, high = np.percentile(np.array(draws), [2.5, 97.5], axis=0)
            ci = tuple((float(a), float(b)) for a, b in zip(low, high, strict=True))
        tau = float(1.0 + cumulative.sum())
        reported = summary.mean_acceptance_length
        return AcceptanceFit(
            method=method,
            conditional_rates=tuple(float(r) for r in rates),
            conditional_rates_ci95=ci,
            mean_acceptance_length=tau,
            mean_acceptance_length_ci95=None,
            num_speculative_tokens=k or len(rates),
            fit_method=(
                f"vLLM per-position (cumulative) rates over {n or 'an unknown number of'} drafts "
                "made non-increasing, a_k = c_k / c_(k-1); "
                + ("95% binomial bootstrap on the counts" if n else "no counts: no interval")
            ),
            residuals=(
                {"reported_tau_rel_error": tau / reported - 1.0} if reported is not None else {}
            ),
        )
    reported_tau: float | None = summary.mean_acceptance_length
    if reported_tau is None and summary.num_drafts and summary.num_accepted_tokens is not None:
        # vLLM >= 0.9.0 definition: 1 + accepted / drafts (bonus token included).
        reported_tau = 1.0 + summary.num_accepted_tokens / summary.num_drafts
    if reported_tau is None:
        raise CalibrationError(
            f"{path}: spec-decode data without per-position rates, acceptance length or "
            "accepted-token count"
        )
    return AcceptanceFit(
        method=method,
        conditional_rates=None,
        conditional_rates_ci95=None,
        mean_acceptance_length=float(reported_tau),
        mean_acceptance_length_ci95=_interval_tau_ci(artifact),
        num_speculative_tokens=k,
        fit_method=(
            f"mean acceptance length as reported ({summary.layout}); interval from the spread "
            "of the logging intervals when there are several"
        ),
    )


def _interval_tau_ci(artifact: ParsedArtifact) -> tuple[float, float] | None:
    if artifact.intervals is None:
        return None
    values = artifact.intervals.mean_acceptance_length
    values = values[np.isfinite(values)]
    if values.size < 3:
        return None
    from scipy import stats

    half = stats.t.ppf(0.975, values.size - 1) * values.std(ddof=1) / np.sqrt(values.size)
    return float(values.mean() - half), float(values.mean() + half)
