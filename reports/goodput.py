"""A goodput target: at least a share of requests within their per-request SLO.

The per-request SLO is ``vllm bench serve --goodput``'s: bounds in milliseconds on a request's
``ttft``, ``tpot`` and ``e2el`` (end-to-end latency), written ``ttft:500 tpot:50`` (the benchmark
takes space-separated ``KEY:VALUE`` pairs; commas are accepted too). A request is good when every
bounded metric is at most its bound (vllm-project/vllm, ``vllm/benchmarks/serve.py``,
``calculate_metrics`` and ``parse_goodput``, commit 009e6d4a). A plan's goodput target holds when
the share of good requests is at least ``min_fraction`` (0.99 unless given).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sim.errors import ScenarioError
from sim.scenario import GOODPUT_METRICS

DEFAULT_MIN_FRACTION = 0.99
_PAIR = re.compile(r"^(?P<key>[a-z0-9]+)\s*:\s*(?P<bound>[-+0-9.eE]+)$")


@dataclass(frozen=True)
class GoodputTarget:
    """At least ``min_fraction`` of requests meet every bound of ``bounds_ms``."""

    bounds_ms: dict[str, float]
    min_fraction: float = DEFAULT_MIN_FRACTION

    @property
    def key(self) -> str:
        return "good_request_fraction"

    def __str__(self) -> str:
        pairs = " ".join(f"{name}:{bound:g}" for name, bound in self.bounds_ms.items())
        return f"good_request_fraction>={self.min_fraction:g} (goodput {pairs})"


def parse_goodput(text: str, min_fraction: float = DEFAULT_MIN_FRACTION) -> GoodputTarget:
    """The target of ``ttft:500 tpot:50`` (or ``ttft:500,tpot:50``).

    Raise ScenarioError naming the first malformed pair, unknown metric, repeated metric or
    non-positive bound, or a ``min_fraction`` outside (0, 1].
    """
    if not 0.0 < min_fraction <= 1.0:
        raise ScenarioError(f"--goodput-min: must be in (0, 1], got {min_fraction:g}")
    bounds: dict[str, float] = {}
    for raw in re.split(r"[,\s]+", text.strip()):
        if not raw:
            continue
        where = f"--goodput pair {raw!r}"
        match = _PAIR.match(raw)
        if match is None:
            raise ScenarioError(f"{where}: expected KEY:VALUE in ms, e.g. ttft:500")
        key = match["key"]
        if key not in GOODPUT_METRICS:
            raise ScenarioError(f"{where}: unknown metric; use {', '.join(GOODPUT_METRICS)}")
        if key in bounds:
            raise ScenarioError(f"{where}: {key} given twice")
        try:
            bound = float(match["bound"])
        except ValueError:
            raise ScenarioError(f"{where}: {match['bound']!r} is not a number") from None
        if not bound > 0:
            raise ScenarioError(f"{where}: the bound must be > 0 ms, got {bound:g}")
        bounds[key] = bound
    if not bounds:
        raise ScenarioError(f"--goodput {text!r}: no KEY:VALUE pair given")
    return GoodputTarget(bounds, min_fraction)
