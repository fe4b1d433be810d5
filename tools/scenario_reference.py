"""Write docs/scenario-reference.md from the scenario schema, so the reference cannot drift.

``python -m tools.scenario_reference`` prints the page; ``--write`` replaces
``docs/scenario-reference.md``. ``tests/test_scenario_reference.py`` fails when the file differs
from what the schema gives, i.e. whenever a key, a default or a limit changed without it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "scenario-reference.md"
HEADER = """# Scenario file reference

Every key a scenario file (YAML) may hold, with its type, default and limits. This page is
generated from the schema that validates scenarios (`python -m tools.scenario_reference --write`;
a test fails when it is out of date), so it is complete and current. A key not listed here is an
error, reported with its path (`workload.arival: Extra inputs are not permitted`). Any key can
also be set from the command line: `--set workload.arrival.rate_per_s=8`. The same schema as
JSON Schema, for an editor's completion: `specsim schema --out scenario.schema.json`.
"""


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    resolved: dict[str, Any] = schema["$defs"][ref.rsplit("/", 1)[1]]
    return resolved


def _variants(node: dict[str, Any]) -> list[dict[str, Any]]:
    return list(node.get("anyOf") or node.get("oneOf") or [])


def _type(schema: dict[str, Any], node: dict[str, Any]) -> str:
    """The value's type in words (``integer``, ``string or null``, ``list of number``)."""
    if "enum" in node:
        return "one of " + ", ".join(f"`{v}`" for v in node["enum"])
    if "const" in node:
        return f"`{node['const']}`"
    if "$ref" in node:
        return "mapping (below)"
    variants = _variants(node)
    if variants:
        names = []
        for variant in variants:
            text = _type(schema, variant)
            if text not in names:
                names.append(text)
        return " or ".join(names)
    kind = node.get("type")
    if kind == "array":
        items = node.get("items")
        if isinstance(items, dict) and items:
            return f"list of {_type(schema, items)}"
        prefix = node.get("prefixItems")
        if prefix:
            return "list of " + ", ".join(_type(schema, p) for p in prefix)
        return "list"
    if kind == "object":
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            return f"mapping of {_type(schema, extra)}"
        return "mapping"
    return {"null": "null", "number": "number"}.get(str(kind), str(kind))


def _limits(node: dict[str, Any]) -> str:
    """The value's limits (``>= 1``, ``> 0 and < 1``, ``at least 1 item``)."""
    words = []
    for key, sign in (
        ("minimum", ">="),
        ("exclusiveMinimum", ">"),
        ("maximum", "<="),
        ("exclusiveMaximum", "<"),
    ):
        if key in node:
            value = node[key]
            words.append(f"{sign} {value:,}" if isinstance(value, int) else f"{sign} {value:g}")
    if "minItems" in node:
        words.append(f"at least {node['minItems']} item(s)")
    if "minLength" in node:
        words.append(f"at least {node['minLength']} character(s)")
    for variant in _variants(node):
        inner = _limits(variant)
        if inner and inner not in words:
            words.append(inner)
    return " and ".join(words)


def _default(node: dict[str, Any]) -> str:
    if "default" not in node:
        return "required"
    value = node["default"]
    if isinstance(value, dict):
        return "see its keys"
    return f"`{json.dumps(value)}`"


def _first_paragraph(text: str | None) -> str:
    if not text:
        return ""
    return " ".join(text.strip().split("\n\n", 1)[0].split()).replace("``", "`")


#: What a bare ``string`` stands for at these key paths.
HINTS = {
    "model": "a catalogue model or its Hugging Face id (`specsim catalogue models`)",
    "speculation.draft_model": "a catalogue model or its Hugging Face id",
    "hardware.gpu": (
        "a catalogue GPU, or a CPU socket for `engine.preset: llamacpp` (`specsim catalogue gpus`)"
    ),
    "speculation.acceptance.profile": "`method/model/dataset` (`specsim catalogue methods`)",
    "workload.dataset": "the dataset whose acceptance is replayed (sharegpt, mt-bench, ...)",
    "engine.profile": "a profile file written by `specsim calibrate`",
}


def _object_section(
    schema: dict[str, Any],
    path: str,
    model: dict[str, Any],
    note: str,
    out: list[str],
    seen: set[str] | None = None,
) -> None:
    """A heading for the mapping at ``path``, its description, one row per key, then every
    nested mapping and every variant of a union, each in its own section (a section two
    variants share, such as ``speculation.acceptance``, once)."""
    seen = set() if seen is None else seen
    heading = f"## `{path}`{note}"
    if heading in seen:
        return
    seen.add(heading)
    out.append(heading)
    out.append("")
    description = _first_paragraph(model.get("description"))
    if description:
        out.extend([description, ""])
    properties: dict[str, Any] = model.get("properties") or {}
    if not properties:
        out.extend(["(no keys)", ""])
        return
    out.append("| key | type | default | limits |")
    out.append("|---|---|---|---|")
    nested: list[tuple[str, dict[str, Any], str]] = []
    for key, node in properties.items():
        limits = _limits(node).replace("|", "\\|")
        child = f"{path}.{key}".removeprefix("(top level).")
        kind = _type(schema, node)
        if child in HINTS:
            kind += f": {HINTS[child]}"
        out.append(f"| `{key}` | {kind} | {_default(node)} | {limits} |")
        if "$ref" in node:
            nested.append((child, _resolve(schema, node), ""))
        for variant in _variants(node):
            if "$ref" not in variant:
                continue
            target = _resolve(schema, variant)
            tag = _union_tag(target)
            nested.append((child, target, f" with {tag}" if tag else " (as a mapping)"))
    out.append("")
    for child, target, child_note in nested:
        _object_section(schema, child, target, child_note, out, seen)


def _union_tag(model: dict[str, Any]) -> str:
    """``process: gamma``: the discriminator key and value that pick this variant, if any
    (``method`` picks a family of drafting methods: all of them are named)."""
    method = (model.get("properties") or {}).get("method") or {}
    if len(method.get("enum", ())) > 1:
        return "`method` " + ", ".join(f"`{value}`" for value in method["enum"])
    for key in ("process", "distribution", "policy", "kind"):
        node = (model.get("properties") or {}).get(key) or {}
        value = node.get("const", node.get("default"))
        if "const" in node or ("enum" in node and len(node["enum"]) == 1):
            value = node.get("const", node["enum"][0] if "enum" in node else value)
            return f"`{key}: {value}`"
    return ""


def scenario_reference() -> str:
    """The whole page, from :func:`sim.scenario.scenario_json_schema`."""
    from sim.scenario import scenario_json_schema

    schema = scenario_json_schema()
    out = [HEADER]
    _object_section(schema, "(top level)", schema, "", out)
    text = "\n".join(out).rstrip() + "\n"
    return text.replace("## `(top level).", "## `")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--write", action="store_true", help=f"replace {PAGE.relative_to(ROOT)}")
    args = parser.parse_args()
    text = scenario_reference()
    if args.write:
        PAGE.write_text(text, encoding="utf-8")
        print(f"wrote {PAGE.relative_to(ROOT)} ({len(text.splitlines())} lines)")
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
