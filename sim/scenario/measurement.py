"""The scenario's ``measurement`` section: the measurement window and the per-request SLO behind
goodput, and the longest latency bound an SLO may set.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from sim.inputs import SCHEMA_CONFIG
from sim.workload.config import MAX_REQUESTS

_STRICT = SCHEMA_CONFIG


#: A latency bound above a day (in ms) is not a serving SLO.
MAX_LATENCY_MS = 86_400_000.0


#: Per-request bounds ``vllm bench serve --goodput`` accepts (milliseconds).
GOODPUT_METRICS = ("ttft", "tpot", "e2el")
#: Share of requests a steady window drops at each end unless the scenario says otherwise.
DEFAULT_STEADY_TRIM_FRACTION = 0.1


class MeasurementConfig(BaseModel):
    """The measurement window and the per-request SLO behind goodput; the run always drains.

    ``window: full`` (the default) measures from the first measured arrival to the last finish,
    as ``vllm bench serve`` does. ``window: steady`` drops the first ``warmup_fraction`` and the
    last ``cooldown_fraction`` of requests (by arrival) and measures the requests that arrived
    between them, while arrivals still load the node: warm-up and drain are excluded.
    ``goodput`` bounds each request's TTFT, TPOT and end-to-end latency in ms, as
    ``vllm bench serve --goodput ttft:500 tpot:50`` does. ``percentile_metrics`` and
    ``metric_percentiles`` choose the percentile block of the run folder's ``vllm_bench.json``,
    as ``--percentile-metrics`` and ``--metric-percentiles`` do for the benchmark (its defaults:
    ``ttft, tpot, itl`` and ``99``). ``warmup_drained`` (closed-loop clients only) runs the
    ``warmup_requests`` as a phase of their own, as aiperf does: the clients send them, wait
    until every one has finished, then all send their first measured request at once (aiperf's
    ``CreditIssuingStrategy._execute_phases`` waits for the warm-up phase's credits to return
    before it starts the profiling phase; ai-dynamo/aiperf ``aiperf/timing``). Without it the
    clients go on from the warm-up requests to the measured ones without a pause.
    """

    model_config = _STRICT
    warmup_requests: int = Field(default=0, ge=0, le=MAX_REQUESTS)
    warmup_drained: bool = False
    window: Literal["full", "steady"] = "full"
    warmup_fraction: float | None = Field(default=None, ge=0, lt=0.5)
    cooldown_fraction: float | None = Field(default=None, ge=0, lt=0.5)
    goodput: dict[str, float] | None = None
    percentile_metrics: list[Literal["ttft", "tpot", "itl", "e2el"]] = Field(
        default=["ttft", "tpot", "itl"], min_length=1
    )
    metric_percentiles: list[float] = Field(default=[99.0], min_length=1)

    @field_validator("metric_percentiles")
    @classmethod
    def _percentiles_inside(cls, value: list[float]) -> list[float]:
        outside = [p for p in value if not 0 < p < 100]
        if outside:
            raise ValueError(f"each percentile must be in (0, 100); {outside[0]:g} is not")
        return value

    @model_validator(mode="after")
    def _window_keys(self) -> MeasurementConfig:
        if self.window == "full" and (
            self.warmup_fraction is not None or self.cooldown_fraction is not None
        ):
            raise ValueError("warmup_fraction and cooldown_fraction need window: steady")
        if self.goodput is not None:
            if not self.goodput:
                raise ValueError("goodput needs at least one of ttft, tpot, e2el")
            for key, bound in self.goodput.items():
                if key not in GOODPUT_METRICS:
                    raise ValueError(f"unknown goodput metric {key!r}; use {GOODPUT_METRICS}")
                if not 0 < bound <= MAX_LATENCY_MS:
                    raise ValueError(
                        f"goodput {key} must be > 0 and <= {MAX_LATENCY_MS:g} ms (a day), "
                        f"got {bound}"
                    )
        return self

    @property
    def trim_fractions(self) -> tuple[float, float]:
        """Shares of requests dropped at the start and the end (0, 0 for the full window)."""
        if self.window == "full":
            return 0.0, 0.0
        return (
            DEFAULT_STEADY_TRIM_FRACTION if self.warmup_fraction is None else self.warmup_fraction,
            DEFAULT_STEADY_TRIM_FRACTION
            if self.cooldown_fraction is None
            else self.cooldown_fraction,
        )
