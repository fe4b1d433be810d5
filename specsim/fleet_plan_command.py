"""``specsim fleet-plan``: the smallest fleet that holds the SLO at a target rate.

The search and its verdicts live in :mod:`reports.fleet_plan`; this module only reads the
command's options, validates them and prints or writes the plan.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from reports.fleet_plan import DEFAULT_MAX_UNITS, PLAN_FILE, format_plan, nodes_needed
from sim.errors import ScenarioError, SpecsimError
from specsim.cli_options import ForceOpt, ScenarioArg, SetOpt
from specsim.console import user_errors


def register(app: typer.Typer) -> None:
    """Add ``specsim fleet-plan`` to the command line."""

    @app.command("fleet-plan")
    @user_errors
    def fleet_plan(
        scenario: ScenarioArg = None,
        target_rate: Annotated[
            float, typer.Option("--target-rate", help="Requests/s the fleet must serve.")
        ] = 0.0,
        slo: Annotated[str | None, typer.Option("--slo", help="e.g. 'ttft_p99_ms<=2000'.")] = None,
        node_rate: Annotated[
            float | None,
            typer.Option("--node-rate", help="One node's max rate: the search starts there."),
        ] = None,
        price: Annotated[
            float | None, typer.Option("--price-per-gpu-hour", help="USD per GPU-hour.")
        ] = None,
        cost: Annotated[bool, typer.Option("--cost", help="Require a cost answer.")] = False,
        seeds: Annotated[
            int, typer.Option("--seeds", min=1, help="Seeds per fleet size; all must hold.")
        ] = 1,
        requests: Annotated[
            int | None,
            typer.Option("--requests", min=10, help="Requests per run (the scenario's)."),
        ] = None,
        max_units: Annotated[
            int, typer.Option("--max-units", min=1, help="Largest fleet the search tries.")
        ] = DEFAULT_MAX_UNITS,
        out: Annotated[
            Path | None,
            typer.Option("--out", metavar="FOLDER", help="Write the plan (plan.json) here."),
        ] = None,
        set_: SetOpt = None,
        force: ForceOpt = False,
    ) -> None:
        """How many nodes: the smallest fleet holding the SLO at the target rate (fleet runs)."""
        from reports.slo import parse_slo, slo_from_mapping
        from sim.output import check_output_folder, write_json
        from sim.scenario import load_scenario

        loaded, base_dir = load_scenario(scenario, set_ or [])
        if out is not None:
            check_output_folder(out, force=force, writes=(PLAN_FILE,))
        if target_rate <= 0:
            raise ScenarioError("--target-rate: give the request rate the fleet must serve (> 0)")
        if price is not None and not price > 0:
            raise ScenarioError(f"--price-per-gpu-hour: must be > 0, got {price:g}")
        if slo is not None:
            terms = parse_slo(slo)
        elif loaded.slo:
            terms = slo_from_mapping(loaded.slo)
        else:
            raise ScenarioError("no SLO; give --slo or a slo: mapping in the scenario")
        plan = nodes_needed(
            loaded,
            base_dir,
            target_rate,
            terms,
            single_node_max_rate_per_s=node_rate,
            price_per_gpu_hour=price,
            want_cost=cost,
            seeds=[loaded.seed + i for i in range(seeds)],
            num_requests=requests,
            max_units=max_units,
        )
        typer.echo(format_plan(plan))
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            write_json(out / PLAN_FILE, plan.to_dict())
        if plan.num_units is None:
            raise SpecsimError(plan.reason or "no fleet holds the SLO")
