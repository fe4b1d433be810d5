"""The achieved hardware efficiencies the cost model runs at, one entry per catalogue GPU.

``sim/data/hardware_efficiency.yaml`` holds, per GPU, the four fields of
:class:`sim.cost_model.Efficiency`: the achieved fractions of peak HBM bandwidth and of dense bf16
tensor throughput, the p of the rounded roofline and the fixed time per GEMM kernel, each with its
95 % interval, the method and the sources. The H100 SXM values are fitted to measured operator
timings; the other GPUs carry them over by the rules stated in each entry (``docs/cost-model.md``).
"""

from __future__ import annotations

from typing import Any

from sim.cost_model import Efficiency
from sim.errors import CatalogueError
from sim.package_data import packaged_yaml

#: The packaged file, relative to the ``sim`` package.
EFFICIENCY_FILE = "data/hardware_efficiency.yaml"
#: The fields of an entry that make up an :class:`Efficiency`, in its constructor's order.
EFFICIENCY_FIELDS = ("bandwidth", "flops", "roofline_p", "gemm_floor_s")


def _table() -> dict[str, Any]:
    return packaged_yaml(EFFICIENCY_FILE, error=CatalogueError)


def load_efficiency(gpu_name: str) -> Efficiency:
    """The fitted or carried-over :class:`Efficiency` of the catalogue GPU ``gpu_name``.

    Every entry must give all of :data:`EFFICIENCY_FIELDS` as numbers (``roofline_p`` may be
    ``.inf`` for the sharp maximum). Raise CatalogueError naming the known GPUs if ``gpu_name`` has
    no entry, or naming the key path if an entry lacks a field or a value is out of range.
    """
    table = _table()
    if gpu_name not in table:
        raise CatalogueError(
            f"no hardware efficiency for GPU {gpu_name!r} in sim/{EFFICIENCY_FILE}; "
            f"known: {', '.join(sorted(table))}"
        )
    entry = table[gpu_name]
    values: list[float] = []
    for name in EFFICIENCY_FIELDS:
        value = entry.get(name) if isinstance(entry, dict) else None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise CatalogueError(
                f"sim/{EFFICIENCY_FILE}: {gpu_name}.{name} must be a number, got {value!r}"
            )
        values.append(float(value))
    try:
        return Efficiency(*values)
    except ValueError as exc:
        raise CatalogueError(f"sim/{EFFICIENCY_FILE}: {gpu_name}: {exc}") from None
