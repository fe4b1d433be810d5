"""The ``specsim`` command line (also ``python -m specsim``).

Every command validates its input before doing any work; a user's mistake is reported as one
message naming the key path or the file and line, with exit code 2 and no traceback.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from specsim.bench_options import BenchOptions, with_bench_options
from specsim.cli_options import ForceOpt, OutOpt, ScenarioArg, SetOpt, YesOpt
from specsim.console import console, err_console, user_errors


class ResultFormat(enum.StrEnum):
    """What ``specsim run`` prints."""

    table = "table"
    json = "json"
    vllm = "vllm"


app = typer.Typer(
    name="specsim",
    help="Simulate batched speculative-decoding LLM serving: throughput, latency, acceptance.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from sim import __version__

        typer.echo(f"specsim {__version__}")
        raise typer.Exit()


@app.callback()
def _main_options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Simulate batched speculative-decoding LLM serving: throughput, latency, acceptance."""


def progress_reporter(total: int, label: str) -> tuple[Callable[[int], None] | None, Any]:
    """A rich progress bar over finished requests when stderr is a terminal."""
    if not sys.stderr.isatty():
        return None, None
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    progress = Progress(
        TextColumn(label),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
    )
    task = progress.add_task(label, total=total)
    return (lambda n: progress.advance(task, n)), progress


#: Off a terminal, runs of this many requests or more print progress lines
#: (specsim/progress_lines.py).
PROGRESS_LINES_FROM = 10_000


def _stderr_line(text: str) -> None:
    err_console.print(text, highlight=False, markup=False, soft_wrap=True)


@app.command()
@user_errors
@with_bench_options
def run(
    scenario: ScenarioArg = None,
    out: OutOpt = None,
    set_: SetOpt = None,
    no_steps: Annotated[
        bool, typer.Option("--no-steps", help="Do not write the step records (steps.parquet).")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the summary as JSON (--result-format json).")
    ] = False,
    result_format: Annotated[
        ResultFormat,
        typer.Option(
            "--result-format",
            help="What to print: a table, specsim's summary JSON, or the flat JSON keys "
            "vllm bench serve --save-result writes (the folder's vllm_bench.json).",
        ),
    ] = ResultFormat.table,
    force: ForceOpt = False,
    yes: YesOpt = False,
    *,
    bench: BenchOptions,
) -> None:
    """Run one scenario, print its summary and write its results (summary.json, requests.csv,
    steps.parquet, vllm_bench.json, scenario.resolved.yaml)."""
    from sim.output import fresh_results_dir
    from sim.results import check_run_output, save_result, scenario_inputs
    from sim.run import run_scenario
    from sim.scale import preflight
    from sim.scenario import validate_document
    from sim.vllm_bench import vllm_bench_result
    from specsim.multirun_commands import load_document
    from specsim.summary_table import summary_table

    document, base_dir, source = load_document(scenario, set_ or [], bench)
    loaded = validate_document(document, source)
    if out is not None:
        inputs = scenario_inputs(loaded, base_dir) + ((scenario,) if scenario else ())
        check_run_output(out, force=force, inputs=inputs)
    streamed = not no_steps and loaded.fleet is None
    preflight(loaded, yes=yes, keep_steps=not no_steps, streamed=streamed, warn=err_console.print)
    reporter, bar = progress_reporter(loaded.workload.num_requests, "simulating")
    if reporter is None and loaded.workload.num_requests >= PROGRESS_LINES_FROM:
        from specsim.progress_lines import progress_lines

        reporter = progress_lines(loaded.workload.num_requests, "simulating", _stderr_line)
    # The step records are written as the run goes, so the folder is made first.
    made = out is None or not out.exists()
    out_dir = out if out is not None else fresh_results_dir(Path("results"), loaded.name)
    out_dir.mkdir(parents=True, exist_ok=True)
    records: dict[str, Any] = {"step_records": "summary"} if no_steps else {"steps_to": out_dir}
    try:
        if bar is not None:
            with bar:
                result = run_scenario(loaded, base_dir, reporter, **records)
        else:
            result = run_scenario(loaded, base_dir, reporter, **records)
    except BaseException as exc:
        # A failed run leaves no step file (it was written under a temporary name).
        if made and not any(out_dir.iterdir()):
            out_dir.rmdir()
        if not isinstance(exc, KeyboardInterrupt):
            raise
        from reports.progress import interrupted_line

        err_console.print(
            interrupted_line("nothing written (a run is saved whole when it ends)", "rerun it"),
            highlight=False,
        )
        raise typer.Exit(code=130) from None
    save_result(result, out_dir, write_steps=not no_steps)
    if result_format is ResultFormat.vllm:
        typer.echo(json.dumps(vllm_bench_result(result), indent=2, default=str))
    elif as_json or result_format is ResultFormat.json:
        console.print_json(json.dumps(result.summary.to_dict(), default=str))
    else:
        console.print(summary_table(result.summary))
        if result.summary.fleet is not None:
            from sim.fleet.table import replica_table

            console.print(replica_table(result.summary.fleet))
    err_console.print(f"results written to {out_dir}", highlight=False)


@app.command()
@user_errors
def schema(
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", metavar="FILE", help="Write the schema to this JSON file instead of stdout."
        ),
    ] = None,
    force: ForceOpt = False,
) -> None:
    """Print the JSON Schema of scenario files (or write it to a file with --out), for editors."""
    from sim.output import check_output_file, write_json
    from sim.scenario import scenario_json_schema

    if out is not None:
        check_output_file(out, force=force)
    document = scenario_json_schema()
    if out is None:
        typer.echo(json.dumps(document, indent=2))
    else:
        write_json(out, document)
        err_console.print(f"schema written to {out}", highlight=False)


@app.command("lossless-check")
@user_errors
def lossless_check(
    samples: Annotated[
        int, typer.Option(min=1000, help="Speculative steps and direct samples.")
    ] = 50_000,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the sampler.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Chi-square proof that speculative sampling reproduces the target distribution."""
    from sim.theory.lossless_check import run_lossless_check

    report = run_lossless_check(samples=samples, seed=seed)
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2))
    else:
        typer.echo(report.format_text())
    if not report.passed:
        raise typer.Exit(code=1)


@app.command()
@user_errors
def analyze(
    alpha: Annotated[
        float,
        typer.Option(min=0.0, max=0.999, help="Probability that a draft token is accepted."),
    ] = 0.8,
    cost_ratio: Annotated[
        float, typer.Option("--c", min=0.0, help="Draft/target cost ratio c.")
    ] = 0.05,
    out: Annotated[
        Path | None,
        typer.Option("--out", metavar="FOLDER", help="Write the figure and the table here."),
    ] = None,
    force: ForceOpt = False,
) -> None:
    """Expected tokens per verify step against alpha and k, the optimal k, and the starting
    claims about alpha and k recomputed by formula and by simulation."""
    from sim.output import atomic_write, check_output_folder, write_table

    analysis_files = ("tokens_per_step.png", "tokens_per_step.csv")
    if out is not None:
        check_output_folder(out, force=force, writes=analysis_files)
    from sim.theory.chain_acceptance import (
        expected_tokens_per_step,
        lesson_comparison,
        optimal_k,
        speedup,
        tokens_per_step_figure,
        tokens_per_step_table,
    )

    k_best = optimal_k(alpha, cost_ratio)
    typer.echo(
        f"alpha={alpha} c={cost_ratio}: optimal k = {k_best}, "
        f"E[tokens/step] = {expected_tokens_per_step(alpha, k_best):.3f}, "
        f"speedup = {speedup(alpha, k_best, cost_ratio):.3f}x"
    )
    table = tokens_per_step_table()
    typer.echo("\nE[tokens per verify step] = (1 - alpha^(k+1)) / (1 - alpha):")
    typer.echo(table.round(3).to_string())
    typer.echo("")
    typer.echo(lesson_comparison().format_text())
    if out is not None:
        figure = tokens_per_step_figure(table)
        atomic_write(
            out / analysis_files[0], lambda f: figure.savefig(f, format="png", dpi=120), True
        )
        write_table(out / analysis_files[1], table.reset_index())
        err_console.print(f"figure and table written to {out}", highlight=False)


@app.command()
@user_errors
def validate(
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
    regime: Annotated[
        list[str] | None,
        typer.Option(
            "--regime",
            help="Rows to run: batch-1 (default), batch, tp, moe, serving, speculation, "
            "under-load (all but batch-1) or all; repeat to combine.",
        ),
    ] = None,
) -> None:
    """Predicted vs measured on public measurements: fitted and out-of-sample rows apart."""
    from reports.progress import interrupted_line, item_progress
    from sim.validation import format_report, resolve_regimes, run_points
    from sim.validation.checks import speedup_checks, tree_speedup_at

    regimes = resolve_regimes(regime or ["batch-1"])
    try:
        with item_progress(1, "validate", err_console) as progress:
            results = run_points(
                regimes=regimes,
                on_point=lambda point_id, done, total: progress.update(done, total, point_id),
            )
    except KeyboardInterrupt:
        err_console.print(
            interrupted_line("nothing written (validate only prints)", "rerun it"),
            highlight=False,
        )
        raise typer.Exit(code=130) from None
    checks = []
    if "speculation" in regimes:
        checks = [check.line() for check in speedup_checks(results, tree_speedup_at)]
    if as_json:
        records = [
            {**dataclasses.asdict(row), "relative_error": row.relative_error} for row in results
        ]
        typer.echo(json.dumps(records, indent=2))
    else:
        typer.echo(format_report(results, checks))


def _register_commands() -> None:
    """Commands defined in their own modules: calibrate, catalogue, the multi-run reports."""
    from specsim.calibrate_command import register as register_calibration
    from specsim.catalogue_command import register as register_catalogue
    from specsim.fleet_plan_command import register as register_fleet_plan
    from specsim.multirun_commands import register as register_reports
    from specsim.report_recommend_commands import register as register_report_and_recommend

    register_calibration(app)
    register_catalogue(app)
    register_reports(app)
    register_report_and_recommend(app)
    register_fleet_plan(app)


_register_commands()


def _plain_metavars(command: Any) -> None:
    """Help that reads as words: a flag shows no ``<bool>``, a value its kind in capitals
    (``KEY.PATH=VALUE`` where the option sets one), never ``<list[str]>``."""
    for sub in getattr(command, "commands", {}).values():
        _plain_metavars(sub)
    make_help_option = command.get_help_option

    def help_option_without_type(ctx: Any) -> Any:
        option = make_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option

    command.get_help_option = help_option_without_type
    for param in command.params:
        if param.metavar is not None:
            continue
        kind = param.type_descriptor
        if getattr(param, "is_flag", False):
            param.metavar = ""
        elif kind.is_choice and kind.choices is not None:
            names = (getattr(c, "value", c) for c in kind.choices)
            param.metavar = "[" + "|".join(str(n) for n in names) + "]"
        else:
            annotation = kind.annotation
            if kind.is_list:
                annotation = (getattr(annotation, "__args__", None) or (str,))[0]
            param.metavar = _KIND_METAVARS.get(annotation, "VALUE")


_KIND_METAVARS: dict[Any, str] = {int: "N", float: "NUMBER", Path: "PATH", str: "TEXT"}


def cli() -> Any:
    """The application as a click command, with plain help metavars."""
    command = typer.main.get_command(app)
    _plain_metavars(command)
    return command


def main() -> None:
    """Entry point of the ``specsim`` console script."""
    cli()(prog_name="specsim")
