"""One message per invalid key: pydantic's errors rewritten as ``key.path: what is wrong, got
VALUE``, with the value's unit and the closest known key for a misspelt one.
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from sim.scenario.schema import Scenario
from sim.speculation import (
    CHAIN_TAG,
    METHODS,
    TREE_TAG,
    UNKNOWN_METHOD,
)

#: Union-member tags pydantic puts in error locations; they are not keys a user wrote.
_UNION_TAGS = {
    CHAIN_TAG,
    TREE_TAG,
    "poisson",
    "gamma",
    "closed_loop",
    "trace",
    "fixed",
    "uniform",
    "lognormal",
    "empirical",
    "str",
    "int",
    "float",
    "bool",
    "ModelSpec",
}


def _key_path(loc: tuple[int | str, ...]) -> str:
    parts = [str(p) for p in loc]
    kept = [
        p for p in parts if p not in _UNION_TAGS and "[" not in p and not p.startswith("function-")
    ]
    return ".".join(kept)


#: Units read from a key's name (STYLE.md: names carry units), longest suffix first.
_UNIT_SUFFIXES = (
    ("_bytes_per_s", "bytes/s"),
    ("_per_s", "/s"),
    ("_ms", "ms"),
    ("_s", "s"),
    ("_tokens", "tokens"),
)
_BOUND_WORDS = {
    "greater_than": ">",
    "greater_than_equal": ">=",
    "less_than": "<",
    "less_than_equal": "<=",
}


def _unit(path: str) -> str:
    """The unit of the value at ``path``: from its own name, or the length it belongs to."""
    parts = path.split(".")
    for part in reversed(parts):
        for suffix, unit in _UNIT_SUFFIXES:
            if part.endswith(suffix):
                return unit
        if part not in ("value", "low", "high", "mean"):
            break
    return ""


def _annotation_models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through Optional, unions and Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    models: list[type[BaseModel]] = []
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, typing.Annotated):
        for arg in typing.get_args(annotation):
            models.extend(_annotation_models(arg))
    return models


def _keys_at(loc: tuple[int | str, ...]) -> list[str]:
    """The keys the schema allows in the mapping at ``loc`` (a pydantic error location)."""
    models: list[type[BaseModel]] = [Scenario]
    for part in loc:
        if not isinstance(part, str):
            continue
        inner = [m for m in models if part in m.model_fields]
        if inner:
            models = [
                nested
                for m in inner
                for nested in _annotation_models(m.model_fields[part].annotation)
            ]
    return sorted({key for m in models for key in m.model_fields})


def _message(error: Any, path: str) -> str:
    """One error as ``what is wrong, got VALUE``, with the unit and a close key where they help."""
    kind = error["type"]
    value = error.get("input")
    shown = repr(value) if not isinstance(value, dict) else "a mapping"
    if kind in _BOUND_WORDS:
        unit = _unit(path)
        bound = next(iter(error["ctx"].values()))
        unit_text = f" {unit}" if unit else ""
        return f"must be {_BOUND_WORDS[kind]} {bound:g}{unit_text}, got {shown}{unit_text}"
    if kind == "extra_forbidden":
        key = str(error["loc"][-1])
        close = difflib.get_close_matches(key, _keys_at(error["loc"][:-1]), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown key{hint}, got {shown}"
    if kind in ("int_type", "float_type", "bool_type", "string_type") and isinstance(value, bool):
        wanted = {"int_type": "a whole number", "float_type": "a number"}.get(kind, "text")
        return f"must be {wanted}, got {shown} (YAML reads yes/no/on/off/true/false as booleans)"
    message = error["msg"].removeprefix("Value error, ")
    # A model-level check names its own values; the whole mapping adds nothing.
    return message if isinstance(value, dict) else f"{message}, got {shown}"


def _format_errors(exc: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid scenario"]
    for error in exc.errors():
        path = _key_path(error["loc"])
        if error["type"] == UNKNOWN_METHOD:
            # The union picks the settings model by method: say what the method may be.
            value = error["input"]
            if not isinstance(value, dict):
                lines.append(f"  {path}: Input should be a mapping, got {value!r}")
                continue
            known = ", ".join(repr(m) for m in METHODS[:-1]) + f" or {METHODS[-1]!r}"
            got = value.get("method")
            lines.append(f"  {path}.method: Input should be {known}, got {got!r}")
            continue
        lines.append(f"  {path or '(top level)'}: {_message(error, path)}")
    return "\n".join(lines)
