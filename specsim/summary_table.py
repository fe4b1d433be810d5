"""Readable terminal tables of run summaries."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from sim.summary import Summary


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def summary_table(summary: Summary) -> Table:
    """The headline figures of one run: throughput, latency percentiles, acceptance, KV."""
    table = Table(title=f"{summary.scenario} — method {summary.method}, seed {summary.seed}")
    table.add_column("metric")
    table.add_column("mean", justify="right")
    table.add_column("p50", justify="right")
    table.add_column("p90", justify="right")
    table.add_column("p99", justify="right")
    for d, label in (
        (summary.ttft_ms, "TTFT (ms)"),
        (summary.tpot_ms, "TPOT (ms)"),
        (summary.itl_ms, "ITL (ms)"),
        (summary.e2e_latency_ms, "E2E latency (ms)"),
    ):
        table.add_row(label, _fmt(d.mean, 2), _fmt(d.p50, 2), _fmt(d.p90, 2), _fmt(d.p99, 2))
    table.add_section()
    rows = [
        ("requests completed", f"{summary.num_completed} / {summary.num_requests}"),
        ("output throughput (tok/s)", _fmt(summary.output_throughput_tok_s)),
        ("request throughput (req/s)", _fmt(summary.request_throughput_req_s, 3)),
        ("total token throughput (tok/s)", _fmt(summary.total_token_throughput_tok_s)),
        ("mean acceptance length", _fmt(summary.mean_acceptance_length, 3)),
        ("draft acceptance rate", _fmt(summary.draft_acceptance_rate, 3)),
        ("mean batch size", _fmt(summary.mean_batch_size, 1)),
        ("KV cache peak usage", _fmt(summary.kv_cache_peak_usage, 3)),
        ("preemptions", _fmt(summary.num_preemptions)),
        ("engine steps", _fmt(summary.num_steps)),
        ("simulated time (s)", _fmt(summary.sim_duration_s, 1)),
        ("wall time (s)", _fmt(summary.wall_time_s, 2)),
    ]
    for label, value in rows:
        table.add_row(label, value, "", "", "")
    return table
