"""The serving front end: what happens to a request outside the engine's step loop.

A real server does work the GPU never sees. In vLLM V1 the API server process parses the HTTP
request, applies the chat template and tokenises the prompt, then sends the request to the engine
core process over ZMQ; the engine core schedules it at its next step; every step's outputs travel
back over ZMQ, are detokenised in the API server and streamed to the client as server-sent events
(vLLM blog, "vLLM V1: A Major Upgrade to vLLM's Core Architecture", 2025-01-27: "isolating the
API server and the engine core in separate processes"). SGLang splits the same work between its
tokenizer manager, scheduler and detokenizer processes. None of this is in a step's cost.

The model has two parts, each per engine preset:

* **Ingress**, before the engine sees a request: a service time
  ``S_i = ingress_fixed_s + ingress_per_prompt_token_s · prompt_tokens_i`` on a single front-end
  server, first come first served. The time request i reaches the engine is the Lindley recursion
  ``engine_i = max(client_i, engine_{i-1}) + S_i`` (Lindley, "The theory of queues with a single
  server", Proc. Cambridge Phil. Soc. 48, 1952), so a saturated front end queues requests of its
  own. Unrolled, ``engine_i = C_i + max_{j<=i}(client_j − C_{j−1})`` with ``C_i = S_0 + … + S_i``:
  one cumulative sum and one running maximum for a whole open-loop schedule.
* **Egress**, after the engine emits tokens: a fixed ``egress_per_chunk_s`` on every streamed
  chunk (detokenise, IPC back, SSE write). Every chunk is late by the same amount, so TTFT and
  end-to-end latency include it once while TPOT and ITL, differences of emission times, do not
  change: they keep their `vllm bench serve` meaning.

Client-side arrival stays the time TTFT and latency are measured from, as the benchmark measures
them. Egress is a delay, not a queue: detokenisation competes with ingress for the API server's
CPU in reality, and that contention is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

#: Numeric fields of a front end, all seconds and all >= 0.
FRONTEND_FIELDS = ("ingress_fixed_s", "ingress_per_prompt_token_s", "egress_per_chunk_s")


@dataclass(frozen=True)
class FrontEnd:
    """Latency of the serving path outside the engine, and whether it is modelled at all.

    Disabled, every request reaches the engine when the client sends it and sees its tokens when
    the engine emits them. Raise ValueError if a time is negative or not finite.
    """

    enabled: bool = False
    ingress_fixed_s: float = 0.0
    ingress_per_prompt_token_s: float = 0.0
    egress_per_chunk_s: float = 0.0

    def __post_init__(self) -> None:
        for name in FRONTEND_FIELDS:
            value = getattr(self, name)
            if not np.isfinite(value) or value < 0:
                raise ValueError(f"front end {name} must be a finite number >= 0, got {value}")

    @property
    def egress_s(self) -> float:
        """Delay added to every emission the client sees (0 when disabled)."""
        return self.egress_per_chunk_s if self.enabled else 0.0

    def ingress_service_s(self, prompt_tokens: NDArray[np.integer]) -> FloatArray:
        """Each request's front-end service time (tokenise, IPC); zeros when disabled."""
        prompt = np.asarray(prompt_tokens, dtype=np.float64)
        if not self.enabled:
            return np.zeros(prompt.shape, dtype=np.float64)
        return self.ingress_fixed_s + self.ingress_per_prompt_token_s * prompt


def lindley_departures(
    arrival_at_s: FloatArray, service_s: FloatArray, free_at_s: float = 0.0
) -> FloatArray:
    """Departure times of a single FIFO server: ``d_i = max(a_i, d_{i-1}) + S_i``.

    ``free_at_s`` is when the server is first free (``d_{-1}``). Vectorised as
    ``d_i = C_i + max(free_at_s, max_{j<=i}(a_j − C_{j−1}))`` with ``C`` the cumulative service.
    The result is clamped to the recursion's two lower bounds, ``a_i + S_i`` and ``d_{i-1}``, so
    float rounding of the sums can never put a request at the engine before its client sent it or
    out of order. Raise ValueError if the arrays differ in length, arrivals decrease or a service
    time is negative.
    """
    arrival = np.asarray(arrival_at_s, dtype=np.float64)
    service = np.asarray(service_s, dtype=np.float64)
    if arrival.shape != service.shape or arrival.ndim != 1:
        raise ValueError(
            f"arrivals and service times must be 1-D of one length, got {arrival.shape} "
            f"and {service.shape}"
        )
    if arrival.size == 0:
        return arrival.copy()
    if (np.diff(arrival) < 0).any():
        raise ValueError("arrivals must be in non-decreasing order")
    if (service < 0).any():
        raise ValueError("service times must be >= 0")
    cumulative = np.cumsum(service)
    before = np.concatenate(([0.0], cumulative[:-1]))  # C_{i-1}
    start_slack = np.maximum.accumulate(np.maximum(arrival - before, free_at_s))
    depart = cumulative + start_slack
    depart = np.maximum(depart, arrival + service)
    return np.maximum.accumulate(depart)


class FrontEndServer:
    """The same single FIFO server, one request at a time, for closed-loop clients.

    Requests must be offered in non-decreasing client time (closed-loop clients send when a
    completion reaches them, and completions are handled in time order). Raise ValueError if a
    request is offered earlier than the previous one.
    """

    def __init__(self) -> None:
        self.free_at_s = 0.0
        self._last_arrival_s = -np.inf

    @property
    def last_arrival_s(self) -> float:
        """The latest client time offered so far (-inf before the first)."""
        return self._last_arrival_s

    def depart(self, arrival_at_s: float, service_s: float) -> float:
        """When a request sent at ``arrival_at_s`` leaves the front end for the engine."""
        if arrival_at_s < self._last_arrival_s:
            raise ValueError(
                f"front end: request offered at {arrival_at_s} after one at {self._last_arrival_s}"
            )
        self._last_arrival_s = arrival_at_s
        self.free_at_s = max(arrival_at_s, self.free_at_s) + service_s
        return self.free_at_s
