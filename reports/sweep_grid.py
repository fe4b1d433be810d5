"""A sweep's grid as data: ``--grid KEY.PATH=V1,V2,...`` flags become axes, and their cartesian
product over the scenario becomes points, each identified by the hash of its resolved scenario
(every default written out), so the same point always has the same identity whatever the order
of the grid or of ``--set``.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from dataclasses import dataclass
from typing import Any

import yaml

from sim.errors import ScenarioError
from sim.run import resolve_engine, resolved_document
from sim.scenario import Scenario, apply_override, validate_document

HASH_CHARS = 12


@dataclass(frozen=True)
class GridAxis:
    """One ``--grid KEY=V1,V2,…`` flag: a key path and its raw (YAML) values, in order."""

    key: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class SweepPoint:
    """One cartesian combination: its grid values, validated document and identity."""

    values: dict[str, Any]
    document: dict[str, Any]
    resolved: dict[str, Any]
    point_id: str


def split_values(text: str) -> list[str]:
    """Split ``a,b,[1, 2],{k: v}`` on the commas outside brackets, braces and quotes."""
    parts: list[str] = []
    depth, quote, start = 0, "", 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [part.strip() for part in parts]


def parse_grid(flags: list[str]) -> list[GridAxis]:
    """The axes of ``--grid KEY=V1,V2,…`` flags.

    Raise ScenarioError naming the flag if it has no ``=``, an empty value, or repeats a key.
    """
    axes: list[GridAxis] = []
    for flag in flags:
        key, sep, raw = flag.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ScenarioError(f"--grid {flag!r}: expected KEY.PATH=V1,V2,...")
        values = split_values(raw)
        if any(not value for value in values):
            raise ScenarioError(f"--grid {flag!r}: empty value in the list")
        if any(axis.key == key for axis in axes):
            raise ScenarioError(f"--grid {key}: the key is given twice")
        axes.append(GridAxis(key, tuple(values)))
    if not axes:
        raise ScenarioError("--grid: give at least one KEY=V1,V2,... axis")
    return axes


def point_identity(resolved: dict[str, Any]) -> str:
    """The first hex digits of SHA-256 over the resolved scenario's canonical JSON."""
    canonical = json.dumps(resolved, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:HASH_CHARS]


def resolve(scenario: Scenario) -> dict[str, Any]:
    """The scenario with the engine preset's defaults written out (as saved beside results)."""
    return resolved_document(scenario, resolve_engine(scenario))


def expand_grid(document: dict[str, Any], axes: list[GridAxis], source: str) -> list[SweepPoint]:
    """Every point of the cartesian grid, each validated before any is run.

    Raise ScenarioError naming the point and key path of the first invalid one, or if two grid
    values resolve to the same scenario.
    """
    points: list[SweepPoint] = []
    seen: dict[str, dict[str, Any]] = {}
    for combination in itertools.product(*(axis.values for axis in axes)):
        variant = copy.deepcopy(document)
        values: dict[str, Any] = {}
        for axis, raw in zip(axes, combination, strict=True):
            apply_override(variant, f"{axis.key}={raw}")
            values[axis.key] = yaml.safe_load(raw)
        label = ", ".join(f"{axis.key}={raw}" for axis, raw in zip(axes, combination, strict=True))
        scenario = validate_document(variant, f"{source} (point {label})")
        resolved = resolve(scenario)
        point_id = point_identity(resolved)
        if point_id in seen:
            raise ScenarioError(
                f"--grid: points {seen[point_id]} and {values} resolve to the same scenario"
            )
        seen[point_id] = values
        points.append(SweepPoint(values, variant, resolved, point_id))
    return points
