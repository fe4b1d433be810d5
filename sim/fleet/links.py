"""The KV-transfer link of a disaggregated fleet: how long a prompt's KV takes to reach decode.

A prefill replica's GPUs each hold a shard of the prompt's KV and send it over their own NIC in
parallel (one NIC per GPU, as in the reference systems of ``sim/data/fleet_links.yaml``), so

    transfer_s = prompt_tokens × kv_bytes_per_token_per_gpu / link_bandwidth + latency_s,

with ``kv_bytes_per_token_per_gpu`` the prefill replica's per-GPU KV footprint (the memory plan's
figure: the model's KV bytes per token over min(TP, KV heads)).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import yaml
from numpy.typing import NDArray

from sim.fleet.config import LinkConfig


@dataclass(frozen=True)
class Link:
    """A per-GPU link: bandwidth, fixed latency, and where each figure came from."""

    bandwidth_bytes_per_s: float
    latency_s: float
    source: str

    def transfer_s(
        self, prompt_tokens: NDArray[np.int64], kv_bytes_per_token_per_gpu: float
    ) -> NDArray[np.float64]:
        """Seconds to move each prompt's KV shard across the link."""
        return (
            prompt_tokens.astype(np.float64) * kv_bytes_per_token_per_gpu
        ) / self.bandwidth_bytes_per_s + self.latency_s


@cache
def _table() -> dict[str, Any]:
    text = resources.files("sim").joinpath("data/fleet_links.yaml").read_text("utf-8")
    table: dict[str, Any] = yaml.safe_load(text)
    return table


def resolve_link(config: LinkConfig, gpu: str) -> Link:
    """The link in force: the scenario's figures over the shipped ones for ``gpu``."""
    table = _table()
    entry = table["links"].get(gpu, table["default"])
    sources = []
    if config.bandwidth_bytes_per_s is not None:
        bandwidth = config.bandwidth_bytes_per_s
        sources.append("bandwidth: fleet.disaggregation.link.bandwidth_bytes_per_s")
    else:
        bandwidth = float(entry["bandwidth_bytes_per_s"])
        sources.append(f"bandwidth: {entry['source']}")
    if config.latency_s is not None:
        latency = config.latency_s
        sources.append("latency: fleet.disaggregation.link.latency_s")
    else:
        latency = float(table["latency_s"])
        sources.append("latency: InfiniBand RC one-way send latency (sim/data/fleet_links.yaml)")
    return Link(bandwidth, latency, "; ".join(sources))
