"""The per-replica table ``specsim run`` prints under a fleet's summary."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.table import Table


def _ms(distribution: dict[str, float | None], stat: str) -> str:
    value = distribution.get(stat)
    return "-" if value is None else f"{value:,.1f}"


def replica_table(fleet: Mapping[str, Any]) -> Table:
    """One row per replica of a fleet summary's ``fleet`` section: role, GPU, requests routed
    there, its latencies and KV peak."""
    title = (
        f"{fleet['shape']} fleet: {fleet['num_replicas']} replicas, {fleet['num_gpus']} GPUs, "
        f"router {fleet['router']}"
    )
    table = Table(title=title)
    for label in (
        "replica",
        "role",
        "GPU",
        "requests",
        "TTFT p99",
        "TPOT p50",
        "E2E p99",
        "KV peak",
    ):
        table.add_column(label, justify="left" if label in ("role", "GPU") else "right")
    for r in fleet["replicas"]:
        table.add_row(
            str(r["replica"]),
            r["role"],
            f"{r['gpu']} x{r['num_gpus']}",
            str(r["num_routed"]),
            _ms(r["ttft_ms"], "p99"),
            _ms(r["tpot_ms"], "p50"),
            _ms(r["e2e_latency_ms"], "p99"),
            f"{r['kv_cache_peak_usage']:.3f}",
        )
    if "link" in fleet:
        table.caption = (
            f"KV transfer: mean {fleet['kv_transfer_ms_mean']:.2f} ms over "
            f"{fleet['link']['bandwidth_bytes_per_s'] / 1e9:g} GB/s per GPU; latencies in ms"
        )
    else:
        table.caption = "latencies in ms"
    return table
