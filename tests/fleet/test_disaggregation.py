"""Prefill/decode disaggregation: the hand-off obeys its physics.

A request prefills on a prefill replica, its prompt's KV crosses the link in
``prompt_tokens × KV bytes per token per GPU / bandwidth + latency`` seconds, and its first token
reaches the client with that KV; so TTFT is at least the prefill time (one lone prefill step of its
prompt) plus the transfer time, and every later token comes from a decode replica after the
hand-off.
"""

from __future__ import annotations

import numpy as np

from sim.cost_model import StepShape
from sim.fleet.build import group_scenario
from sim.fleet.config import ReplicaGroupConfig
from sim.run import build_simulation
from tests.fleet.helpers import run, scenario

DISAGGREGATED = {
    "disaggregation": {
        "prefill": 1,
        "decode": [{"count": 2}],
        "link": {"bandwidth_bytes_per_s": 2.5e10, "latency_s": 1e-3},
    },
    "router": "least_outstanding",
}


def test_ttft_covers_prefill_and_transfer() -> None:
    result = run(DISAGGREGATED, arrival={"process": "poisson", "rate_per_s": 10})
    r = result.requests
    node = build_simulation(
        group_scenario(scenario(DISAGGREGATED), ReplicaGroupConfig(), "x"),
        __import__("pathlib").Path("."),
    )
    kv_per_gpu = node.memory.kv_bytes_per_token
    expected = r["prompt_tokens"] * kv_per_gpu / 2.5e10 + 1e-3
    handed = r["output_tokens"] > 1
    assert np.allclose(r["kv_transfer_s"][handed], expected[handed], rtol=1e-12)
    assert (r["kv_transfer_s"][~handed] == 0).all()
    prompt = r["prompt_tokens"].astype(np.int64)
    prefill_s = node.core.cost_model.step_time(
        StepShape(
            num_seqs=np.ones(len(prompt), dtype=np.int64),
            num_tokens=prompt,
            num_logit_tokens=np.ones(len(prompt), dtype=np.int64),
            kv_read_tokens=prompt,
            attention_pairs=prompt * (prompt + 1) / 2.0,
        )
    )
    ttft = r["first_token_at_s"] - r["arrival_at_s"]
    assert (ttft + 1e-9 >= prefill_s + r["kv_transfer_s"]).all()
    # The first token reaches the client exactly when the KV lands on the decode side.
    assert np.allclose(r["first_token_at_s"][handed], r["decode_arrival_at_s"][handed])
    # Later tokens come after the hand-off, from a decode replica.
    assert (r["finished_at_s"][handed] > r["decode_arrival_at_s"][handed]).all()
    assert set(np.unique(r["replica"][handed])) <= {1, 2}
    assert (r["prefill_replica"] == 0).all()


def test_disaggregated_tokens_are_conserved() -> None:
    result = run(DISAGGREGATED)
    r, steps = result.requests, result.steps
    assert not np.isnan(r["finished_at_s"]).any()
    # The prefill replica emits each request's first token; decode replicas emit the rest.
    prefill_emitted = steps["num_emitted_tokens"][steps["replica"] == 0].sum()
    decode_emitted = steps["num_emitted_tokens"][steps["replica"] > 0].sum()
    assert prefill_emitted == len(r["output_tokens"])
    assert decode_emitted == (r["output_tokens"] - 1).sum()
    # Decode replicas never prefill a prompt: their steps compute one token per new request.
    decode_prefill = steps["num_prefill_tokens"][steps["replica"] > 0].sum()
    assert decode_prefill == (r["output_tokens"] > 1).sum()
    roles = [p.role for p in result.summary.fleet.replicas]
    assert roles == ["prefill", "decode", "decode"]


def test_a_slower_link_delays_the_first_token() -> None:
    slow = {**DISAGGREGATED, "disaggregation": {**DISAGGREGATED["disaggregation"]}}
    slow["disaggregation"]["link"] = {"bandwidth_bytes_per_s": 1e9, "latency_s": 1e-3}
    fast, slower = run(DISAGGREGATED), run(slow)
    assert slower.summary.ttft_ms.mean > fast.summary.ttft_ms.mean
