"""Reading a scenario: the file (or the embedded default) as bounded YAML, ``--set`` overrides,
and validation of the whole document before any object is built.
"""

from __future__ import annotations

import copy
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sim.errors import ScenarioError
from sim.inputs import InputError, load_yaml, read_text
from sim.scenario.messages import _format_errors
from sim.scenario.schema import Scenario


def check_overrides(overrides: list[str] | tuple[str, ...], scenario: Path | None = None) -> None:
    """Check that every ``--set`` is ``KEY.PATH=VALUE`` before any file is read.

    ``--set key 8`` gives the override ``key`` and the scenario ``8``: say so rather than
    complain that the scenario file ``8`` does not exist.
    Raise ScenarioError naming the first malformed override.
    """
    for assignment in overrides:
        if "=" not in assignment:
            hint = ""
            if scenario is not None and not scenario.exists():
                hint = f" (write --set {assignment}={scenario}, with '=' and no space)"
            raise ScenarioError(f"--set {assignment!r}: expected KEY.PATH=VALUE{hint}")
        path = assignment.split("=", 1)[0]
        if not [k for k in path.strip().split(".") if k]:
            raise ScenarioError(f"--set {assignment!r}: empty key path")


def apply_override(document: dict[str, Any], assignment: str) -> None:
    """Apply one ``key.path=value`` override in place; the value is read as bounded YAML.

    Raise ScenarioError if the assignment has no ``=``, its value is not valid YAML, or it walks
    through a non-mapping.
    """
    check_overrides([assignment])
    path, raw = assignment.split("=", 1)
    keys = [k for k in path.strip().split(".") if k]
    try:
        value = load_yaml(raw, f"--set {path}")
    except InputError as exc:
        raise ScenarioError(str(exc)) from None
    node = document
    for depth, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = {}
            node[key] = child
        if not isinstance(child, dict):
            where = ".".join(keys[: depth + 1])
            raise ScenarioError(f"--set {path}: {where} is {child!r}, not a mapping")
        node = child
    node[keys[-1]] = value


def default_scenario_text() -> str:
    """The embedded default scenario (chat on Llama-3.1-8B, one H100 SXM, Poisson arrivals)."""
    return resources.files("sim").joinpath("data/scenarios/default.yaml").read_text("utf-8")


def read_document(path: Path | None) -> tuple[dict[str, Any], Path, str]:
    """Read a scenario file (or the embedded default) into a plain mapping.

    Raise ScenarioError if the file is missing, is not UTF-8 text, is not bounded YAML (too deep,
    an alias bomb, a repeated key), is empty, or is not a mapping.
    """
    if path is None:
        text, base_dir, source = default_scenario_text(), Path.cwd(), "default scenario"
    else:
        if not path.is_file():
            what = "a folder, not a scenario file" if path.is_dir() else "no such scenario file"
            raise ScenarioError(f"{path}: {what}")
        try:
            text = read_text(path)
        except InputError as exc:
            raise ScenarioError(str(exc)) from None
        base_dir, source = path.resolve().parent, str(path)
    try:
        document = load_yaml(text, source)
    except InputError as exc:
        raise ScenarioError(str(exc)) from None
    if document is None or document == {}:
        raise ScenarioError(
            f"{source}: the scenario is empty; give at least one key (omit the file to run the "
            "default scenario; `specsim schema` lists every key)"
        )
    if not isinstance(document, dict):
        raise ScenarioError(
            f"{source}: a scenario must be a mapping, got {type(document).__name__}"
        )
    return document, base_dir, source


def validate_document(document: dict[str, Any], source: str) -> Scenario:
    """Validate a mapping as a scenario.

    Raise ScenarioError listing every invalid key path and value.
    """
    try:
        return Scenario.model_validate(document)
    except ValidationError as exc:
        raise ScenarioError(_format_errors(exc, source)) from None


def document_with_overrides(
    path: Path | None, overrides: list[str] | tuple[str, ...] = ()
) -> tuple[dict[str, Any], Path, str]:
    """The scenario mapping with ``--set`` overrides applied (not yet validated), its folder and
    its name. Raise ScenarioError if an override or the file is invalid."""
    check_overrides(overrides, path)
    document, base_dir, source = read_document(path)
    document = copy.deepcopy(document)
    for assignment in overrides:
        apply_override(document, assignment)
    return document, base_dir, source


def load_scenario(
    path: Path | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> tuple[Scenario, Path]:
    """Load, override and validate a scenario; return it with the folder its paths are relative to.

    Raise ScenarioError on any problem, naming the key path and the value.
    """
    document, base_dir, source = document_with_overrides(path, overrides)
    return validate_document(document, source), base_dir
