"""``specsim plan``: the highest request rate each method sustains under an SLO, with the nodes
and cost to serve a target rate, and the probe progress and tables it shows.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from specsim.cli_options import ForceOpt, ScenarioArg, SetOpt
from specsim.multirun_commands import _fmt, _inputs, load_document


def _rate_list(values: list[float | None] | None) -> str:
    return "/".join("-" if v is None else f"{v:.3g}" for v in values) if values else "-"


def plan_table(rows: list[dict[str, Any]], title: str, winner: str | None) -> Table:
    """The capacity plan as a terminal table: one row per method."""
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    labels = ("method", "max req/s", "first above", "interval", "per seed", "served", "stable",
              "nodes", "$/M tok")  # fmt: skip
    for label in labels:
        table.add_column(
            label,
            justify="left" if label == "method" else "right",
            no_wrap=True,
            min_width=len(label),
        )
    for row in rows:
        name = f"{row['method']} *" if row["method"] == winner else row["method"]
        status = row["status"]
        seeds = _rate_list(row.get("per_seed_max_rate_per_s"))
        if not row.get("max_rate_per_s"):
            text = {"unsupported": "not run", "no_stable_rate": "no stable rate"}.get(
                status, status
            )
            table.add_row(name, text, "", "", seeds, "", "", "", "")
            continue
        served = row.get("served_rate_per_seed_req_s") or []
        offered = row.get("offered_rate_per_seed_req_s") or []
        shares = [s / o for s, o in zip(served, offered, strict=True) if o]
        high = row.get("interval_high_per_s")
        above, resolution = row.get("first_rate_above_per_s"), row.get("resolution")
        table.add_row(
            name,
            _fmt(row["max_rate_per_s"], 2) + (" (unbounded)" if status == "unbounded" else ""),
            f"{_fmt(above, 2)} (+{resolution:.0%})" if above and resolution is not None else "-",
            f"[{_fmt(row.get('interval_low_per_s'), 2)}, {_fmt(high, 2) if high else 'inf'}]",
            seeds,
            f"{min(shares):.1%}" if shares else "-",
            str(row.get("stability_at_max", "-")),
            _fmt(row.get("nodes_needed"))
            if row.get("nodes_needed") is not None
            else "~" + _fmt(row.get("nodes_estimate"))
            if row.get("nodes_estimate")
            else "-",
            _fmt(row.get("cost_per_million_output_tokens_usd"), 3),
        )
    table.caption = (
        "* winner. max: highest probed rate that held in every seed; first above: lowest that "
        "failed (+ the resolution; rates between were undecided at the longest runs); "
        "interval: \\[max, higher of "
        "the first failing rate and the best seed's]; per seed: each seed's highest rate; "
        "served: lowest served / offered share among seeds at the max; nodes: verified by "
        "fleet runs at the target rate, ~N = ceil(target / max) unverified"
    )
    return table


def checks_table(rows: list[dict[str, Any]]) -> Table:
    """Each method's checks at its max rate: per seed, the estimate and its 90% interval."""
    table = Table(title="checks at the max rate (per seed: value [90% interval])",
                  box=box.SIMPLE_HEAD, pad_edge=False)  # fmt: skip
    table.add_column("method", no_wrap=True, min_width=6)
    table.add_column("check", no_wrap=True, min_width=5)
    table.add_column("per seed", overflow="fold")
    for row in rows:
        for key, values in row.items():
            if not key.endswith("_at_max") or key.endswith("interval_at_max"):
                continue
            intervals = row.get(key.removesuffix("_at_max") + "_interval_at_max")
            if not isinstance(values, list) or intervals is None:
                continue
            cells = [
                f"{_num(v)} [{_num(lo)}, {_num(hi)}]"
                for v, (lo, hi) in zip(values, intervals, strict=True)
            ]
            table.add_row(str(row["method"]), key.removesuffix("_at_max"), "  ".join(cells))
    return table


def plan_progress(plans: list[Any]) -> tuple[int, int, str]:
    """Probes finished, an estimate of all the probes the search will take, and what each
    method is probing.

    A bracket ``[lo, hi]`` still needs about ``log2((hi - lo) / (tolerance * hi))`` bisections;
    a method not yet bracketed is taken to need one more doubling (or halving) and then the
    bisections of a factor-2 bracket. The estimate is exact once every method is bracketed.
    """
    done = total = 0
    parts = []
    for plan in plans:
        search = plan.search
        done += len(plan.probes)
        total += len(plan.probes)
        if plan.reason is not None or (plan.current is None and search.next_rate() is None):
            parts.append(f"{plan.method} done")
            continue
        lo, hi, tol = search.holds_at, search.fails_at, search.tolerance
        if lo is not None and hi is not None:
            remaining = max(1, math.ceil(math.log2(max((hi - lo) / (tol * hi), 1.0))))
        else:
            remaining = 1 + math.ceil(math.log2(0.5 / tol))
        total += remaining
        rate = plan.current.rate_per_s if plan.current is not None else search.next_rate()
        parts.append(f"{plan.method} at {rate:.3g} req/s")
    return done, total, ", ".join(parts)


def _num(value: float | None) -> str:
    """A plain number, never in scientific notation (as the HTML report shows it)."""
    from reports.render.document import format_cell

    return format_cell(None if value is None else float(value))


def register(app: typer.Typer) -> None:
    """Add ``plan`` to ``app``."""
    from specsim.console import console, err_console, user_errors

    @app.command()
    @user_errors
    def plan(
        out: Annotated[Path, typer.Option("--out", help="Output folder.")],
        scenario: ScenarioArg = None,
        slo: Annotated[
            str | None,
            typer.Option("--slo", help="e.g. 'ttft_p99_ms<=2000,tpot_p50_ms<=50'; default: slo:"),
        ] = None,
        methods: Annotated[
            str | None,
            typer.Option("--methods", help="Methods to plan (default: none and the scenario's)."),
        ] = None,
        target_qps: Annotated[
            float | None, typer.Option("--target-qps", min=0.0, help="Rate to size nodes for.")
        ] = None,
        gpu_hour_usd: Annotated[
            float | None, typer.Option("--gpu-hour-usd", min=0.0, help="Price of one GPU-hour.")
        ] = None,
        seeds: Annotated[
            int, typer.Option("--seeds", min=1, help="Seeds per probed rate; all must hold.")
        ] = 3,
        requests: Annotated[
            int | None,
            typer.Option("--requests", min=300, help="Requests in a probe's first run (2000)."),
        ] = None,
        max_requests: Annotated[
            int | None,
            typer.Option(
                "--max-requests",
                min=300,
                help="Longest run of an undecided probe (10x --requests).",
            ),
        ] = None,
        goodput: Annotated[
            str | None,
            typer.Option(
                "--goodput",
                help="Per-request SLO in ms as vllm bench serve takes it, e.g. 'ttft:500 tpot:50'.",
            ),
        ] = None,
        goodput_min: Annotated[
            float | None,
            typer.Option(
                "--goodput-min", help="Share of requests that must meet --goodput (0.99)."
            ),
        ] = None,
        tolerance: Annotated[
            float, typer.Option("--tolerance", min=0.001, max=0.5, help="Relative bracket width.")
        ] = 0.05,
        workers: Annotated[
            int | None, typer.Option("--workers", min=1, help="Local processes (default: cores).")
        ] = None,
        set_: SetOpt = None,
        force: ForceOpt = False,
    ) -> None:
        """The highest request rate each method sustains under the SLO, nodes and cost."""
        from reports.capacity import plan_capacity
        from reports.plan_output import PLAN_CSV, PLAN_JSON, PROBES_CSV
        from reports.progress import interrupted_line, item_progress
        from sim.output import check_output_folder

        document, base_dir, source = load_document(scenario, set_ or [])
        check_output_folder(
            out, force=force, writes=(PLAN_JSON, PLAN_CSV, PROBES_CSV), inputs=_inputs(scenario)
        )
        with item_progress(1, "plan: probes", err_console) as progress:
            result = plan_capacity(
                document,
                base_dir,
                source,
                slo_text=slo,
                methods_text=methods,
                target_qps=target_qps,
                gpu_hour_usd=gpu_hour_usd,
                num_seeds=seeds,
                num_requests=requests,
                tolerance=tolerance,
                workers=workers or os.cpu_count() or 1,
                out_dir=out,
                goodput_text=goodput,
                goodput_min=goodput_min,
                max_requests=max_requests,
                on_update=lambda plans: progress.update(*plan_progress(plans), estimated=True),
            )
        title = f"{result['scenario']}: capacity under {', '.join(result['slo'])}"
        console.print(plan_table(result["methods"], title, result["winner"]))
        console.print(checks_table(result["methods"]))
        if result.get("fleet"):
            from reports.fleet_plan import FleetPlanResult, FleetProbe, format_plan

            fleet = dict(result["fleet"])
            fleet["probes"] = [FleetProbe(**p) for p in fleet["probes"]]
            console.print(format_plan(FleetPlanResult(**fleet)), highlight=False)
        if result["tied"]:
            err_console.print(
                f"tie: {', '.join(result['tied'])} (intervals overlap); {result['tie_break']}",
                highlight=False,
            )
        for note in result["notes"]:
            err_console.print(note, highlight=False)
        if result["interrupted"]:
            err_console.print(
                interrupted_line(
                    f"the plan so far (every finished probe) is in {out}",
                    "rerun the command to search again",
                ),
                highlight=False,
            )
            raise typer.Exit(code=130)
        err_console.print(f"plan written to {out}", highlight=False)
