"""Service-level objectives: bounds on latency percentiles, parsed from text or a scenario.

A term reads ``<metric>_<stat>_ms<=VALUE`` (or ``<``), with the metric one of TTFT, TPOT, ITL and
end-to-end latency and the statistic one of the summary's ``mean``, ``p50``, ``p90``, ``p99``; it
is checked against ``summary.json``'s ``<metric>_ms.<stat>``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from sim.errors import ScenarioError
from sim.scenario import SLO_METRICS, SLO_STATS
from sim.summary import Summary

_TERM = re.compile(r"^(?P<key>[a-z0-9_]+)\s*(?P<op><=|<)\s*(?P<bound>[-+0-9.eE]+)$")


@dataclass(frozen=True)
class SloTerm:
    """One SLO bound: ``<metric>_<stat>_ms <= bound`` (or ``<``)."""

    metric: str
    stat: str
    bound_ms: float
    strict: bool = False

    @property
    def key(self) -> str:
        return f"{self.metric}_{self.stat}_ms"

    def holds(self, value_ms: float | None) -> bool:
        """Whether ``value_ms`` meets the bound; a missing value (no samples) does not."""
        if value_ms is None or math.isnan(value_ms):
            return False
        return value_ms < self.bound_ms if self.strict else value_ms <= self.bound_ms

    def __str__(self) -> str:
        return f"{self.key}{'<' if self.strict else '<='}{self.bound_ms:g}"


def _term(key: str, bound_ms: float, strict: bool, where: str) -> SloTerm:
    for metric in SLO_METRICS:
        for stat in SLO_STATS:
            if key == f"{metric}_{stat}_ms":
                if not bound_ms > 0:
                    raise ScenarioError(f"{where}: the bound must be > 0, got {bound_ms:g}")
                return SloTerm(metric, stat, bound_ms, strict)
    raise ScenarioError(
        f"{where}: unknown metric {key!r}; use <metric>_<stat>_ms with metric in "
        f"{', '.join(SLO_METRICS)} and stat in {', '.join(SLO_STATS)}"
    )


def parse_slo(text: str) -> list[SloTerm]:
    """The terms of ``ttft_p99_ms<=2000,tpot_p50_ms<50``.

    Raise ScenarioError naming the first malformed term, unknown metric or non-positive bound.
    """
    terms: list[SloTerm] = []
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        where = f"--slo term {part!r}"
        match = _TERM.match(part)
        if match is None:
            raise ScenarioError(f"{where}: expected <metric>_<stat>_ms<=VALUE")
        try:
            bound = float(match["bound"])
        except ValueError:
            raise ScenarioError(f"{where}: {match['bound']!r} is not a number") from None
        terms.append(_term(match["key"], bound, match["op"] == "<", where))
    if not terms:
        raise ScenarioError(f"--slo {text!r}: no term given")
    return terms


def slo_from_mapping(mapping: dict[str, float]) -> list[SloTerm]:
    """The terms of a scenario's ``slo:`` mapping (every bound inclusive)."""
    return [_term(key, float(bound), False, f"slo.{key}") for key, bound in mapping.items()]


def slo_value(summary: Summary, term: SloTerm) -> float | None:
    """The figure ``term`` bounds, read from a run's summary (None when it had no samples)."""
    value = summary.latency_stat_ms(term.metric, term.stat)
    return None if value is None else float(value)
