"""The ``report`` and ``recommend`` commands of the ``specsim`` command line.

``register(app)`` adds them. Every CLI start imports this module, so matplotlib, pandas and the
simulator are imported inside the command functions, never here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from reports.recommend import Recommendation


def register(app: typer.Typer) -> None:
    """Add ``report`` and ``recommend`` to ``app``."""
    from specsim.console import err_console, user_errors

    @app.command()
    @user_errors
    def report(
        folder: Annotated[
            Path, typer.Argument(help="A run, compare, sweep or plan folder.", show_default=False)
        ],
        out: Annotated[
            Path | None, typer.Option("--out", help="Where to write (default: the folder).")
        ] = None,
    ) -> None:
        """Write report.html (self-contained) and report.md with figures for a result folder."""
        from reports.render import render_report
        from sim.output import check_output_folder

        # A report is rebuilt from the results beside it, so replacing report.html is expected;
        # a file where the folder should be is not.
        check_output_folder(out or folder, force=True, writes=("report.html", "report.md"))
        written = render_report(folder, out)
        err_console.print(
            f"{len(written.figure_paths)} figure{'' if len(written.figure_paths) == 1 else 's'}; "
            f"report written to {written.html_path} and "
            f"{written.markdown_path}",
            highlight=False,
        )

    @app.command()
    @user_errors
    def recommend(
        model: Annotated[
            str,
            typer.Option("--model", help="Target model: a catalogue name or its Hugging Face id."),
        ],
        gpu: Annotated[str, typer.Option("--gpu", help="GPU (catalogue name).")],
        task: Annotated[
            str,
            typer.Option(
                "--task",
                help="chat, code, structured, summarisation, long-generation or reasoning.",
            ),
        ],
        num_gpus: Annotated[
            int, typer.Option("--num-gpus", min=1, max=8, help="GPUs (tensor parallel).")
        ] = 1,
        concurrency: Annotated[
            int | None, typer.Option("--concurrency", min=1, help="Concurrent clients.")
        ] = None,
        rate: Annotated[
            float | None, typer.Option("--rate", min=0.0, help="Poisson request rate (req/s).")
        ] = None,
        temperature: Annotated[
            float,
            typer.Option("--temperature", min=0.0, help="Sampling temperature (0: greedy)."),
        ] = 0.0,
        ttft_p99_ms: Annotated[
            float | None, typer.Option("--ttft-p99-ms", min=0.0, help="TTFT p99 bound.")
        ] = None,
        tpot_p50_ms: Annotated[
            float | None, typer.Option("--tpot-p50-ms", min=0.0, help="TPOT p50 bound.")
        ] = None,
        draft_alpha: Annotated[
            float | None,
            typer.Option(
                "--draft-alpha",
                min=0.0,
                max=0.99,
                help=(
                    "Acceptance rate to assume for a separate draft model that has no shipped "
                    "(target, draft) acceptance."
                ),
            ),
        ] = None,
        num_requests: Annotated[
            int, typer.Option("--requests", min=20, help="Requests simulated per candidate.")
        ] = 200,
        preset: Annotated[
            str,
            typer.Option(
                "--preset", help="Engine preset (see specsim catalogue presets), e.g. sglang."
            ),
        ] = "vllm-v1",
        profile: Annotated[
            Path | None,
            typer.Option(
                "--profile",
                metavar="PROFILE.yaml",
                help="Engine profile fitted by specsim calibrate, applied to every candidate.",
            ),
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the answer as JSON.")] = False,
    ) -> None:
        """Simulate the drafting configurations this node can run and recommend the best."""
        from reports.progress import interrupted_line, item_progress
        from reports.recommend import Request, recommend_configuration
        from sim.errors import ScenarioError

        catalogue_name = _catalogue_model(model)
        request = Request(
            gpu=gpu,
            num_gpus=num_gpus,
            task=task,
            concurrency=concurrency,
            rate_per_s=rate,
            temperature=temperature,
            ttft_p99_ms=ttft_p99_ms,
            tpot_p50_ms=tpot_p50_ms,
            draft_alpha=draft_alpha,
            num_requests=num_requests,
            model=catalogue_name,
            model_as_given=model if model != catalogue_name else None,
            preset=preset,
            profile=None if profile is None else str(profile.resolve()),
        )
        if profile is not None and not profile.is_file():
            raise ScenarioError(f"--profile: {profile}: no such file")
        try:
            with item_progress(1, "recommend", err_console) as progress:
                answer = recommend_configuration(
                    request, lambda label, done, total: progress.update(done, total, label)
                )
        except KeyboardInterrupt:
            err_console.print(
                interrupted_line("nothing written (recommend only prints)", "rerun it"),
                highlight=False,
            )
            raise typer.Exit(code=130) from None
        if as_json:
            typer.echo(json.dumps(answer.to_dict(), indent=2))
        else:
            typer.echo(format_recommendation(answer))


def _catalogue_model(name: str) -> str:
    """The catalogue name of ``--model`` (a Hugging Face id is accepted).

    Raise ScenarioError naming the known models if it names none, and for a quantized
    checkpoint's id: the candidates are priced with bf16 weights."""
    from sim.errors import ScenarioError
    from sim.model_names import quantized_checkpoint, resolve_model_name, unknown_model_message

    resolved = resolve_model_name(name)
    if resolved is None:
        raise ScenarioError(f"--model: {unknown_model_message(name)}")
    checkpoint = quantized_checkpoint(name)
    if checkpoint is not None:
        raise ScenarioError(
            f"--model: {name!r} is a checkpoint of {resolved} in {checkpoint.weights}; recommend "
            f"prices bf16 weights only: name {resolved}"
        )
    return resolved


def _ms(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.1f}"


def format_recommendation(answer: Recommendation) -> str:
    """The answer as text: best, runner-up, every candidate, and the explanation."""
    from reports.recommend import MIN_GAIN

    r = answer.request
    load = f"{r.concurrency} clients" if r.concurrency is not None else f"{r.rate_per_s:g} req/s"
    lines = [
        f"{r.model_as_given or r.model} on {r.num_gpus}x {r.gpu}, {r.task} at {load}, "
        f"temperature {r.temperature:g}",
        f"recommended: {answer.best.label}",
    ]
    if answer.runner_up is not None:
        lines.append(f"runner-up:   {answer.runner_up.label}")
    lines.append("")
    lines.append(
        f"{'configuration':<28}{'e2e mean':>10}{'TTFT p99':>10}{'TPOT p50':>10}"
        f"{'tok/s':>9}{'acc.len':>9}  SLO     engine"
    )
    for o in answer.outcomes:
        lines.append(
            f"{o.label:<28}{_ms(o.mean_e2e_latency_ms):>10}{_ms(o.ttft_p99_ms):>10}"
            f"{_ms(o.tpot_p50_ms):>10}{o.output_throughput_tok_s:>9.0f}"
            f"{o.mean_acceptance_length:>9.2f}  {'ok' if o.meets_slo else 'missed':<7} "
            f"{o.engine_support}"
        )
    if answer.best.engine_support != "supported":
        fallback = next((o for o in answer.outcomes if o.engine_support == "supported"), None)
        lines.append(
            f"note: {answer.best.label} is {answer.best.engine_support} on this engine"
            + (f"; the best supported configuration is {fallback.label}" if fallback else "")
        )
    lines.append(
        "(latencies in ms; ranked by mean end-to-end latency, SLO first; a drafting "
        f"configuration less than {MIN_GAIN:.0%} faster than none ranks after it)"
    )
    lines += ["", "why:", *(f"  {line}" for line in answer.explanation)]
    if answer.not_simulated:
        lines += ["not simulated:", *(f"  {k}: {v}" for k, v in answer.not_simulated.items())]
    if answer.notes:
        lines += ["notes:", *(f"  {note}" for note in answer.notes)]
    return "\n".join(lines)
