"""``specsim compare``: every method on the same arrivals and lengths, compared with ``none``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.table import Table

if TYPE_CHECKING:  # pandas is imported by the commands themselves: CLI start stays fast
    import pandas as pd

from specsim.bench_options import BenchOptions, with_bench_options
from specsim.cli_options import ForceOpt, ScenarioArg, SetOpt, YesOpt
from specsim.multirun_commands import _fmt, _inputs, load_document


def comparison_table(frame: pd.DataFrame, title: str) -> Table:
    """The comparison as a terminal table; speed-up is TPOT p50 of ``none`` over the method's."""
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    columns = (
        ("method", "method", 0),
        ("output_throughput_tok_s", "tok/s", 0),
        ("ttft_p50_ms", "TTFT\np50", 1),
        ("ttft_p99_ms", "TTFT\np99", 1),
        ("tpot_p50_ms", "TPOT\np50", 2),
        ("tpot_p99_ms", "TPOT\np99", 2),
        ("itl_p50_ms", "ITL\np50", 2),
        ("itl_p99_ms", "ITL\np99", 2),
        ("mean_acceptance_length", "acc.\nlen", 2),
        ("speedup_vs_none", "speed\nup", 2),
    )
    for _, label, _ in columns:
        is_method = label == "method"
        table.add_column(
            label,
            justify="left" if is_method else "right",
            no_wrap=not is_method,
            overflow="fold",
            max_width=28 if is_method else None,
        )
    for _, row in frame.iterrows():
        if row["status"] != "ok":
            table.add_row(row["method"], "-", *[""] * (len(columns) - 2))
            continue
        table.add_row(*(_fmt(row[key], digits) for key, _, digits in columns))
    table.caption = "latencies in ms; speed-up = TPOT p50 of none / TPOT p50 of the method"
    return table


def register(app: typer.Typer) -> None:
    """Add ``compare`` to ``app``."""
    from specsim.console import console, err_console, user_errors

    @app.command()
    @user_errors
    @with_bench_options
    def compare(
        scenario: ScenarioArg = None,
        methods: Annotated[
            str,
            typer.Option(
                "--methods",
                metavar="METHOD[:KEY=VALUE,...],...",
                help="Arms to compare, each with its own settings, e.g. "
                "none,eagle3:k=3,draft_model:model=llama-3.2-1b,alpha=0.7 (keys: k, model, "
                "tp, alpha, tau, profile, trace, or any speculation key path).",
            ),
        ] = "none",
        out: Annotated[
            Path | None, typer.Option("--out", metavar="FOLDER", help="Output folder.")
        ] = None,
        set_: SetOpt = None,
        skip_unsupported: Annotated[
            bool,
            typer.Option(
                "--skip-unsupported",
                help="Leave out an arm that cannot run (default: stop with its reason).",
            ),
        ] = False,
        force: ForceOpt = False,
        yes: YesOpt = False,
        *,
        bench: BenchOptions,
    ) -> None:
        """Run every method on the same arrivals and lengths and compare them with none."""
        from reports.comparison import (
            COMPARISON_FILE,
            FIGURE_FILE,
            arm_folder,
            compare_methods,
            parse_arms,
            save_comparison,
            unrunnable_arms,
        )
        from reports.progress import interrupted_line, item_progress
        from sim.errors import ScenarioError
        from sim.output import check_output_folder, fresh_results_dir
        from sim.scale import preflight
        from sim.scenario import validate_document

        document, base_dir, source = load_document(scenario, set_ or [], bench)
        loaded = validate_document(document, source)
        name = loaded.name
        arms, added = parse_arms(methods)
        # Every arm's records are held until the comparison is written.
        preflight(loaded, yes=yes, warn=err_console.print, base_dir=base_dir,
                  copies=len(arms))  # fmt: skip
        if out is not None:
            writes = (COMPARISON_FILE, FIGURE_FILE, *(arm_folder(arm.label) for arm in arms))
            check_output_folder(out, force=force, writes=writes, inputs=_inputs(scenario))
        if added:
            err_console.print("none added as the baseline for speed-ups", highlight=False)
        blocked = unrunnable_arms(document, base_dir, source, arms)
        if blocked and not skip_unsupported:
            lines = "\n".join(f"  {label}: {reason}" for label, reason in blocked.items())
            raise ScenarioError(
                f"compare: {len(blocked)} of {len(arms)} arms cannot run:\n{lines}\n"
                "give an arm its own settings (e.g. draft_model:model=llama-3.2-1b,alpha=0.7) "
                "or pass --skip-unsupported to compare the others"
            )
        out_dir = out if out is not None else fresh_results_dir(Path("results"), f"{name}-compare")
        try:
            with item_progress(len(arms), "compare", err_console) as progress:
                runs = compare_methods(document, base_dir, source, arms, progress)
        except KeyboardInterrupt:
            err_console.print(
                interrupted_line("nothing written (a comparison is saved whole)", "rerun it"),
                highlight=False,
            )
            raise typer.Exit(code=130) from None
        frame = save_comparison(runs, out_dir)
        console.print(comparison_table(frame, f"{name}: methods on identical requests"))
        for run in runs:
            if run.reason is not None:
                err_console.print(f"{run.method} not run: {run.reason}", highlight=False)
            for note in run.adjustments:
                err_console.print(f"{run.method}: {note}", highlight=False)
        err_console.print(f"results written to {out_dir}", highlight=False)
