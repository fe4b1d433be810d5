"""A fleet's records: each request's row taken from the replica(s) that served it, and summaries.

The fleet-wide summary has a node's keys, computed by the same :func:`sim.metrics.summarize` from
all replicas' request rows and step rows, except two that do not add up across replicas:
``sim_duration_s`` is the latest replica's last step end and ``kv_cache_peak_usage`` is the
highest of the replicas' own peaks (their pools may differ). ``fleet`` adds the router, the shape,
and each replica's own summary. ``requests.csv`` gains ``replica`` (the replica that emitted the
last token) and, disaggregated, ``prefill_replica``, ``decode_arrival_at_s`` and ``kv_transfer_s``;
there a request's first token reaches the client with its KV, at ``decode_arrival_at_s``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from sim import __version__
from sim.metrics import summarize
from sim.run import REQUEST_COLUMNS, ScenarioResult, resolved_document
from sim.scenario import Scenario
from sim.summary import DistributionMs, FleetLink, FleetSummary, ReplicaSummary

if TYPE_CHECKING:
    from sim.fleet.build import ReplicaGroup
    from sim.fleet.config import FleetConfig
    from sim.fleet.links import Link
    from sim.fleet.replica import Replica
    from sim.fleet.stage import Stage

#: Columns of a disaggregated request that come from its decode replica (the rest: prefill).
DECODE_COLUMNS = (
    "first_token_at_s",
    "finished_at_s",
    "num_decode_steps",
    "num_drafted",
    "num_accepted",
)


def _assignment(stage: Stage, num_requests: int, offset: int) -> np.ndarray:
    out = np.full(num_requests, -1, dtype=np.int64)
    if stage.routed:
        ids = np.fromiter(stage.routed.keys(), dtype=np.int64, count=len(stage.routed))
        where = np.fromiter(stage.routed.values(), dtype=np.int64, count=len(stage.routed))
        out[ids] = where + offset
    return out


def _gather(replicas: list[Replica], assigned: np.ndarray, name: str) -> np.ndarray:
    first = getattr(replicas[0].core.requests, name)
    out = np.full(len(assigned), np.nan) if first.dtype.kind == "f" else np.zeros_like(first)
    for replica in replicas:
        mask = assigned == replica.index
        out[mask] = getattr(replica.core.requests, name)[mask]
    return out


class FleetRecords:
    """Every request's merged row, every replica's steps, and who served what."""

    def __init__(
        self,
        stages: list[Stage],
        replicas: list[Replica],
        num_requests: int,
        transfer_s: np.ndarray | None,
    ) -> None:
        self.replicas = replicas
        first = stages[0]
        self.assigned = _assignment(first, num_requests, first.replicas[0].index)
        self.requests: dict[str, np.ndarray] = {}
        if len(stages) == 1:
            for name in REQUEST_COLUMNS:
                self.requests[name] = _gather(replicas, self.assigned, name)
            self.requests["replica"] = self.assigned
            return
        decode = stages[1]
        decode_assigned = _assignment(decode, num_requests, decode.replicas[0].index)
        for name in REQUEST_COLUMNS:
            column = _gather(first.replicas, self.assigned, name)
            if name in DECODE_COLUMNS or name == "num_preemptions":
                later = _gather(decode.replicas, decode_assigned, name)
                went = decode_assigned >= 0
                if name == "num_preemptions":
                    column = column + later
                else:
                    column[went] = later[went]
            if name == "output_tokens":
                column = decode.replicas[0].core.requests.output_tokens.copy()
            self.requests[name] = column
        self.requests["replica"] = np.where(decode_assigned >= 0, decode_assigned, self.assigned)
        self.requests["prefill_replica"] = self.assigned
        self.requests["decode_arrival_at_s"] = _gather(
            decode.replicas, decode_assigned, "arrival_at_s"
        )
        assert transfer_s is not None
        self.requests["kv_transfer_s"] = np.where(decode_assigned >= 0, transfer_s, 0.0)

    def steps(self) -> dict[str, np.ndarray]:
        """Every replica's step rows, replica by replica, with a ``replica`` column."""
        parts = [r.core.recorder.columns() for r in self.replicas]
        out = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
        out["replica"] = np.concatenate(
            [
                np.full(len(p["start_at_s"]), r.index, dtype=np.int32)
                for r, p in zip(self.replicas, parts, strict=True)
            ]
        )
        return out

    def irregular_itl(self) -> tuple[np.ndarray, np.ndarray]:
        pairs = [r.core.recorder.irregular_itl() for r in self.replicas]
        return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])


def _replica_summary(
    replica: Replica, records: FleetRecords, warmup: int, scenario: Scenario
) -> ReplicaSummary:
    core = replica.core
    served = np.flatnonzero(
        (records.requests["replica"] == replica.index)
        | (records.requests.get("prefill_replica", records.assigned) == replica.index)
    )
    served = served[served >= warmup]
    requests = {name: getattr(core.requests, name)[served] for name in REQUEST_COLUMNS}
    irregular, irregular_at = core.recorder.irregular_itl()
    group: ReplicaGroup = replica.group  # type: ignore[attr-defined]
    summary = summarize(
        requests,
        core.recorder.columns(),
        irregular,
        irregular_at,
        0,
        core.kv.num_blocks,
        scenario=scenario.name,
        method=scenario.speculation.method,
        seed=scenario.seed,
    )
    if group.role == "decode":
        # A decode replica's requests arrive with their first token: TTFT is the fleet's.
        summary = replace(summary, ttft_ms=DistributionMs.empty())
    return ReplicaSummary(
        replica=replica.index,
        role=group.role,
        group=group.key_path,
        gpu=group.gpu,
        num_gpus=group.num_gpus,
        num_kv_blocks=core.kv.num_blocks,
        num_routed=replica.num_routed,
        measures=summary,
    )


def fleet_result(
    scenario: Scenario,
    config: FleetConfig,
    groups: list[ReplicaGroup],
    records: FleetRecords,
    link: Link | None,
    wall_time_s: float,
) -> ScenarioResult:
    """The fleet-wide result: summary (a node's keys plus ``fleet``), records, resolved scenario."""
    warmup = scenario.measurement.warmup_requests
    steps = records.steps()
    irregular, irregular_at = records.irregular_itl()
    per_replica = [_replica_summary(r, records, warmup, scenario) for r in records.replicas]
    fleet_wide = summarize(
        records.requests,
        steps,
        irregular,
        irregular_at,
        warmup,
        1,
        scenario=scenario.name,
        method=scenario.speculation.method,
        seed=scenario.seed,
    )
    fleet = FleetSummary(
        shape="colocated" if config.disaggregation is None else "disaggregated",
        router=config.router.policy,
        num_replicas=len(records.replicas),
        num_gpus=sum(g.count * g.num_gpus for g in groups),
        replicas=tuple(per_replica),
    )
    if link is not None:
        moved = records.requests["kv_transfer_s"][records.requests["kv_transfer_s"] > 0]
        fleet = replace(
            fleet,
            link=FleetLink(link.bandwidth_bytes_per_s, link.latency_s, link.source),
            kv_transfer_ms_mean=float(moved.mean() * 1e3) if len(moved) else None,
        )
    summary = replace(
        fleet_wide,
        sim_duration_s=max(r.measures.sim_duration_s for r in per_replica),
        kv_cache_peak_usage=max(r.measures.kv_cache_peak_usage for r in per_replica),
        fleet=fleet,
        wall_time_s=wall_time_s,
        specsim_version=__version__,
    )
    first = groups[0].simulation
    resolved = resolved_document(scenario, first.engine)
    resolved["derived"] = {
        "fleet": [
            {
                "group": g.key_path,
                "role": g.role,
                "count": g.count,
                "gpu": g.gpu,
                "num_gpus": g.num_gpus,
                "kv_num_blocks": g.simulation.memory.num_blocks,
                "kv_bytes_per_token_per_gpu": g.simulation.memory.kv_bytes_per_token,
                "strategy": g.simulation.strategy.describe(),
            }
            for g in groups
        ]
    }
    return ScenarioResult(summary, records.requests, steps, resolved, first.memory)
