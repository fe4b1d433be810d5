"""The exceptions specsim raises on purpose.

Every error a user can cause derives from :class:`SpecsimError`; the command line turns it into a
one-paragraph message and exit code 2, never a traceback.
"""

from __future__ import annotations


class SpecsimError(Exception):
    """Base class of every error specsim raises for bad input or an impossible configuration."""


class ScenarioError(SpecsimError):
    """A scenario file or override is invalid; the message names the key path and the value."""


class CatalogueError(SpecsimError):
    """A GPU or model is unknown, or a model does not fit on the chosen hardware."""


class CalibrationError(SpecsimError):
    """An artifact cannot be parsed or a fit cannot be made; the message names the file and line."""


class OutputError(SpecsimError):
    """An output would overwrite an input or an earlier result, or cannot be written where asked;
    the message says what exists and how to proceed (``--force`` or another path)."""


class InvariantError(RuntimeError):
    """An internal invariant was broken: a bug in specsim, never the user's fault.

    Deliberately not a :class:`SpecsimError`: the command line reports those as bad input (one
    line, exit 2) and a probe as "unsupported", which would hide a bug; this one crashes with its
    traceback."""
