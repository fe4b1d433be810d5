"""The markdown report ``tools/fit_kernels.py`` prints and ``docs/kernels.md`` shows verbatim."""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.kernels import AllReduceTable
from tools.kernel_collectives import TableCheck

#: Message sizes of the all-reduce summary table: a decode step's activations up to a prefill's.
PROBE_BYTES = (16 * 1024, 256 * 1024, 1024**2, 16 * 1024**2)
UNITS = {"floor_s": 1e6, "gemm_floor_s": 1e6, "per_seq_kv_head_s": 1e9, "per_token_head_s": 1e9}
UNIT_NAMES = {
    "floor_s": "floor µs",
    "gemm_floor_s": "floor µs",
    "per_seq_kv_head_s": "per seq·kv-head ns",
    "per_token_head_s": "per token·head ns",
}


def _pct(value: float) -> str:
    return f"{100 * value:+.1f} %" if value < 0 else f"{100 * value:.1f} %"


def _size(b: float) -> str:
    return f"{b / 1024**2:g} MiB" if b >= 1024**2 else f"{b / 1024:g} KiB"


def _allreduce(gpu: str, file: dict[str, Any], checks: list[TableCheck]) -> list[str]:
    lines = [
        f"#### {gpu}: all-reduce (µs per call)",
        "",
        "| mode | TP | "
        + " | ".join(_size(b) for b in PROBE_BYTES)
        + " | small-message latency [95 % CI] | large-message GB/s [range] "
        "| in-sample max err | held-out mean / max err |",
        "|---|---|" + "---|" * len(PROBE_BYTES) + "---|---|---|---|",
    ]
    by_key = {(c.mode, c.tp): c for c in checks}
    for mode, entry in file.get("allreduce", {}).items():
        for tp, table in entry["tp"].items():
            t = AllReduceTable(
                tp, np.asarray(table["message_bytes"], float), np.asarray(table["latency_s"], float)
            )
            probes = " | ".join(f"{1e6 * v:.1f}" for v in t(np.asarray(PROBE_BYTES, float)))
            s, c = table["summary"], by_key[(mode, tp)]
            lo, hi = s["small_message_latency_ci95"]
            blo, bhi = s["large_message_range"]
            lines.append(
                f"| {mode} | {tp} | {probes} | {1e6 * s['small_message_latency_s']:.1f} "
                f"[{1e6 * lo:.1f}, {1e6 * hi:.1f}] | {s['large_message_bytes_per_s'] / 1e9:.0f} "
                f"[{blo / 1e9:.0f}, {bhi / 1e9:.0f}] | {_pct(c.in_sample_max_abs)} | "
                f"{_pct(c.held_out_mean_abs)} / {_pct(c.held_out_max_abs)} |"
            )
    return [*lines, ""]


def _fits(gpu: str, file: dict[str, Any]) -> list[str]:
    lines = [
        f"#### {gpu}: fitted kernel models",
        "",
        "| kernel | dtype | parameters [95 % CI] | rows | in-sample mean / p90 abs err "
        "| held-out mean / p90 abs err |",
        "|---|---|---|---|---|---|",
    ]
    for section in ("moe", "gemm", "decode_attention", "prefill_attention"):
        for dtype, e in file.get(section, {}).items():
            params = []
            for name, (lo, hi) in e["ci95"].items():
                scale = UNITS.get(name, 1.0)
                label = UNIT_NAMES.get(name, name)
                params.append(f"{label} {e[name] * scale:.4g} [{lo * scale:.4g}, {hi * scale:.4g}]")
            a = e["agreement"]
            lines.append(
                f"| {section} | {dtype} | {'; '.join(params)} | {e['num_rows']} | "
                f"{_pct(a['in_sample_mean_abs'])} / {_pct(a['in_sample_p90_abs'])} | "
                f"{_pct(a['held_out_mean_abs'])} / {_pct(a['held_out_p90_abs'])} |"
            )
    return [*lines, ""]


def _table(title: str, rows: list[dict[str, Any]], held: bool = True) -> list[str]:
    head = "| rows | in-sample mean err | in-sample mean abs err |"
    if held:
        head += " held-out mean err | held-out mean abs err |"
    else:  # nothing was fitted on these rows
        head = "| rows | out-of-sample mean err | out-of-sample mean abs err |"
    lines = [f"{title}", "", "| group " + head, "|---" * (head.count("|")) + "|"]
    for r in rows:
        cells = f"| {r['label']} | {r['rows']} | {_pct(r['in_mean'])} | {_pct(r['in_mean_abs'])} |"
        if held:
            cells += f" {_pct(r['out_mean'])} | {_pct(r['out_mean_abs'])} |"
        lines.append(cells)
    return [*lines, ""]


def _moe(gpu: str, report: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for dtype, r in report.items():
        lines += _table(
            f"#### {gpu}: fused MoE {dtype}, by model shape (held out: that shape)", r["by_shape"]
        )
        lines += _table(f"#### {gpu}: fused MoE {dtype}, by tokens", r["by_tokens"])
        lines += _table(f"#### {gpu}: fused MoE {dtype}, by parallelism", r["by_parallel"])
        lines += [
            f"#### {gpu}: fused MoE {dtype}, balanced rows priced with uniform routing",
            "",
            "| tokens | rows | mean err | mean abs err |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {u['label']} | {u['rows']} | {_pct(u['mean'])} | {_pct(u['mean_abs'])} |"
            for u in r["uniform_routing"]
        ]
        lines += [
            "",
            f"#### {gpu}: fused MoE {dtype}, power-law routing",
            "",
            "| alpha | tokens | rows | median power-law / balanced | model mean err |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {p['alpha']} | {p['label']} | {p['rows']} | {p['median_ratio']:.3f} | "
            f"{_pct(p['model_mean'])} |"
            for p in r["power_law"]
        ]
        lines.append("")
    return lines


def render_report(report: dict[str, Any]) -> str:
    """Every GPU's tables, in the order docs/kernels.md shows them."""
    lines: list[str] = []
    for gpu, r in report.items():
        file = r["file"]
        if r["allreduce"]:
            lines += _allreduce(gpu, file, r["allreduce"])
        if any(file.get(s) for s in ("moe", "gemm", "decode_attention", "prefill_attention")):
            lines += _fits(gpu, file)
        lines += _moe(gpu, r["moe"])
        for dtype, g in r["gemm"].items():
            if dtype == "bf16_check":
                a, refit = g["all"], g["refit_for_comparison"]
                lines += _table(
                    f"#### {gpu}: shipped bf16 efficiency vs {g['rows']} bf16 GEMM rows (out of "
                    f"sample: all {_pct(a['mean'])} mean, {_pct(a['mean_abs'])} mean abs; a refit "
                    f"would give bandwidth {refit['bandwidth']}, flops {refit['flops']}, "
                    f"roofline_p {refit['roofline_p']}, floor {refit['floor_us']} µs)",
                    g["by_m"],
                    held=False,
                )
            else:
                lines += _table(
                    f"#### {gpu}: GEMM {dtype}, by m (held out: 5 folds of (n, k))", g["by_m"]
                )
        for phase in ("decode_attention", "prefill_attention"):
            for kv, a in r.get(phase, {}).items():
                lines += _table(f"#### {gpu}: {phase} kv {kv}, by batch", a["by_batch"])
                lines += _table(f"#### {gpu}: {phase} kv {kv}, by length", a["by_length"])
    return "\n".join(lines).rstrip() + "\n"
