"""Per-request state of the node as one table of numpy columns (struct of arrays).

A request is an index into these columns. Keeping state in columns lets one engine step update
every sequence in the batch with a few vectorised operations instead of a Python loop per token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

#: Lifecycle states of a request.
NOT_ARRIVED, WAITING, RUNNING, FINISHED = 0, 1, 2, 3


@dataclass
class RequestTable:
    """Columns of per-request state; every array has one entry per request.

    Raise ValueError if ``prefix_id`` or ``session_id`` is given with the wrong length.

    ``num_computed_tokens`` is the logical KV length (tokens whose KV is committed);
    the tokens a request knows are its prompt plus the tokens emitted so far. ``arrival_at_s`` is
    when the client sent the request, ``engine_arrival_at_s`` when it left the front end.
    ``prefix_id``/``session_id``: the shared prefix and the multi-turn session the request belongs
    to (-1: none), for routers that send related requests to one node; ``num_cached_tokens``:
    prompt tokens its first admission found in the prefix cache (vLLM's
    ``Request.num_cached_tokens``).
    """

    prompt_tokens: IntArray
    output_tokens: IntArray
    prefix_id: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    session_id: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    arrival_at_s: FloatArray = field(init=False)
    engine_arrival_at_s: FloatArray = field(init=False)
    scheduled_at_s: FloatArray = field(init=False)
    first_token_at_s: FloatArray = field(init=False)
    finished_at_s: FloatArray = field(init=False)
    last_emit_at_s: FloatArray = field(init=False)
    last_emit_step: IntArray = field(init=False)
    num_emitted: IntArray = field(init=False)
    num_computed_tokens: IntArray = field(init=False)
    num_preemptions: IntArray = field(init=False)
    num_decode_steps: IntArray = field(init=False)
    num_drafted: IntArray = field(init=False)
    num_accepted: IntArray = field(init=False)
    num_cached_tokens: IntArray = field(init=False)
    state: NDArray[np.int8] = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.prompt_tokens)
        if len(self.prefix_id) == 0:
            self.prefix_id = np.full(n, -1, dtype=np.int64)
        if len(self.session_id) == 0:
            self.session_id = np.full(n, -1, dtype=np.int64)
        if len(self.prefix_id) != n or len(self.session_id) != n:
            raise ValueError("prefix_id and session_id need one entry per request")
        nan = np.full(n, np.nan)
        self.arrival_at_s = nan.copy()
        self.engine_arrival_at_s = nan.copy()
        self.scheduled_at_s = nan.copy()
        self.first_token_at_s = nan.copy()
        self.finished_at_s = nan.copy()
        self.last_emit_at_s = nan.copy()
        self.last_emit_step = np.full(n, -2, dtype=np.int64)
        for name in (
            "num_emitted",
            "num_computed_tokens",
            "num_preemptions",
            "num_decode_steps",
            "num_drafted",
            "num_accepted",
            "num_cached_tokens",
        ):
            setattr(self, name, np.zeros(n, dtype=np.int64))
        self.state = np.full(n, NOT_ARRIVED, dtype=np.int8)

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    def known_tokens(self, ids: IntArray) -> IntArray:
        """Tokens each request knows: its prompt and everything emitted so far."""
        return self.prompt_tokens[ids] + self.num_emitted[ids]
