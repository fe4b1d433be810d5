"""The per-replica table ``specsim run`` prints under a fleet's summary."""

from __future__ import annotations

from rich.table import Table

from sim.summary import FleetSummary


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def replica_table(fleet: FleetSummary) -> Table:
    """One row per replica of a fleet summary's ``fleet`` section: role, GPU, requests routed
    there, its latencies and KV peak."""
    title = (
        f"{fleet.shape} fleet: {fleet.num_replicas} replicas, {fleet.num_gpus} GPUs, "
        f"router {fleet.router}"
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
    for r in fleet.replicas:
        table.add_row(
            str(r.replica),
            r.role,
            f"{r.gpu} x{r.num_gpus}",
            str(r.num_routed),
            _ms(r.measures.ttft_ms.p99),
            _ms(r.measures.tpot_ms.p50),
            _ms(r.measures.e2e_latency_ms.p99),
            f"{r.measures.kv_cache_peak_usage:.3f}",
        )
    if fleet.link is not None:
        table.caption = (
            f"KV transfer: mean {fleet.kv_transfer_ms_mean:.2f} ms over "
            f"{fleet.link.bandwidth_bytes_per_s / 1e9:g} GB/s per GPU; latencies in ms"
        )
    else:
        table.caption = "latencies in ms"
    return table
