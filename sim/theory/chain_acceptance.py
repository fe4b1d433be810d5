"""Expected acceptance of chain speculative decoding: the closed form, its optimum, and simulation.

With a constant probability ``alpha`` that a draft token is accepted (given the ones before it
were) and ``k`` draft tokens per step, the number of tokens one target step emits, bonus token
included, is ``E = 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha)`` (Leviathan,
Kalman, Matias, ICML 2023, arXiv:2211.17192, Section 3). If one draft forward costs ``c`` target
forwards, a step costs ``k c + 1`` target forwards, so the time per token is ``(k c + 1) / E`` and
the speedup over plain decoding is ``E / (k c + 1)`` (same section, walltime improvement). The
Monte-Carlo estimates run the exact chain sampler of :mod:`sim.theory.chain_sampling` on a
draft/target pair built to have exactly that ``alpha``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sim.errors import ScenarioError
from sim.theory.chain_sampling import draft_chain_tokens, speculative_chain_step

MONTE_CARLO_CHUNK_STEPS = 4096


def _check_alpha_k(alpha: float, k: int) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ScenarioError(f"acceptance rate alpha must be in [0, 1], got {alpha}")
    if int(k) != k or k < 0:
        raise ScenarioError(f"number of draft tokens k must be an int >= 0, got {k}")


def _check_c(c: float) -> None:
    if not c >= 0.0:
        raise ScenarioError(f"draft cost ratio c must be >= 0, got {c}")


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """Mean tokens one verify step emits, bonus token included: ``(1 - alpha^(k+1)) / (1 - alpha)``.

    Computed as the partial geometric sum ``sum(alpha^i, i = 0..k)``, which equals the closed form
    and tends to ``k + 1`` as ``alpha -> 1`` without a special case; the sum is correctly rounded
    (``math.fsum``), so one more draft never yields a smaller value through rounding. Raise
    ScenarioError if ``alpha`` is outside [0, 1] or ``k`` is not a non-negative int.
    """
    _check_alpha_k(alpha, k)
    a = float(alpha)
    return math.fsum(a**i for i in range(int(k) + 1))


def time_per_token(alpha: float, k: int, c: float) -> float:
    """Time per emitted token in units of one target forward: ``(k c + 1) / E``.

    ``c`` is the time of one draft forward divided by that of one target forward. Raise
    ScenarioError if an argument is out of range.
    """
    _check_c(c)
    return (k * c + 1.0) / expected_tokens_per_step(alpha, k)


def speedup(alpha: float, k: int, c: float) -> float:
    """Speedup over plain decoding, ``E / (k c + 1)``, the inverse of :func:`time_per_token`.

    Raise ScenarioError if an argument is out of range.
    """
    return 1.0 / time_per_token(alpha, k, c)


def optimal_k(alpha: float, c: float, k_max: int = 64) -> int:
    """The number of draft tokens in ``0 .. k_max`` with the highest speedup (smallest on ties).

    ``0`` means speculation does not pay. Raise ScenarioError if ``k_max < 1`` or an argument is out
    of range.
    """
    if int(k_max) != k_max or k_max < 1:
        raise ScenarioError(f"k_max must be an int >= 1, got {k_max}")
    speedups = [speedup(alpha, k, c) for k in range(int(k_max) + 1)]
    return int(np.argmax(speedups))


def tokens_per_step_table(
    alphas: Sequence[float] = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95),
    ks: Sequence[int] = tuple(range(1, 11)),
) -> pd.DataFrame:
    """Expected tokens per verify step (bonus included), one row per ``alpha``, one column per k.

    Raise ScenarioError if an ``alpha`` or ``k`` is out of range.
    """
    values = [[expected_tokens_per_step(alpha, k) for k in ks] for alpha in alphas]
    table = pd.DataFrame(values, index=pd.Index(list(alphas), name="alpha"), columns=list(ks))
    table.columns.name = "k"
    return table


def tokens_per_step_figure(table: pd.DataFrame) -> Figure:
    """A figure of :func:`tokens_per_step_table`: tokens per step against k, one line per alpha.

    The dotted line for each alpha is the ``k -> infinity`` limit ``1 / (1 - alpha)``. The figure
    uses the Agg canvas and never opens a window. Raise ScenarioError if the table is empty.
    """
    if table.empty:
        raise ScenarioError("tokens_per_step_figure: the table is empty")
    figure = Figure(figsize=(6.4, 4.2), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    ks = np.asarray(table.columns, dtype=float)
    for alpha, row in table.iterrows():
        (line,) = axes.plot(ks, row.to_numpy(), marker="o", label=f"α = {alpha:g}")
        if float(str(alpha)) < 1.0:
            axes.axhline(1.0 / (1.0 - float(str(alpha))), color=line.get_color(), ls=":", lw=0.8)
    axes.set_xlabel("draft tokens per step, k")
    axes.set_ylabel("tokens per verify step (bonus included)")
    axes.set_title("E = (1 − α^(k+1)) / (1 − α)")
    axes.set_ylim(bottom=0.0, top=float(table.to_numpy().max()) * 1.15)
    axes.legend(loc="upper left", fontsize="small")
    axes.grid(alpha=0.3)
    return figure


def constant_acceptance_pair(alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """A (draft_prob, target_prob) pair over six tokens whose acceptance rate is exactly ``alpha``.

    Both put mass ``alpha`` on a shared part (tokens 0-1, same shape) and ``1 - alpha`` on parts the
    other never proposes (tokens 2-3 for the target, 4-5 for the draft), so
    ``sum(min(target_prob, draft_prob)) = alpha``: a draft token is accepted with probability alpha,
    independently at every position. Raise ScenarioError if ``alpha`` is outside [0, 1].
    """
    _check_alpha_k(alpha, 0)
    shared = np.array([0.6, 0.4, 0.0, 0.0, 0.0, 0.0])
    target_only = np.array([0.0, 0.0, 0.5, 0.5, 0.0, 0.0])
    draft_only = np.array([0.0, 0.0, 0.0, 0.0, 0.7, 0.3])
    draft_prob = alpha * shared + (1.0 - alpha) * draft_only
    target_prob = alpha * shared + (1.0 - alpha) * target_only
    return draft_prob, target_prob


def monte_carlo_accepted_counts(
    alpha: float, k: int, num_steps: int, rng: np.random.Generator
) -> np.ndarray:
    """Accepted draft tokens (bonus excluded) in ``num_steps`` chain steps at constant ``alpha``.

    Runs :func:`sim.theory.chain_sampling.speculative_chain_step` in chunks to bound memory.
    Raise ScenarioError if ``num_steps < 1``, ``k < 1`` or ``alpha`` is outside [0, 1].
    """
    _check_alpha_k(alpha, k)
    if k < 1 or num_steps < 1:
        raise ScenarioError(f"Monte-Carlo needs k >= 1 and num_steps >= 1, got {k}, {num_steps}")
    draft_row, target_row = constant_acceptance_pair(alpha)
    counts = []
    for start in range(0, num_steps, MONTE_CARLO_CHUNK_STEPS):
        batch = min(MONTE_CARLO_CHUNK_STEPS, num_steps - start)
        draft_prob = np.broadcast_to(draft_row, (batch, k, draft_row.size))
        target_prob = np.broadcast_to(target_row, (batch, k + 1, target_row.size))
        draft_tokens = draft_chain_tokens(draft_prob, rng)
        result = speculative_chain_step(draft_tokens, draft_prob, target_prob, rng)
        counts.append(result.num_accepted_tokens)
    return np.concatenate(counts)


def monte_carlo_tokens_per_step(
    alpha: float, k: int, num_steps: int, rng: np.random.Generator
) -> tuple[float, float]:
    """Simulated mean tokens per step (bonus included) and its standard error.

    Raise ScenarioError as :func:`monte_carlo_accepted_counts` does.
    """
    emitted = monte_carlo_accepted_counts(alpha, k, num_steps, rng) + 1.0
    return float(emitted.mean()), float(emitted.std(ddof=1) / np.sqrt(emitted.size))


def monte_carlo_optimal_k(
    alpha: float, c: float, k_max: int, num_steps: int, rng: np.random.Generator
) -> int:
    """The k in ``1 .. k_max`` with the highest simulated speedup, from one run of ``k_max`` drafts.

    The verdicts on the first ``k`` drafts of a ``k_max`` chain are exactly those of a ``k`` chain
    (they read the same rows and uniforms), so a step of the short chain emits
    ``min(accepted, k) + 1`` tokens: one run gives every k with common random numbers. Raise
    ScenarioError if an argument is out of range.
    """
    _check_c(c)
    accepted = monte_carlo_accepted_counts(alpha, k_max, num_steps, rng)
    ks = np.arange(1, k_max + 1)
    emitted = (np.minimum(accepted[:, None], ks[None, :]) + 1.0).mean(axis=0)
    return int(ks[np.argmax(emitted / (ks * c + 1.0))])


@dataclass(frozen=True, slots=True)
class LessonRow:
    """One quantity of a claim: what the lesson said, what the formula gives, what simulation gives.

    ``k`` is the number of draft tokens the value refers to (``None`` for an optimum);
    ``simulation_std_error`` is ``None`` where the simulated value is an argmax.
    """

    claim: str
    quantity: str
    alpha: float
    c: float | None
    k: int | None
    lesson: str
    formula: float
    simulation: float
    simulation_std_error: float | None


@dataclass(frozen=True, slots=True)
class LessonComparison:
    """The claims the project started from, against the closed form and the simulated sampler."""

    rows: tuple[LessonRow, ...]
    num_steps: int
    seed: int

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return asdict(self)

    def format_text(self) -> str:
        """A plain-text table, one line per quantity."""
        lines = [
            f"{'claim':<24} {'quantity':<24} {'lesson':>8} {'formula':>8} {'simulated':>14}",
        ]
        for row in self.rows:
            # An optimum is a whole number of draft tokens; other values carry two decimals.
            digits = 0 if row.k is None else 2
            simulated = f"{row.simulation:.{digits}f}"
            if row.simulation_std_error is not None:
                simulated += f" ± {row.simulation_std_error:.2f}"
            lines.append(
                f"{row.claim:<24} {row.quantity:<24} {row.lesson:>8} "
                f"{row.formula:>8.{digits}f} {simulated:>14}"
            )
        lines.append(
            f"simulated: exact chain sampler, {self.num_steps} steps per value, seed {self.seed}; "
            "tokens include the bonus token"
        )
        return "\n".join(lines)


def lesson_comparison(num_steps: int = 20_000, seed: int = 0, k_max: int = 64) -> LessonComparison:
    """Recompute the lesson's acceptance claims with the formula and with the chain sampler.

    Every value is computed here, none is copied from the lesson. Deterministic for a given seed.
    Raise ScenarioError if ``num_steps < 1`` or ``k_max < 1``.
    """
    streams = iter(
        np.random.Generator(np.random.PCG64(child))
        for child in np.random.SeedSequence(seed).spawn(16)
    )
    rows: list[LessonRow] = []

    def tokens_row(claim: str, alpha: float, k: int, lesson: str) -> LessonRow:
        mean, error = monte_carlo_tokens_per_step(alpha, k, num_steps, next(streams))
        formula = expected_tokens_per_step(alpha, k)
        return LessonRow(
            claim, f"tokens/step, alpha {alpha:g}", alpha, None, k, lesson, formula, mean, error
        )

    def speedup_row(
        claim: str, alpha: float, c: float, k: int, lesson: str, what: str
    ) -> LessonRow:
        mean, error = monte_carlo_tokens_per_step(alpha, k, num_steps, next(streams))
        cost = k * c + 1.0
        formula = speedup(alpha, k, c)
        return LessonRow(claim, what, alpha, c, k, lesson, formula, mean / cost, error / cost)

    def optimum_row(claim: str, alpha: float, c: float, lesson: str) -> LessonRow:
        formula = optimal_k(alpha, c, k_max)
        simulated = monte_carlo_optimal_k(alpha, c, k_max, num_steps, next(streams))
        return LessonRow(claim, "optimal k", alpha, c, None, lesson, formula, simulated, None)

    claim = "alpha 0.8, c 0.05"
    best = optimal_k(0.8, 0.05, k_max)
    rows.append(optimum_row(claim, 0.8, 0.05, "5-7"))
    rows.append(speedup_row(claim, 0.8, 0.05, best, "3.2x", f"speedup at optimum k={best}"))
    claim = "k 5, alpha 0.6 -> 0.9"
    rows.append(tokens_row(claim, 0.6, 5, "2.2"))
    rows.append(tokens_row(claim, 0.9, 5, "4.1"))
    claim = "alpha 0.95, c 0.02"
    best = optimal_k(0.95, 0.02, k_max)
    rows.append(optimum_row(claim, 0.95, 0.02, "8-10"))
    rows.append(speedup_row(claim, 0.95, 0.02, best, "up to 5x", f"speedup at optimum k={best}"))
    rows.append(speedup_row(claim, 0.95, 0.02, 10, "5x", "speedup at k=10"))
    return LessonComparison(rows=tuple(rows), num_steps=num_steps, seed=seed)
