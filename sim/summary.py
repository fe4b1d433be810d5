"""The summary of one run as a typed, frozen value: what ``summary.json`` holds, key for key.

:func:`sim.metrics.summarize` produces it from a run's records; the run adds its wall time and
version (and a fleet its ``fleet`` section) with :func:`dataclasses.replace`. Everything that
reads a summary (sweep tables, SLO checks, the recommender, the terminal table) reads named
fields instead of building key names from strings. The mapping form exists only at the edges:
:meth:`Summary.to_dict` is what ``summary.json`` and ``--json`` hold, :meth:`Summary.from_dict`
reads it back (the same bytes again), and :meth:`Summary.flat` is the one flat table row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

#: The latency metrics a summary holds a distribution of, as SLO terms name them.
LatencyMetric = Literal["ttft", "tpot", "itl", "e2e_latency"]
LATENCY_METRICS: tuple[LatencyMetric, ...] = ("ttft", "tpot", "itl", "e2e_latency")
#: The statistics of each distribution (docs/metrics.md): the mean and three percentiles.
STATS = ("mean", "p50", "p90", "p99")
#: What names the run rather than measures it: absent from a fleet replica's own summary.
IDENTITY_KEYS = ("scenario", "method", "seed")
#: Optional sections, each present whole or not at all, keyed by the field that says whether.
SECTIONS: dict[str, tuple[str, ...]] = {
    "measurement_window": ("measurement_window", "num_arrivals_in_window", "offered_rate_req_s"),
    "goodput_ms": (
        "goodput_ms",
        "num_good_requests",
        "good_request_fraction",
        "request_goodput_req_s",
    ),
    "fleet": ("fleet",),
    "wall_time_s": ("wall_time_s",),
    "specsim_version": ("specsim_version",),
}


@dataclass(frozen=True)
class DistributionMs:
    """Mean and percentiles of one latency in milliseconds; None where there were no samples."""

    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None

    @classmethod
    def from_mapping(cls, values: Mapping[str, float | None]) -> DistributionMs:
        """Read ``{"mean": ..., "p50": ..., "p90": ..., "p99": ...}``.

        Raise ValueError naming the statistics if the keys are not exactly :data:`STATS`.
        """
        if tuple(values) != STATS:
            raise ValueError(f"a latency distribution holds {STATS}, got {tuple(values)}")
        return cls(**{stat: values[stat] for stat in STATS})

    def stat(self, name: str) -> float | None:
        """The statistic ``name`` (one of :data:`STATS`). Raise ValueError for another name."""
        if name not in STATS:
            raise ValueError(f"unknown statistic {name!r}; known: {', '.join(STATS)}")
        value: float | None = getattr(self, name)
        return value

    def figure(self, name: str) -> float:
        """The statistic ``name`` as a number: NaN where there were no samples (a fit or a table
        then shows the gap). Raise ValueError for a name outside :data:`STATS`."""
        value = self.stat(name)
        return float("nan") if value is None else float(value)

    @classmethod
    def empty(cls) -> DistributionMs:
        """The distribution of no samples: every statistic None."""
        return cls(None, None, None, None)

    def as_dict(self) -> dict[str, float | None]:
        """The mapping ``summary.json`` holds."""
        return {stat: getattr(self, stat) for stat in STATS}


@dataclass(frozen=True)
class Summary:
    """One run's summary (docs/metrics.md defines every field).

    The optional fields come in sections (:data:`SECTIONS`), present only for runs that produce
    them: a steady measurement window (``measurement_window`` to ``offered_rate_req_s``), a
    goodput SLO (``goodput_ms`` to ``request_goodput_req_s``), a fleet (``fleet``: the
    fleet-wide figures and per-replica table), and the run's own ``wall_time_s`` and
    ``specsim_version`` (absent from goldens). A section is present when its first field is not
    None; within one, a field may be None (``good_request_fraction`` with nothing measured).
    """

    scenario: str
    method: str
    seed: int
    num_requests: int
    num_completed: int
    sim_duration_s: float
    measurement_window_s: tuple[float, float]
    num_steps: int
    output_throughput_tok_s: float
    request_throughput_req_s: float
    total_token_throughput_tok_s: float
    ttft_ms: DistributionMs
    tpot_ms: DistributionMs
    itl_ms: DistributionMs
    e2e_latency_ms: DistributionMs
    mean_acceptance_length: float
    draft_acceptance_rate: float | None
    mean_batch_size: float
    mean_tokens_per_step: float
    kv_cache_peak_usage: float
    num_preemptions: int
    prefix_cache_hit_rate: float | None
    measurement_window: str | None = None
    num_arrivals_in_window: int | None = None
    offered_rate_req_s: float | None = None
    goodput_ms: Mapping[str, float] | None = None
    num_good_requests: int | None = None
    good_request_fraction: float | None = None
    request_goodput_req_s: float | None = None
    fleet: FleetSummary | None = None
    wall_time_s: float | None = None
    specsim_version: str | None = None

    @classmethod
    def from_dict(cls, summary: Mapping[str, Any]) -> Summary:
        """Read a summary mapping (``summary.json`` loaded, or :meth:`to_dict`'s output).

        Raise ValueError naming the key if it holds a key no summary has, lacks one every
        summary has, or holds part of an optional section.
        """
        known = {f.name for f in fields(cls)}
        unknown = [key for key in summary if key not in known]
        if unknown:
            raise ValueError(f"summary: unknown key {unknown[0]!r}")
        for section in SECTIONS.values():
            held = [key for key in section if key in summary]
            if held and len(held) != len(section):
                missing = next(key for key in section if key not in summary)
                raise ValueError(f"summary: {held[0]!r} comes with {missing!r}, which is missing")
        values: dict[str, Any] = dict(summary)
        for metric in LATENCY_METRICS:
            key = f"{metric}_ms"
            if key in values:
                values[key] = DistributionMs.from_mapping(values[key])
        if "measurement_window_s" in values:
            start, end = values["measurement_window_s"]
            values["measurement_window_s"] = (start, end)
        if "fleet" in values:
            identity = {key: summary.get(key) for key in IDENTITY_KEYS}
            values["fleet"] = FleetSummary.from_dict(values["fleet"], identity)
        try:
            return cls(**values)
        except TypeError as error:
            raise ValueError(f"summary: {error}") from None

    def latency_ms(self, metric: str) -> DistributionMs:
        """The distribution of ``metric`` (one of :data:`LATENCY_METRICS`).

        Raise ValueError for another metric.
        """
        if metric not in LATENCY_METRICS:
            raise ValueError(f"unknown metric {metric!r}; known: {', '.join(LATENCY_METRICS)}")
        distribution: DistributionMs = getattr(self, f"{metric}_ms")
        return distribution

    def latency_stat_ms(self, metric: str, stat: str) -> float | None:
        """One statistic of one latency, e.g. ``("tpot", "p90")``: what an SLO term bounds.

        Raise ValueError for an unknown metric or statistic.
        """
        return self.latency_ms(metric).stat(stat)

    def written_keys(self) -> tuple[str, ...]:
        """The keys ``summary.json`` holds for this summary, in their order."""
        absent = {
            key
            for head, section in SECTIONS.items()
            if getattr(self, head) is None
            for key in section
        }
        return tuple(f.name for f in fields(self) if f.name not in absent)

    def to_dict(self) -> dict[str, Any]:
        """The mapping ``summary.json`` holds: :meth:`written_keys` in order, distributions as
        mappings, the window as a two-item list."""
        out: dict[str, Any] = {}
        for key in self.written_keys():
            value = getattr(self, key)
            if isinstance(value, DistributionMs):
                value = value.as_dict()
            elif key == "measurement_window_s":
                value = list(value)
            elif isinstance(value, FleetSummary):
                value = value.to_dict()
            elif isinstance(value, Mapping):
                value = dict(value)
            out[key] = value
        return out

    def measures(self) -> dict[str, Any]:
        """:meth:`to_dict` without the run's name, method and seed: a fleet replica's entry."""
        return {k: v for k, v in self.to_dict().items() if k not in IDENTITY_KEYS}

    def flat(self) -> dict[str, Any]:
        """The summary as one flat table row: ``ttft_ms.p99`` becomes ``ttft_p99_ms``, a goodput
        bound ``goodput_ms.ttft`` becomes ``goodput_ttft_ms``, the window becomes
        ``measurement_start_s`` and ``measurement_end_s``, and the fleet section one JSON cell."""
        row: dict[str, Any] = {}
        for key in self.written_keys():
            value = getattr(self, key)
            if isinstance(value, DistributionMs):
                metric = _METRIC_OF_KEY[key]
                for stat, figure in value.as_dict().items():
                    row[f"{metric}_{stat}_ms"] = figure
            elif key == "goodput_ms" and value is not None:
                for metric, bound in value.items():
                    row[f"goodput_{metric}_ms"] = bound
            elif key == "measurement_window_s":
                row["measurement_start_s"], row["measurement_end_s"] = value
            elif isinstance(value, FleetSummary):
                row[key] = json.dumps(value.to_dict())
            else:
                row[key] = value
        return row


@dataclass(frozen=True)
class ReplicaSummary:
    """One replica of a fleet: where it sits and what it measured on the requests it served
    (its own :class:`Summary`, named as the run; a decode replica's TTFT is empty, the fleet's
    being the one its clients see)."""

    replica: int
    role: str
    group: str
    gpu: str
    num_gpus: int
    num_kv_blocks: int
    num_routed: int
    measures: Summary

    def to_dict(self) -> dict[str, Any]:
        """The replica's entry in ``summary.json``: its place, then its measures."""
        head = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "measures"}
        return {**head, **self.measures.measures()}


@dataclass(frozen=True)
class FleetLink:
    """The link a disaggregated fleet moves KV over, per GPU, and where its figures come from."""

    bandwidth_bytes_per_s: float
    latency_s: float
    source: str


@dataclass(frozen=True)
class FleetSummary:
    """A fleet run's ``fleet`` section: its shape and router, size, and each replica's summary;
    a disaggregated fleet adds its KV link and the mean KV transfer time (None if none moved)."""

    shape: str
    router: str
    num_replicas: int
    num_gpus: int
    replicas: tuple[ReplicaSummary, ...]
    link: FleetLink | None = None
    kv_transfer_ms_mean: float | None = None

    @classmethod
    def from_dict(cls, fleet: Mapping[str, Any], identity: Mapping[str, Any]) -> FleetSummary:
        """Read a ``fleet`` section; ``identity`` names the run (each replica's summary takes it).

        Raise ValueError naming the key if the section or a replica's entry does not read.
        """
        try:
            values = dict(fleet)
            head = {f.name for f in fields(ReplicaSummary)} - {"measures"}
            replicas = []
            for entry in values.pop("replicas"):
                place = {key: entry[key] for key in entry if key in head}
                measures = {key: entry[key] for key in entry if key not in head}
                summary = Summary.from_dict({**identity, **measures})
                replicas.append(ReplicaSummary(**place, measures=summary))
            link = values.pop("link", None)
            return cls(
                **values,
                replicas=tuple(replicas),
                link=FleetLink(**link) if link is not None else None,
            )
        except (KeyError, TypeError) as error:
            raise ValueError(f"summary: fleet: {error}") from None

    def to_dict(self) -> dict[str, Any]:
        """The section as ``summary.json`` holds it (the link and transfer time only when the
        fleet has a link)."""
        out: dict[str, Any] = {
            "shape": self.shape,
            "router": self.router,
            "num_replicas": self.num_replicas,
            "num_gpus": self.num_gpus,
            "replicas": [replica.to_dict() for replica in self.replicas],
        }
        if self.link is not None:
            out["link"] = {f.name: getattr(self.link, f.name) for f in fields(self.link)}
            out["kv_transfer_ms_mean"] = self.kv_transfer_ms_mean
        return out


_METRIC_OF_KEY = {f"{metric}_ms": metric for metric in LATENCY_METRICS}
