"""Prefill/decode disaggregation: two stages of replicas and the KV hand-off between them.

A request is routed to a prefill replica, whose engine serves it as a one-token request (the
prompt's prefill emits the first token). When that token is committed, the request is offered to
the decode stage at ``first token + transfer_s`` (:mod:`sim.fleet.links`): the first token reaches
the client with the KV, through the decode replica, as SGLang's and vLLM's P/D proxies stream from
the decode side. The decode replica takes it with the prompt's KV in place and one token emitted,
so its first step computes that token's KV and emits the second; it never prefills the prompt
unless it preempts the request (then it recomputes, as vLLM does).

The decode stage's arrivals appear as prefills finish, so it knows them only up to a horizon: a
prefill not yet committed ends after its replica's clock (busy) or after the next arrival it
could take (idle), and its KV lands at least the shortest transfer later.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import simpy

from sim.engine.core import EngineCore
from sim.fleet.build import (
    Fleet,
    ReplicaGroup,
    add_replicas,
    build_groups,
    open_loop_arrivals,
    session_ids,
)
from sim.fleet.config import FleetConfig
from sim.fleet.links import Link, resolve_link
from sim.fleet.routers import build_router
from sim.fleet.stage import Stage
from sim.random_streams import RandomStreams
from sim.scenario import Scenario

IntArray = np.ndarray


def build_disaggregated(
    env: simpy.Environment,
    fleet: Fleet,
    scenario: Scenario,
    base_dir: Path,
    config: FleetConfig,
    streams: RandomStreams,
    progress: Callable[[int], None] | None,
    **build: Any,
) -> tuple[list[ReplicaGroup], np.ndarray, Link, np.ndarray]:
    """Add the prefill and decode stages and their replicas to ``fleet``; return the groups, the
    arrival times, the link and each request's transfer time.

    Raise ScenarioError naming the key path if a group cannot be built or the arrivals are
    closed-loop.
    """
    d = config.disaggregation
    assert d is not None
    prefill = build_groups(
        scenario, base_dir, d.prefill, "fleet.disaggregation.prefill", "prefill", **build
    )
    decode = build_groups(
        scenario, base_dir, d.decode, "fleet.disaggregation.decode", "decode", **build
    )
    arrivals = open_loop_arrivals(prefill)
    workload = prefill[0].simulation.workload
    sessions = session_ids(scenario, workload, streams)
    prompt = prefill[0].simulation.core.requests.prompt_tokens
    output = prefill[0].simulation.core.requests.output_tokens
    link = resolve_link(d.link, prefill[0].gpu)
    kv_per_gpu = max(g.simulation.memory.kv_bytes_per_token for g in prefill)
    transfer_s = link.transfer_s(prompt, kv_per_gpu)
    min_transfer_s = float(transfer_s.min()) if len(transfer_s) else 0.0
    order = np.argsort(arrivals, kind="stable")
    num_prefill = sum(g.count for g in prefill)
    num_decode = sum(g.count for g in decode)
    prefill_stage = Stage(
        "prefill",
        build_router(config.router, num_prefill, streams.stream("fleet.router.prefill"), sessions),
        order,
        arrivals[order],
    )

    def decode_known_until() -> float:
        # A prefill not yet committed ends after its replica's clock (busy) or after the next
        # arrival it could take (idle); its KV lands at least min_transfer_s later.
        safe = prefill_stage.safe_until_s()
        horizon = min(
            (r.core.clock_s if r.busy() else min(r.routed.next_at_s(), safe))
            for r in prefill_stage.replicas
        )
        return horizon + min_transfer_s

    decode_stage = Stage(
        "decode",
        build_router(config.router, num_decode, streams.stream("fleet.router.decode"), sessions),
        known_until=decode_known_until,
    )
    decode_stage.mean_gap_s = prefill_stage.mean_gap_s
    fleet.stages += [prefill_stage, decode_stage]
    first_token_at_s = np.full(len(prompt), np.nan)
    handed = transfer_s

    def on_prefill_finish(ids: IntArray, at_s: float) -> None:
        # The first token travels with the KV and reaches the client through the decode
        # replica (SGLang's and vLLM's P/D proxies stream from decode): TTFT includes the
        # transfer. A one-token request is done at the prefill replica.
        done_here = 0
        for request in ids.tolist():
            if output[request] > 1:
                delivered = at_s + float(handed[request])
                first_token_at_s[request] = delivered
                decode_stage.offer(delivered, request)
            else:
                done_here += 1
        if progress is not None and done_here:
            progress(done_here)

    def on_decode_release(core: EngineCore, ids: IntArray) -> None:
        core.resume_prefilled(ids, first_token_at_s[ids])

    add_replicas(
        env,
        fleet,
        prefill_stage,
        prefill,
        np.ones(len(prompt), np.int64),
        on_finish=on_prefill_finish,
    )
    add_replicas(env, fleet, decode_stage, decode, on_release=on_decode_release, progress=progress)
    return prefill + decode, arrivals, link, transfer_s
