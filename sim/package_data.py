"""The YAML files shipped inside the package (``sim/data/...``), parsed once per process.

Every table of figures the simulator ships (engine presets, host costs, draft overheads, GEMM
efficiencies, MoE kernels) is read the same way: the text from the installed package, parsed,
checked to be a mapping (with a named top-level mapping where the file has one), and kept, since
package data does not change while a process runs.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml

from sim.errors import SpecsimError


@cache
def packaged_yaml(
    relative: str, *, section: str | None = None, error: type[SpecsimError] = SpecsimError
) -> dict[str, Any]:
    """``sim/<relative>`` parsed. Raise ``error`` naming the file if it is not valid YAML, not a
    mapping, or (with ``section``) lacks that key holding a mapping. The result is shared: read
    it, do not change it."""
    text = resources.files("sim").joinpath(relative).read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise error(f"sim/{relative}: not valid YAML ({exc})") from None
    if section is None:
        if not isinstance(data, dict):
            raise error(f"sim/{relative}: expected a mapping")
    elif not isinstance(data, dict) or not isinstance(data.get(section), dict):
        raise error(f"sim/{relative}: expected a mapping with '{section}'")
    return data
