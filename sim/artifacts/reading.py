"""Reading artifact files and turning their raw values into checked numbers.

Every parser goes through these helpers so that a file which is not what it claims to be always
ends in one :class:`~sim.errors.CalibrationError` naming the file, the line (where one applies) and
what was expected, and never in a bare KeyError, ValueError or JSONDecodeError.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np

from sim.errors import CalibrationError
from sim.inputs import InputError, decode_text

_WHITESPACE = re.compile(r"\s*")
_NUMBER_TYPES = {int, float, type(None)}


@dataclass(frozen=True)
class Source:
    """The text of one artifact file with its path and SHA-256 digest."""

    path: Path
    text: str
    sha256: str


def read_source(path: Path) -> Source:
    """Read ``path`` as UTF-8 text and hash its bytes.

    Raise CalibrationError if the file cannot be read, is UTF-16/UTF-32 or binary, or holds a
    byte that is not UTF-8 (naming its line).
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise CalibrationError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    try:
        text = decode_text(raw, str(path))
    except InputError as exc:
        raise CalibrationError(str(exc)) from None
    return Source(Path(path), text, hashlib.sha256(raw).hexdigest())


def failure(source: Source | Path, expected: str, line: int | None = None) -> CalibrationError:
    """Build the error for a file that is not what it claims: file, line and what was expected."""
    path = source.path if isinstance(source, Source) else source
    where = f"{path}: line {line}" if line is not None else f"{path}"
    return CalibrationError(f"{where}: expected {expected}")


def json_documents(source: Source) -> list[tuple[int, object]]:
    """Return the JSON values in the file with the line each starts on.

    Accepts one JSON document, or several separated by whitespace (JSON Lines, or objects appended
    by ``--append-result``). ``NaN`` and ``Infinity`` literals are accepted, as Python writes them.
    Raise CalibrationError naming the line of the first value that does not decode.
    """
    text = source.text
    try:
        return [(1, json.loads(text))]
    except (ValueError, RecursionError):
        pass
    decoder = json.JSONDecoder()
    documents: list[tuple[int, object]] = []
    position, line, counted_to = 0, 1, 0
    while True:
        position = _WHITESPACE.match(text, position).end()  # type: ignore[union-attr]
        if position >= len(text):
            break
        line += text.count("\n", counted_to, position)
        counted_to = position
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            raise failure(source, f"a JSON value ({exc.msg})", exc.lineno) from None
        except (ValueError, RecursionError):
            raise failure(source, "a JSON value of reasonable size and depth", line) from None
        documents.append((line, value))
    if not documents:
        raise failure(source, "at least one JSON object, found an empty file")
    return documents


def json_objects(source: Source) -> list[tuple[int, dict[str, object]]]:
    """Return the file's JSON values, each required to be an object.

    Raise CalibrationError naming the line of the first value that is not an object.
    """
    objects: list[tuple[int, dict[str, object]]] = []
    for line, value in json_documents(source):
        if not isinstance(value, dict):
            raise failure(source, f"a JSON object, found {type(value).__name__}", line)
        objects.append((line, value))
    return objects


def as_float(value: object, source: Source, what: str, line: int | None = None) -> float:
    """Return ``value`` as a float; JSON numbers and numeric strings such as ``"inf"`` are accepted.

    Raise CalibrationError if it is anything else (booleans included).
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise failure(source, f"{what} to be a number, got {value!r:.60}", line)
    try:
        return float(value)
    except (ValueError, OverflowError):
        raise failure(source, f"{what} to be a number, got {value!r:.60}", line) from None


def optional_float(
    value: object, source: Source, what: str, line: int | None = None
) -> float | None:
    """Return ``value`` as a float, or None when it is absent (None)."""
    return None if value is None else as_float(value, source, what, line)


def as_count(value: object, source: Source, what: str, line: int | None = None) -> int:
    """Return ``value`` as a non-negative integer count; integral floats such as 6.49e6 are
    accepted.

    Raise CalibrationError if it is not a finite non-negative whole number.
    """
    number = as_float(value, source, what, line)
    if not math.isfinite(number) or number < 0 or number != round(number):
        raise failure(source, f"{what} to be a non-negative whole number, got {value!r:.60}", line)
    return round(number)


def rate_per_s(value: object, source: Source, what: str, line: int | None = None) -> float | None:
    """Return a request rate in 1/s, or None for an unlimited (``"inf"``/Infinity) or absent rate.

    Raise CalibrationError for a rate that is negative, NaN or not a number.
    """
    if value is None:
        return None
    rate = as_float(value, source, what, line)
    if math.isnan(rate) or rate < 0:
        raise failure(source, f"{what} to be a non-negative rate or 'inf', got {value!r:.60}", line)
    return None if math.isinf(rate) else rate


def float_array(values: object, source: Source, what: str, line: int | None = None) -> np.ndarray:
    """Return a list of numbers as a float64 array (None becomes NaN).

    Raise CalibrationError if ``values`` is not a flat list of numbers.
    """
    if not isinstance(values, list):
        raise failure(source, f"{what} to be a list of numbers", line)
    if not set(map(type, values)) <= _NUMBER_TYPES:
        raise failure(source, f"{what} to hold numbers only", line)
    try:
        return np.asarray(values, dtype=np.float64).reshape(len(values))
    except (TypeError, ValueError, OverflowError):
        raise failure(source, f"{what} to be a flat list of numbers", line) from None


def count_array(values: object, source: Source, what: str, line: int | None = None) -> np.ndarray:
    """Return a list of non-negative whole numbers as an int64 array.

    Raise CalibrationError if any entry is missing, negative, fractional or not a number.
    """
    array = float_array(values, source, what, line)
    if not np.all(np.isfinite(array)) or np.any(array < 0) or np.any(array != np.round(array)):
        raise failure(source, f"{what} to hold non-negative whole numbers", line)
    if np.any(array > 2**62):
        raise failure(source, f"{what} to hold counts below 2**62", line)
    return array.astype(np.int64)


def float_lists(
    values: object, source: Source, what: str, line: int | None = None
) -> tuple[np.ndarray, ...]:
    """Return a list of lists of numbers (e.g. per-request ITLs) as a tuple of float64 arrays.

    All values are converted in one pass and split afterwards, which keeps a million ITLs fast.
    Raise CalibrationError if any element is not a flat list of numbers.
    """
    if not isinstance(values, list) or not all(isinstance(v, list) for v in values):
        raise failure(source, f"{what} to be a list of lists of numbers", line)
    flat = float_array(list(chain.from_iterable(values)), source, what, line)
    ends = np.cumsum([len(v) for v in values])
    return tuple(np.split(flat, ends[:-1])) if values else ()


def string_list(
    values: object, source: Source, what: str, line: int | None = None
) -> tuple[str | None, ...]:
    """Return a list of strings with empty strings (and nulls) turned into None.

    Raise CalibrationError if an element is neither a string nor null.
    """
    if not isinstance(values, list) or not all(v is None or isinstance(v, str) for v in values):
        raise failure(source, f"{what} to be a list of strings", line)
    return tuple(v if v else None for v in values)


def same_lengths(
    columns: dict[str, Sequence[object] | np.ndarray], source: Source, line: int | None = None
) -> int:
    """Return the common length of the per-request columns.

    Raise CalibrationError naming the two columns whose lengths differ.
    """
    lengths = {name: len(column) for name, column in columns.items()}
    if not lengths:
        return 0
    first_name, first_length = next(iter(lengths.items()))
    for name, length in lengths.items():
        if length != first_length:
            raise failure(
                source,
                f"per-request arrays of one length, but {first_name} has {first_length} "
                f"and {name} has {length}",
                line,
            )
    return first_length
