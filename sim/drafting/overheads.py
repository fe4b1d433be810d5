"""Fixed costs of drafting that no roofline explains: kernel launches, input preparation, sync.

A draft forward of a one-layer head moves a few hundred megabytes, a fraction of a millisecond on an
H100, yet measured speculative steps grow by far more per extra draft token (vLLM issue #20780):
launch and bookkeeping dominate. ``sim/data/draft_overheads.yaml`` gives, per engine preset and
method, a fixed time per draft forward and per speculative step, fitted by
``calibration/draft_overhead.py`` where measurements exist and carried over (stated) elsewhere,
plus the CPU cost of n-gram lookup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.engine.presets import get_preset
from sim.errors import CalibrationError
from sim.package_data import packaged_yaml

#: The packaged file, relative to the ``sim`` package.
OVERHEADS_FILE = "data/draft_overheads.yaml"
#: The numeric fields of an entry.
OVERHEAD_FIELDS = ("per_forward_s", "per_step_s", "cpu_per_seq_s", "cpu_per_context_token_s")


@dataclass(frozen=True)
class DraftOverheads:
    """Fixed drafting costs of one method on one engine.

    ``per_forward_s``: each draft forward (launch, CUDA-graph replay, sampling of the draft);
    ``per_step_s``: each speculative step that drafts (input preparation, metadata, sync);
    ``cpu_per_seq_s`` and ``cpu_per_context_token_s``: CPU lookup work (n-gram), per drafting
    sequence and per context token scanned. Raise ValueError if a value is negative.
    """

    per_forward_s: float = 0.0
    per_step_s: float = 0.0
    cpu_per_seq_s: float = 0.0
    cpu_per_context_token_s: float = 0.0

    def __post_init__(self) -> None:
        for name in OVERHEAD_FIELDS:
            if getattr(self, name) < 0:
                raise ValueError(f"draft overhead {name} must be >= 0, got {getattr(self, name)}")


def _document() -> dict[str, Any]:
    return packaged_yaml(OVERHEADS_FILE, section="presets", error=CalibrationError)


def overheads_document() -> dict[str, Any]:
    """The whole parsed overheads file (fit results, provenance and the values)."""
    return _document()


def load_draft_overheads(preset: str, method: str) -> DraftOverheads:
    """The fixed drafting costs of ``method`` on the engine ``preset``.

    ``preset`` is an engine preset or alias; its costs are the entry its ``draft_overheads_from``
    names (sim/data/engine_presets.yaml states each preset's rule), never a silent default.
    Raise ScenarioError if ``preset`` is unknown, CalibrationError naming the key path if that
    entry or method has none or a value is not a non-negative number.
    """
    preset = get_preset(preset).draft_overheads_from
    presets = _document()["presets"]
    entry = presets.get(preset, {}).get(method) if isinstance(presets.get(preset), dict) else None
    if not isinstance(entry, dict):
        raise CalibrationError(
            f"sim/{OVERHEADS_FILE}: no entry presets.{preset}.{method}; "
            f"known presets: {', '.join(sorted(presets))}"
        )
    values: dict[str, float] = {}
    for name in OVERHEAD_FIELDS:
        value = entry.get(name, 0.0)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise CalibrationError(
                f"sim/{OVERHEADS_FILE}: presets.{preset}.{method}.{name} must be a number >= 0, "
                f"got {value!r}"
            )
        values[name] = float(value)
    return DraftOverheads(**values)
