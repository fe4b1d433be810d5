"""Reading what a user gives specsim: text decoded strictly, YAML loaded within bounds.

Every scenario file, ``--set`` value, trace and artifact goes through these two functions, so a
file that is not what it claims ends in one error naming the file and the line, never in a
``UnicodeDecodeError``, a ``RecursionError`` or a process that grows without bound:

- :func:`read_text` decodes UTF-8 (a UTF-8 byte-order mark is allowed) and refuses UTF-16/UTF-32
  text, binary files and undecodable bytes, naming the line of the first bad byte.
- :func:`load_yaml` is PyYAML's safe loader with three refusals added: nesting deeper than
  :data:`MAX_DEPTH`; aliases whose expansion would exceed :data:`MAX_NODES` nodes (the "billion
  laughs" document, ten aliases of ten aliases..., is a few hundred bytes that expand to 10⁹
  nodes); and a key given twice in one mapping, named with both lines. YAML 1.1's ``yes``/``no``
  still read as booleans; the schema's strict types then refuse a boolean where a number is due.
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ConfigDict

#: Nesting deeper than this is refused. No specsim document nests more than 6 levels; PyYAML's
#: composer recurses about 3 Python frames per level and would hit the interpreter's limit near 300.
MAX_DEPTH = 64
#: Nodes a document may hold once aliases are expanded. The largest shipped document (a fleet with
#: per-group overrides) holds a few hundred; a million keeps memory in megabytes.
MAX_NODES = 1_000_000

#: The configuration every scenario-schema model uses: unknown keys refused, values frozen,
#: NaN and infinities refused, and no coercion (``true`` is not a count, ``"8"`` is not a number).
SCHEMA_CONFIG = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)

_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


class InputError(ValueError):
    """A text or YAML input is malformed; the message names the source and, where known, the
    line. Callers re-raise it as their own SpecsimError subclass."""


def decode_text(raw: bytes, source: str) -> str:
    """Decode ``raw`` as UTF-8 text, naming ``source`` and the line of the first bad byte.

    Raise InputError for UTF-16/UTF-32 text, binary content (NUL bytes) or invalid UTF-8.
    """
    for bom, name in _BOMS:
        if raw.startswith(bom):
            raise InputError(f"{source}: the file is {name} text; save it as UTF-8")
    nul = raw.find(b"\x00")
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        raise InputError(f"{source}: line {line}: a NUL byte; this is a binary file, not text")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        bad = raw[exc.start : exc.start + 1].hex()
        raise InputError(
            f"{source}: line {line}: byte 0x{bad} is not UTF-8; save the file as UTF-8"
        ) from None


def read_text(path: Path) -> str:
    """The text of ``path``, decoded as :func:`decode_text` does.

    Raise InputError if the file cannot be read or is not UTF-8 text.
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    return decode_text(raw, str(path))


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses deep nesting, duplicate keys and alias bombs."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.MarkedYAMLError(
                    problem=f"nesting deeper than {MAX_DEPTH} levels", problem_mark=mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = key_node.value
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise yaml.MarkedYAMLError(
                        problem=f"key {key!r} given twice (lines {seen[key]} and {line})",
                        problem_mark=key_node.start_mark,
                    )
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


# YAML 1.1 wants a dot in a float ("1.0e-3"); users write "1e-3" as YAML 1.2 and JSON do. Without
# this resolver "1e-3" is the string '1e-3', which the strict schema would refuse as not a number.
_BoundedLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _expanded_size(root: yaml.Node) -> int:
    """Nodes in the document once every alias is expanded; refuse a cycle.

    Shared (aliased) nodes are counted once per use, which is what building plain Python data and
    validating it costs. Sizes are memoised per node, so this is linear in the composed graph.
    """
    sizes: dict[int, int] = {}
    active: set[int] = set()
    # An explicit stack: the graph may be as deep as MAX_DEPTH, never recursion-limited.
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        if children_done:
            active.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in children)
            if sizes[key] > MAX_NODES:
                raise yaml.MarkedYAMLError(
                    problem=f"aliases expand to more than {MAX_NODES:,} nodes",
                    problem_mark=node.start_mark,
                )
            continue
        if key in active:
            raise yaml.MarkedYAMLError(
                problem="an alias refers to a node that contains it", problem_mark=node.start_mark
            )
        active.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in sizes)
    return sizes[id(root)]


def load_yaml(text: str, source: str) -> Any:
    """Parse one YAML document safely, within the depth, size and duplicate-key bounds.

    Raise InputError naming ``source`` and the line for invalid YAML, nesting deeper than
    MAX_DEPTH, aliases expanding past MAX_NODES nodes, a recursive alias or a repeated key.
    """
    loader: _BoundedLoader | None = None
    try:
        # The reader checks every character as it is made: a control character refuses here.
        loader = _BoundedLoader(text)
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node)
        return loader.construct_document(node)
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise InputError(
            f"{source}: line {line}: not valid YAML: control character #x{exc.character:04x} "
            "is not allowed"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(f"{source}:{where} not valid YAML: {problem}") from None
    except RecursionError:
        raise InputError(f"{source}: not valid YAML: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()
