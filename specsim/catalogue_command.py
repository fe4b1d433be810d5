"""``specsim catalogue``: what specsim knows, with where each entry comes from.

Models (with the Hugging Face ids that name them), GPUs, engine presets, and drafting methods
(the engines that run each, and the acceptance profiles shipped for it). Every list is read from
the packaged data, so a new catalogue entry, preset or profile appears without a change here.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

SECTIONS = ("models", "gpus", "presets", "methods")


def catalogue_rows() -> dict[str, list[dict[str, Any]]]:
    """Every section as a list of flat rows (name, facts, source)."""
    from sim.acceptance.shipped_data import load_profile_document
    from sim.catalogue import _load_yaml, get_gpu, get_model, gpu_names, model_names
    from sim.drafting import SUPPORT
    from sim.engine.presets import aliases, get_preset, preset_names
    from sim.model_names import model_ids
    from sim.scenario import METHODS

    raw_models = _load_yaml()["models"]
    models = []
    for name in model_names():
        model = get_model(name)
        models.append(
            {
                "name": name,
                "hf_ids": list(model_ids(name)),
                "params_billion": round(model.total_params / 1e9, 2),
                "layers": model.spec.num_layers,
                "source": str(raw_models.get(name, {}).get("source", "")),
            }
        )
    gpus = []
    for name in gpu_names():
        gpu = get_gpu(name)
        gpus.append(
            {
                "name": name,
                "kind": gpu.kind,
                "display_name": gpu.display_name,
                "memory_gb": round(gpu.memory_bytes / 1e9, 1),
                "hbm_tb_s": round(gpu.hbm_bandwidth_bytes_per_s / 1e12, 2),
                "bf16_tflops": round(gpu.bf16_dense_flops / 1e12, 1 if gpu.is_cpu else None),
                "source": "; ".join(gpu.source),
            }
        )
    alias_of = defaultdict(list)
    for alias, target in aliases().items():
        alias_of[target].append(alias)
    presets = []
    for name in preset_names():
        preset = get_preset(name)
        presets.append(
            {
                "name": name,
                "aliases": alias_of.get(name, []),
                "display_name": preset.display_name,
                "source": preset.versions,
            }
        )
    profiles: dict[str, list[str]] = defaultdict(list)
    citations: dict[str, set[str]] = defaultdict(set)
    document = load_profile_document()
    for key, entries in document["profiles"].items():
        method = key.split("/", 1)[0]
        profiles[method].append(key.split("/", 1)[1])
        for entry in entries:
            if entry.get("citation"):
                citations[method].add(str(entry["citation"]))
    methods = []
    for method in METHODS:
        engines = [
            f"{engine} ({', '.join(f'{form} {level}' for form, level in forms[method].items())})"
            for engine, forms in SUPPORT.items()
            if method in forms
        ]
        own = "eagle" if method in ("eagle2",) else method
        methods.append(
            {
                "name": method,
                "engines": engines,
                "acceptance_profiles": sorted(profiles.get(own, [])),
                "source": "; ".join(sorted(citations.get(own, set()))),
            }
        )
    return {"models": models, "gpus": gpus, "presets": presets, "methods": methods}


def _cell(value: Any) -> str:
    return "\n".join(str(v) for v in value) if isinstance(value, list) else str(value)


def section_table(section: str, rows: list[dict[str, Any]]) -> Table:
    """One section as a terminal table: one line per list item, the sources wrapped."""
    table = Table(title=section, box=box.SIMPLE_HEAD, show_lines=True, expand=True)
    for key in rows[0] if rows else ("name",):
        wraps = key in ("source", "acceptance_profiles", "engines", "display_name")
        header = key.replace("_", " ")
        if key == "name":  # a name is what the user types: never cut it
            longest = max((len(str(row.get(key, ""))) for row in rows), default=4)
            table.add_column(header, no_wrap=True, min_width=max(longest, len(header)))
            continue
        table.add_column(
            header,
            no_wrap=not wraps,
            ratio=2 if wraps else None,
            min_width=None if wraps else max(len(header), 4),
        )
    for row in rows:
        table.add_row(*(_cell(v) for v in row.values()))
    return table


def register(app: typer.Typer) -> None:
    """Add ``catalogue`` to ``app``."""
    from sim.errors import ScenarioError
    from specsim.console import console, user_errors

    @app.command()
    @user_errors
    def catalogue(
        section: Annotated[
            str | None,
            typer.Argument(
                metavar="[models|gpus|presets|methods]",
                help="One section (default: all).",
                show_default=False,
            ),
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the lists as JSON.")] = False,
    ) -> None:
        """List the models (and their Hugging Face ids), GPUs, engine presets and drafting
        methods specsim knows, each with its source."""
        if section is not None and section not in SECTIONS:
            raise ScenarioError(
                f"catalogue: unknown section {section!r}; use {', '.join(SECTIONS)}"
            )
        rows = catalogue_rows()
        chosen = [section] if section else list(SECTIONS)
        if as_json:
            typer.echo(json.dumps({name: rows[name] for name in chosen}, indent=2))
            return
        for name in chosen:
            console.print(section_table(name, rows[name]))
