"""What requests share: system prompts common to many requests, and multi-turn sessions.

Two optional ``workload:`` keys describe it:

- ``prefix: {num_shared_prefixes, shared_prefix_tokens, fraction_with_prefix, order}``: a fraction
  of the conversations (each request, or each session) opens with one of ``num_shared_prefixes``
  system prompts of ``shared_prefix_tokens`` tokens, chosen uniformly (stream ``"prefixes"``) or,
  with ``order: cycle``, in turn (conversation ``k`` opens with prefix ``k mod N``: a benchmark
  that sends a fixed pool of prompts one after another, as inference-perf's shared-prefix
  generator does, ``i = (i + 1) % len(self.prompts)``); ``prompt_tokens`` then draws the
  request's own part, after the prefix.
- ``sessions: {num_turns, think_time_s}``: requests come in conversations of ``num_turns`` turns
  (the last conversation may be cut short by ``num_requests``). The arrival process times the
  first turn of each conversation (so ``rate_per_s`` counts new conversations; a closed loop's
  clients each hold one conversation at a time); turn ``t + 1`` is sent ``think_time_s`` after
  turn ``t``'s answer ends, and its prompt resends the whole history: the prefix, every earlier
  question and answer, then its own question drawn from ``prompt_tokens``. Answers are drawn from
  ``output_tokens``.

:func:`share` turns them into per-request columns: the prompt lengths with prefix and history
added, ``prefix_id``/``session_id`` (-1: none) and ``next_turn`` (the request a finish releases).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, Field

from sim.inputs import SCHEMA_CONFIG

IntArray = NDArray[np.int64]

_FROZEN_STRICT = SCHEMA_CONFIG
#: Token counts: ten million tokens is 76 times the longest catalogued context (131,072).
MAX_TOKENS = 10_000_000
#: A client that thinks for more than a week between turns has left.
MAX_THINK_TIME_S = 7 * 86_400.0


class PrefixConfig(BaseModel):
    """Shared system prompts: ``num_shared_prefixes`` of ``shared_prefix_tokens`` tokens each,
    chosen at random (``order: random``) or in turn (``order: cycle``)."""

    model_config = _FROZEN_STRICT
    num_shared_prefixes: int = Field(ge=1, le=MAX_TOKENS)
    shared_prefix_tokens: int = Field(ge=1, le=MAX_TOKENS)
    fraction_with_prefix: float = Field(default=1.0, gt=0, le=1)
    order: Literal["random", "cycle"] = "random"


class SessionConfig(BaseModel):
    """Multi-turn conversations of ``num_turns`` turns, each ``think_time_s`` after an answer."""

    model_config = _FROZEN_STRICT
    num_turns: int = Field(ge=1, le=10_000)
    think_time_s: float = Field(ge=0, le=MAX_THINK_TIME_S)


@dataclass(frozen=True)
class SharedStructure:
    """Per-request columns of what a workload shares (see the module's docstring)."""

    prompt_tokens: IntArray
    prefix_id: IntArray
    prefix_tokens: IntArray
    session_id: IntArray
    next_turn: IntArray
    first_turns: IntArray


def num_sessions(num_requests: int, sessions: SessionConfig | None) -> int:
    """Conversations needed for ``num_requests`` requests (one per request without sessions)."""
    if sessions is None:
        return num_requests
    return -(-num_requests // sessions.num_turns)


def share(
    own_prompt_tokens: IntArray,
    output_tokens: IntArray,
    prefix: PrefixConfig | None,
    sessions: SessionConfig | None,
    rng: np.random.Generator,
) -> SharedStructure:
    """The prompts and sharing columns for requests whose own parts are ``own_prompt_tokens``.

    Sessions are laid out in request order: conversation ``k`` is requests ``k·T .. k·T + T - 1``.
    Draws from ``rng`` only when ``prefix`` is given (which conversations open with a prefix, and
    which prefix unless ``prefix.order`` is ``cycle``).
    """
    n = len(own_prompt_tokens)
    turns = 1 if sessions is None else sessions.num_turns
    request = np.arange(n, dtype=np.int64)
    conversation = request // turns
    num_conv = num_sessions(n, sessions)
    prefix_id = np.full(n, -1, dtype=np.int64)
    prefix_tokens = np.zeros(n, dtype=np.int64)
    if prefix is not None:
        if prefix.order == "cycle":
            chosen = np.arange(num_conv, dtype=np.int64) % prefix.num_shared_prefixes
        else:
            chosen = rng.integers(0, prefix.num_shared_prefixes, size=num_conv)
        has_prefix = rng.random(num_conv) < prefix.fraction_with_prefix
        conv_prefix = np.where(has_prefix, chosen, -1).astype(np.int64)
        prefix_id = conv_prefix[conversation]
        prefix_tokens = np.where(prefix_id >= 0, prefix.shared_prefix_tokens, 0).astype(np.int64)
    own = np.asarray(own_prompt_tokens, dtype=np.int64)
    if sessions is None:
        return SharedStructure(
            prompt_tokens=prefix_tokens + own,
            prefix_id=prefix_id,
            prefix_tokens=prefix_tokens,
            session_id=np.full(n, -1, dtype=np.int64),
            next_turn=np.full(n, -1, dtype=np.int64),
            first_turns=request,
        )
    # History before turn t: every earlier question and answer of the same conversation.
    exchange = own + np.asarray(output_tokens, dtype=np.int64)
    cumulative = np.cumsum(exchange) - exchange  # before this request, over all requests
    start = conversation * turns
    history = cumulative - cumulative[start]
    last = (request % turns == turns - 1) | (request == n - 1)
    return SharedStructure(
        prompt_tokens=prefix_tokens + history + own,
        prefix_id=prefix_id,
        prefix_tokens=prefix_tokens,
        session_id=conversation,
        next_turn=np.where(last, -1, request + 1),
        first_turns=np.arange(0, n, turns, dtype=np.int64),
    )


def mean_prompt_tokens(
    own_mean_tokens: float,
    output_mean_tokens: float,
    prefix: PrefixConfig | None,
    sessions: SessionConfig | None,
) -> float:
    """The analytic mean prompt over the turns of full conversations: the prefix's share, the own
    part, and on average (T - 1) / 2 earlier exchanges of question and answer."""
    mean = own_mean_tokens
    if prefix is not None:
        mean += prefix.fraction_with_prefix * prefix.shared_prefix_tokens
    if sessions is not None:
        mean += (sessions.num_turns - 1) / 2 * (own_mean_tokens + output_mean_tokens)
    return mean
