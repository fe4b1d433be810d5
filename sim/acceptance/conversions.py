"""Conversions between the acceptance metrics that papers and engines publish.

Sources disagree on what they count, so every conversion is an explicit function:

- EAGLE's *n-α* (Li et al. 2024, arXiv:2401.15077, Table 2) is a **conditional** rate:
the probability
  that draft position ``i`` is accepted given that positions ``1..i-1`` were.
- vLLM's "per-position acceptance rate" is **cumulative**: the fraction of drafts whose
position ``i``
  was accepted, i.e. ``P(accepted >= i)``.
- EAGLE's τ and vLLM ≥ 0.9's "mean acceptance length" count tokens per verify step
**with** the bonus
  token; vLLM 0.8.5's "mean acceptance length" counted accepted draft tokens only.

With cumulative rates ``c_i = P(accepted >= i)`` the expected tokens per step of a chain of ``k``
drafts is ``τ = 1 + Σ_{i<=k} c_i`` (the bonus or correction token is always emitted).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from sim.errors import ScenarioError


def _as_rates(rates: Sequence[float] | np.ndarray, what: str) -> np.ndarray:
    array = np.asarray(rates, dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        raise ScenarioError(f"{what}: need a non-empty list of rates, got {list(array.ravel())}")
    if not np.all(np.isfinite(array)) or np.any(array < 0.0) or np.any(array > 1.0):
        raise ScenarioError(f"{what}: every rate must be in [0, 1], got {array.tolist()}")
    return array


def extend_rates(conditional_rates: Sequence[float] | np.ndarray, num_positions: int) -> np.ndarray:
    """The conditional rates for positions ``1..num_positions``, reusing the last value
    beyond the list.

    Raise ScenarioError if the rates are empty or outside [0, 1].
    """
    rates = _as_rates(conditional_rates, "per_position")
    if num_positions <= rates.size:
        return rates[:num_positions].copy()
    return np.concatenate([rates, np.full(num_positions - rates.size, rates[-1])])


def conditional_to_cumulative(conditional_rates: Sequence[float] | np.ndarray) -> np.ndarray:
    """vLLM's cumulative per-position rates from EAGLE's conditional ones: ``c_i = Π_{j<=i} a_j``.

    Raise ScenarioError if a rate is outside [0, 1].
    """
    return np.cumprod(_as_rates(conditional_rates, "conditional rates"))


def cumulative_to_conditional(cumulative_rates: Sequence[float] | np.ndarray) -> np.ndarray:
    """EAGLE's conditional rates from vLLM's cumulative ones: ``a_i = c_i / c_{i-1}`` (``c_0 = 1``).

    A position that is never reached (``c_{i-1} = 0``) gets the previous conditional rate, which
    changes no prediction because nothing reaches it.
    Raise ScenarioError if a rate is outside [0, 1] or the rates increase with position.
    """
    cumulative = _as_rates(cumulative_rates, "cumulative rates")
    if np.any(np.diff(cumulative) > 1e-12):
        raise ScenarioError(
            f"cumulative rates must not increase with position, got {cumulative.tolist()}"
        )
    previous = np.concatenate([[1.0], cumulative[:-1]])
    conditional = np.empty_like(cumulative)
    last = 0.0
    for index in range(cumulative.size):
        if previous[index] > 0.0:
            last = min(1.0, cumulative[index] / previous[index])
        conditional[index] = last
    return conditional


def tau_from_conditional(conditional_rates: Sequence[float] | np.ndarray, num_draft: int) -> float:
    """Expected tokens per step (bonus included) of a chain of ``num_draft`` drafts.

    ``τ = 1 + Σ_{i=1..k} Π_{j<=i} a_j``; positions beyond the list reuse the last rate.
    Raise ScenarioError if ``num_draft < 0`` or a rate is outside [0, 1].
    """
    if num_draft < 0:
        raise ScenarioError(f"num_speculative_tokens must be >= 0, got {num_draft}")
    if num_draft == 0:
        return 1.0
    return float(1.0 + np.sum(np.cumprod(extend_rates(conditional_rates, num_draft))))


def tau_from_alpha(alpha: float, num_draft: int) -> float:
    """Leviathan et al. 2023 (arXiv:2211.17192) closed form ``(1 − α^(k+1)) / (1 − α)``.

    Evaluated as the geometric sum ``Σ_{i=0..k} α^i`` by Horner's rule: the quotient loses its
    digits to cancellation as α → 1, which left :func:`alpha_from_tau` a root 7e-9 short of
    α = 1 - 4e-16 at k = 1.
    Raise ScenarioError if ``alpha`` is outside [0, 1] or ``num_draft < 0``.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ScenarioError(f"alpha must be in [0, 1], got {alpha}")
    if num_draft < 0:
        raise ScenarioError(f"num_speculative_tokens must be >= 0, got {num_draft}")
    total = 1.0
    for _ in range(num_draft):
        total = total * alpha + 1.0
    return float(total)


def alpha_from_tau(tau: float, num_draft: int) -> float:
    """The constant per-token acceptance α that gives ``tau`` tokens per step at
    ``num_draft`` drafts.

    Inverts the closed form with Brent's method; ``τ = 1`` gives α = 0 and ``τ = k + 1``
    gives α = 1.
    Raise ScenarioError if ``num_draft < 1`` or ``tau`` is outside [1, k + 1].
    """
    if num_draft < 1:
        raise ScenarioError(f"a target acceptance length needs k >= 1 drafts, got k = {num_draft}")
    if not 1.0 <= tau <= num_draft + 1.0:
        raise ScenarioError(
            f"mean_acceptance_length must be in [1, k + 1] = [1, {num_draft + 1}] at k = "
            f"{num_draft}, got {tau}"
        )
    if tau <= 1.0:
        return 0.0
    if tau >= num_draft + 1.0:
        return 1.0
    from scipy.optimize import brentq  # deferred: scipy is slow to import

    return float(brentq(lambda alpha: tau_from_alpha(alpha, num_draft) - tau, 0.0, 1.0, xtol=1e-14))


def tau_from_vllm085_mean_acceptance_length(mean_acceptance_length: float) -> float:
    """τ (bonus included) from vLLM 0.8.5's mean acceptance length, which counted drafts only.

    vLLM 0.8.5 divided accepted draft tokens by the number of drafts; later versions add the bonus
    token to every step, so ``τ = value + 1``.
    Raise ScenarioError if the value is negative.
    """
    if mean_acceptance_length < 0.0:
        raise ScenarioError(
            f"vLLM 0.8.5 mean acceptance length must be >= 0, got {mean_acceptance_length}"
        )
    return float(mean_acceptance_length + 1.0)


def vllm085_mean_acceptance_length_from_tau(tau: float) -> float:
    """The inverse of :func:`tau_from_vllm085_mean_acceptance_length`.

    Raise ScenarioError if ``tau < 1``.
    """
    if tau < 1.0:
        raise ScenarioError(f"tau must be >= 1 (the bonus token is always emitted), got {tau}")
    return float(tau - 1.0)


def cumulative_from_taus(taus_by_k: dict[int, float]) -> np.ndarray:
    """Cumulative rates ``c_1..c_K`` from τ measured at several chain lengths k.

    Consecutive measurements pin the cumulative rate exactly: ``c_k = τ_k − τ_{k−1}``. Positions
    below the smallest published k share one constant conditional rate solved so that τ at that k
    is met (Leviathan's closed form); a gap between two published k is split the same way.
    Raise ScenarioError if the values are not increasing by less than one token per extra draft.
    """
    if not taus_by_k:
        raise ScenarioError("need at least one (k, tau) pair")
    known: dict[int, float] = {0: 1.0, **{int(k): float(v) for k, v in taus_by_k.items()}}
    ks = sorted(known)
    cumulative: list[float] = []
    for low, high in pairwise(ks):
        gap_tokens = known[high] - known[low]
        reach = cumulative[-1] if cumulative else 1.0
        width = high - low
        if gap_tokens < -1e-9 or gap_tokens > reach * width + 1e-9:
            raise ScenarioError(
                f"tau values {known} are inconsistent: going from k={low} to k={high} adds "
                f"{gap_tokens:.4f} tokens, must be in [0, {reach * width:.4f}]"
            )
        # Within the gap the conditional rate is constant: reach · Σ_{i=1..w} a^i = gap_tokens.
        ratio = min(float(width), max(0.0, gap_tokens) / reach) if reach > 0 else 0.0
        alpha = alpha_from_tau(1.0 + ratio, width)
        cumulative.extend(reach * alpha ** np.arange(1, width + 1))
    return np.asarray(cumulative, dtype=np.float64)
