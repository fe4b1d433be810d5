"""The ``specsim calibrate`` command, registered on the application by :func:`register`.

``specsim calibrate ARTIFACT… --out PROFILE.yaml [--gpu …] [--model …] [--tp …] [--check]
[--json]`` fits everything the artifacts allow (:func:`calibration.calibrate.calibrate`), writes the
profile and prints the fit quality: each fitted value with its 95 % interval, the residuals, and
with ``--check`` the predicted against measured TTFT and TPOT, in sample and on held-out requests.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from sim.catalogue import gpu_names
from sim.errors import CalibrationError
from specsim.cli_options import ForceOpt


def summary_lines(document: dict[str, Any], seconds: float) -> list[str]:
    """The human-readable fit report of a profile document."""
    lines = [f"profile {document['name']} ({seconds:.1f} s)"]
    engine = document.get("engine")
    if engine:
        lines.append(
            f"engine on {engine['gpu']} / {engine['model']} TP{engine['tensor_parallel_size']}:"
        )
        if "parameters" in engine:
            lines.extend(_parameter_lines(engine))
        else:
            for key in ("step_overhead_s", "per_sequence_overhead_s"):
                low, high = engine["ci95"][key]
                lines.append(
                    f"  {key:24} {engine[key] * 1e3:9.4f} ms  "
                    f"(95% {low * 1e3:.4f} .. {high * 1e3:.4f})"
                )
            for key, value in engine["residuals"].items():
                lines.append(f"  {key:24} {value:+.4g}")
    for method, entry in (document.get("acceptance") or {}).items():
        rates = entry.get("conditional_rates")
        tau = entry.get("mean_acceptance_length")
        text = f"acceptance {method}: tau {tau:.3f}" if tau is not None else f"acceptance {method}:"
        if entry.get("num_speculative_tokens"):
            text += f" at k = {entry['num_speculative_tokens']}"
        if rates:
            text += "; conditional rates " + ", ".join(f"{r:.3f}" for r in rates)
        lines.append(text)
        worst = max((abs(v) for v in entry.get("residuals", {}).values()), default=None)
        if worst is not None:
            lines.append(f"  largest residual {worst:.2%}")
    if document.get("check"):
        from calibration.check import format_check

        lines.extend(format_check(document["check"]))
    for rejected in document["provenance"]["rejected"]:
        lines.append(f"skipped {rejected['file']}: {rejected['reason']}")
    for warning in document.get("warnings") or []:
        lines.append(f"warning: {warning}")
    return lines


def _shown(value: float, unit: str) -> str:
    return f"{value * 1e3:10.4f} ms" if unit.startswith("s ") else f"{value:10.4f}   "


def _parameter_lines(engine: dict[str, Any]) -> list[str]:
    """The parameter table and the predicted against measured statistics of a fit by
    simulation."""
    from sim.vllm_bench import vllm_key

    lines = [f"  {engine['num_simulations']} simulations; parameters:"]
    for name, row in engine["parameters"].items():
        text = f"    {name:24} {_shown(row['value'], row['unit'])}"
        if row["status"] == "fitted":
            low, high = row["ci95"]
            scale = 1e3 if row["unit"].startswith("s ") else 1.0
            text += f"  fitted (95% {low * scale:.4f} .. {high * scale:.4f})"
        else:
            text += "  fixed (shipped)"
        lines.append(text)
    for label, stats in engine["comparison"].items():
        lines.append(f"  {label}:")
        for stat, row in stats.items():
            metric, _, which = stat.rpartition("_")
            shown = vllm_key(metric, which) if which in ("mean", "p50", "p90", "p99") else stat
            lines.append(
                f"    {shown:22} predicted {row['predicted']:10.3f}  measured "
                f"{row['measured']:10.3f}  error {row['rel_error']:+7.1%}"
                + ("" if row.get("fitted", 1.0) else "  (compared, not fitted)")
            )
    return lines


def command_line(
    artifacts: list[Path],
    out: Path,
    options: dict[str, object],
) -> str:
    """The full command as it would be typed again: artifacts, ``--out`` and every option given."""
    words = ["specsim", "calibrate", *(str(a) for a in artifacts), "--out", str(out)]
    for flag, value in options.items():
        if value is None or value is False:
            continue
        words.append(flag if value is True else f"{flag}={value}")
    return " ".join(shlex.quote(word) for word in words)


def register(app: typer.Typer) -> None:
    """Add the ``calibrate`` command to ``app``."""
    from sim.output import check_output_file
    from specsim.console import user_errors

    @app.command("calibrate")
    @user_errors
    def calibrate_command(
        artifacts: Annotated[
            list[Path], typer.Argument(help="Artifacts: result JSON, logs, scrapes, traces.")
        ],
        out: Annotated[Path, typer.Option("--out", help="Profile YAML to write.")],
        gpu: Annotated[
            str | None, typer.Option(help=f"GPU of the run: {', '.join(gpu_names())}.")
        ] = None,
        model: Annotated[
            str | None,
            typer.Option(help="Model of the run: a catalogue name or its Hugging Face id."),
        ] = None,
        tp: Annotated[int | None, typer.Option(help="Tensor-parallel degree of the run.")] = None,
        fit: Annotated[
            str | None,
            typer.Option(
                "--fit",
                help="Comma-separated step-cost parameters a fit by simulation may free "
                "(default: every available one; see docs/calibration.md).",
            ),
        ] = None,
        check: Annotated[
            bool, typer.Option("--check", help="Replay and compare; refit on half, check on half.")
        ] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print the profile as JSON.")] = False,
        force: ForceOpt = False,
    ) -> None:
        """Fit a profile (engine overheads, acceptance) to real vLLM/SGLang artifacts."""
        if gpu is not None and gpu not in gpu_names():
            raise CalibrationError(f"--gpu: unknown GPU {gpu!r}; known: {', '.join(gpu_names())}")
        if model is not None:
            from sim.model_names import (
                quantized_checkpoint,
                resolve_model_name,
                unknown_model_message,
            )

            resolved = resolve_model_name(model)
            if resolved is None:
                raise CalibrationError(f"--model: {unknown_model_message(model)}")
            checkpoint = quantized_checkpoint(model)
            if checkpoint is not None:
                # The replay prices bf16 weights: fitting a quantized run as bf16 would put the
                # format's difference into the fitted overheads.
                raise CalibrationError(
                    f"--model: {model!r} is a checkpoint of {resolved} in {checkpoint.weights}; "
                    "calibrate replays runs with bf16 weights only, so a run of this checkpoint "
                    "cannot be fitted"
                )
            model = resolved
        if tp is not None and tp < 1:
            raise CalibrationError(f"--tp: must be >= 1, got {tp}")
        # Before any fitting: the profile never replaces an artifact, nor silently a profile.
        check_output_file(out, force=force, inputs=tuple(artifacts))
        # Imported here: fitting pulls in scipy and the parsers, which every CLI start would pay.
        from calibration.calibrate import calibrate
        from calibration.profile_document import write_profile

        command = command_line(
            artifacts,
            out,
            {"--gpu": gpu, "--model": model, "--tp": tp, "--fit": fit, "--check": check},
        )
        from reports.progress import interrupted_line, working
        from specsim.console import err_console

        try:
            with working(f"calibrate: fitting {len(artifacts)} artifacts", err_console):
                result = calibrate(
                    artifacts,
                    gpu=gpu,
                    model=model,
                    tp=tp,
                    check=check,
                    parameters=None
                    if fit is None
                    else [n.strip() for n in fit.split(",") if n.strip()],
                    name=out.stem,
                    command=command,
                )
        except KeyboardInterrupt:
            err_console.print(
                interrupted_line(f"nothing written ({out} is written when the fit ends)", "rerun"),
                highlight=False,
            )
            raise typer.Exit(code=130) from None
        write_profile(result.document, out)
        if as_json:
            typer.echo(json.dumps(result.document, indent=2))
            return
        console = Console()
        for line in summary_lines(result.document, result.seconds):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
        console.print(f"wrote {out}", highlight=False, markup=False)
