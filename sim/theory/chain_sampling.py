"""Exact speculative sampling along a chain of draft tokens.

The rule is the one of Leviathan, Kalman and Matias, "Fast Inference from Transformers via
Speculative Decoding" (ICML 2023, arXiv:2211.17192) and of Chen et al., "Accelerating Large Language
Model Decoding with Speculative Sampling" (arXiv:2302.01318): draft ``k`` tokens from the draft
model, run the target once over ``k + 1`` positions, accept each draft token ``x`` with probability
``min(1, target_prob(x) / draft_prob(x))``, and at the first rejection emit one token drawn from the
residual ``normalize(max(target_prob - draft_prob, 0))``. When every draft is accepted the target's
distribution at position ``k + 1`` gives one more token for free (the bonus token). The emitted
tokens are then distributed exactly as if the target had been sampled alone.

Arrays are batched: ``draft_prob`` is ``[batch, k, vocab]``, ``target_prob`` is ``[batch, k + 1,
vocab]``, ``draft_tokens`` is ``[batch, k]``. Row ``i`` of ``target_prob`` is the target's
distribution given the context and draft tokens ``0 .. i-1``; row ``i`` of ``draft_prob`` is the
distribution draft token ``i`` was drawn from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.errors import ScenarioError


@dataclass(frozen=True, slots=True)
class ChainStepResult:
    """What one verification of a chain of ``k`` draft tokens produced, per batch row.

    ``num_accepted_tokens`` counts accepted draft tokens (0 to ``k``, bonus token excluded);
    ``num_emitted_tokens`` is that plus one: the correction token after a rejection, or the bonus
    token after ``k`` acceptances. ``emitted_tokens[b, :num_emitted_tokens[b]]`` are the tokens
    appended to row ``b``; ``emitted_mask`` marks those entries (the rest are padding).
    """

    num_accepted_tokens: np.ndarray
    num_emitted_tokens: np.ndarray
    emitted_tokens: np.ndarray
    emitted_mask: np.ndarray

    @property
    def num_draft_tokens(self) -> int:
        """The chain length ``k`` that was verified."""
        return int(self.emitted_tokens.shape[1]) - 1

    def accepted_histogram(self) -> np.ndarray:
        """Rows with 0, 1, ..., k accepted draft tokens: the raw counts statistics derive from."""
        return np.bincount(self.num_accepted_tokens, minlength=self.num_draft_tokens + 1)


def sample_categorical(weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Draw one index per row of non-negative ``weights`` (``[..., vocab]``, need not sum to one).

    Inverse-CDF sampling on the unnormalised cumulative sum: index ``x`` is chosen when
    ``cdf[x-1] <= u * total < cdf[x]``, so a zero-weight index is never chosen. Raise ScenarioError
    if a row has no positive weight.
    """
    cumulative = np.cumsum(weights, axis=-1)
    total = cumulative[..., -1:]
    if np.any(~(total > 0.0)):
        raise ScenarioError("sample_categorical: a row of weights has no positive entry")
    threshold = rng.random(size=total.shape) * total
    index = np.sum(cumulative <= threshold, axis=-1)
    # u * total can round up to total itself; never step past the last positive weight.
    vocab_size = weights.shape[-1]
    last_positive = vocab_size - 1 - np.argmax((weights > 0.0)[..., ::-1], axis=-1)
    return np.minimum(index, last_positive)


def residual_distribution(target_prob: np.ndarray, draft_prob: np.ndarray) -> np.ndarray:
    """``normalize(max(target_prob - draft_prob, 0))`` along the last axis.

    Where the residual is all zero the two distributions are equal, a rejection has probability
    zero, and ``target_prob`` is returned instead, so that rounding can never leave an empty
    distribution.
    """
    residual = np.maximum(target_prob - draft_prob, 0.0)
    mass = residual.sum(axis=-1, keepdims=True)
    empty = mass <= 0.0
    return np.where(empty, target_prob, residual / np.where(empty, 1.0, mass))


def draft_chain_tokens(draft_prob: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Draw the draft tokens of a chain whose per-position draft distributions are already known.

    Each of the ``k`` rows of ``draft_prob[b]`` is sampled once, giving ``[batch, k]`` tokens. Raise
    ScenarioError if ``draft_prob`` is not three-dimensional.
    """
    if draft_prob.ndim != 3:
        raise ScenarioError(f"draft_prob must be [batch, k, vocab], got shape {draft_prob.shape}")
    return sample_categorical(draft_prob, rng)


def _check_chain_shapes(
    draft_tokens: np.ndarray, draft_prob: np.ndarray, target_prob: np.ndarray
) -> None:
    if draft_prob.ndim != 3 or target_prob.ndim != 3 or draft_tokens.ndim != 2:
        raise ScenarioError(
            "speculative_chain_step: expected draft_tokens [batch, k], "
            "draft_prob [batch, k, vocab], "
            f"target_prob [batch, k+1, vocab]; got {draft_tokens.shape}, {draft_prob.shape}, "
            f"{target_prob.shape}"
        )
    batch, k, vocab = draft_prob.shape
    if draft_tokens.shape != (batch, k) or target_prob.shape != (batch, k + 1, vocab):
        raise ScenarioError(
            f"speculative_chain_step: shapes disagree: draft_tokens {draft_tokens.shape}, "
            f"draft_prob {draft_prob.shape}, target_prob {target_prob.shape} (need k+1 target rows)"
        )


def speculative_chain_step(
    draft_tokens: np.ndarray,
    draft_prob: np.ndarray,
    target_prob: np.ndarray,
    rng: np.random.Generator,
    *,
    broken_residual: bool = False,
) -> ChainStepResult:
    """Verify a batch of draft chains against one target pass and return what each row emits.

    The target is sampled exactly: the emitted tokens have the target's joint distribution whatever
    the draft. ``broken_residual=True`` is a deliberately wrong variant kept as a negative control:
    on rejection it samples from ``target_prob`` instead of the residual, which over-weights tokens
    the draft already proposes too often; the lossless check must catch it. Raise ScenarioError if
    the shapes disagree or a draft token has zero draft probability (it could not have been
    drafted).
    """
    _check_chain_shapes(draft_tokens, draft_prob, target_prob)
    batch, k, _ = draft_prob.shape
    rows = np.arange(batch)[:, None]
    positions = np.arange(k)[None, :]
    draft_prob_of_token = draft_prob[rows, positions, draft_tokens]
    target_prob_of_token = target_prob[rows, positions, draft_tokens]
    if np.any(draft_prob_of_token <= 0.0):
        raise ScenarioError("speculative_chain_step: a draft token has draft_prob 0")

    # Accept draft i with probability min(1, target_prob / draft_prob): u < p/q, written u*q < p.
    uniform = rng.random(size=(batch, k))
    accepted = uniform * draft_prob_of_token < target_prob_of_token
    # Only the prefix before the first rejection counts.
    num_accepted = np.cumprod(accepted, axis=1).sum(axis=1).astype(np.int64)

    # The extra token comes from position num_accepted: the residual there after a rejection, the
    # target's own distribution (bonus token) at position k after k acceptances.
    next_target = target_prob[np.arange(batch), num_accepted]
    rejected = num_accepted < k
    next_prob = next_target.copy()
    if np.any(rejected):
        rejected_rows = np.flatnonzero(rejected)
        at = num_accepted[rejected_rows]
        if broken_residual:
            next_prob[rejected_rows] = target_prob[rejected_rows, at]
        else:
            next_prob[rejected_rows] = residual_distribution(
                target_prob[rejected_rows, at], draft_prob[rejected_rows, at]
            )
    next_token = sample_categorical(next_prob, rng)

    emitted = np.zeros((batch, k + 1), dtype=np.int64)
    emitted[:, :k] = draft_tokens
    emitted[np.arange(batch), num_accepted] = next_token
    emitted_mask = np.arange(k + 1)[None, :] <= num_accepted[:, None]
    emitted = np.where(emitted_mask, emitted, 0)
    return ChainStepResult(
        num_accepted_tokens=num_accepted,
        num_emitted_tokens=num_accepted + 1,
        emitted_tokens=emitted,
        emitted_mask=emitted_mask,
    )
