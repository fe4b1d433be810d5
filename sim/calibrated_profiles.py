"""Calibrated profiles: what ``specsim calibrate`` fitted, read back for scenarios to use.

A profile is a YAML file with ``provenance`` (inputs and their SHA-256, engine version, method,
date), an optional ``engine`` section (the fitted per-step and per-sequence overheads, optionally an
``efficiency`` override of the GPU's four cost-model fractions; a fit by simulation adds its
``parameters`` table, each row fitted with its interval or fixed with the reason) and an optional
``acceptance`` section (one fitted law per drafting method). A top-level ``warnings`` list, when
present, says what the fit could not do (a parameter fixed or ended on a bound, an approximation of
the rebuilt run); it is for the reader and changes nothing here. Scenarios name a profile by path
(``*.yaml``, relative to the scenario file) or by the name of a profile shipped in
``sim/data/profiles/``:
``engine.profile`` takes the engine values, ``speculation.acceptance.profile`` the acceptance law.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.acceptance.models import PositionalAcceptanceModel, TargetTauModel
from sim.acceptance.plan import AcceptanceModel
from sim.cost_model import Efficiency
from sim.errors import ScenarioError
from sim.inputs import InputError, load_yaml, read_text

#: Where shipped calibrated profiles live (package data of ``sim``).
PROFILE_DIR = Path(__file__).resolve().parent / "data" / "profiles"
PROFILE_SUFFIXES = (".yaml", ".yml")
FORMAT_VERSION = 1


@dataclass(frozen=True)
class EngineProfile:
    """The engine values a calibrated profile fixes, with where they came from.

    ``efficiency`` is None when the profile keeps the GPU's shipped efficiency. ``overheads_s``
    holds every ``*_overhead_s`` value of the engine section (the two above and any term a fit by
    simulation added, e.g. ``per_token_overhead_s``), for the engine to apply.
    """

    name: str
    step_overhead_s: float
    per_sequence_overhead_s: float
    efficiency: Efficiency | None
    gpu: str | None
    model: str | None
    tensor_parallel_size: int | None
    provenance: dict[str, Any]
    overheads_s: dict[str, float] = field(default_factory=dict)


def shipped_profile_names() -> list[str]:
    """Names of the profiles shipped in ``sim/data/profiles/`` (file stems)."""
    if not PROFILE_DIR.is_dir():
        return []
    return sorted(p.stem for p in PROFILE_DIR.iterdir() if p.suffix in PROFILE_SUFFIXES)


def is_profile_reference(value: str) -> bool:
    """Whether ``value`` names a calibrated profile (a YAML path or a shipped profile name)."""
    return value.endswith(PROFILE_SUFFIXES) or value in shipped_profile_names()


def read_profile(name_or_path: str, base_dir: Path, key: str) -> tuple[dict[str, Any], str]:
    """The parsed profile document and the label it is reported under.

    Raise ScenarioError naming ``key`` if the profile does not exist, is not YAML or is not a
    calibrated profile (no ``provenance``).
    """
    if name_or_path.endswith(PROFILE_SUFFIXES):
        path = Path(name_or_path).expanduser()
        path = path if path.is_absolute() else base_dir / path
    else:
        path = PROFILE_DIR / f"{name_or_path}.yaml"
        if not path.is_file():
            raise ScenarioError(
                f"{key}: unknown profile {name_or_path!r}; give a path to a .yaml profile or one "
                f"of the shipped profiles: {', '.join(shipped_profile_names()) or 'none'}"
            )
    if not path.is_file():
        raise ScenarioError(f"{key}: profile file {name_or_path!r} not found")
    try:
        document = load_yaml(read_text(path), str(path))
    except InputError as exc:
        raise ScenarioError(f"{key}: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("provenance"), dict):
        raise ScenarioError(
            f"{key}: {name_or_path}: not a calibrated profile (expected a mapping with "
            "'provenance'; write one with specsim calibrate)"
        )
    return document, name_or_path


#: The scenario schema's bound on host overheads (sim.scenario.MAX_OVERHEAD_S): a profile is
#: held to the same range as the keys it stands in for.
MAX_PROFILE_OVERHEAD_S = 1.0


def _number(section: dict[str, Any], name: str, key: str, label: str) -> float:
    value = section.get(name)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= MAX_PROFILE_OVERHEAD_S
    ):
        raise ScenarioError(
            f"{key}: {label}: engine.{name} must be a number in [0, "
            f"{MAX_PROFILE_OVERHEAD_S:g}] s, got {value!r}"
        )
    return float(value)


def load_engine_profile(name_or_path: str, base_dir: Path) -> EngineProfile:
    """The engine values of a calibrated profile, for the scenario key ``engine.profile``.

    Raise ScenarioError naming ``engine.profile`` if the profile is missing or malformed, or has no
    ``engine`` section (e.g. an acceptance-only profile).
    """
    key = "engine.profile"
    document, label = read_profile(name_or_path, base_dir, key)
    engine = document.get("engine")
    if not isinstance(engine, dict):
        raise ScenarioError(f"{key}: {label} has no engine section (it fits acceptance only)")
    efficiency = None
    if engine.get("efficiency") is not None:
        values = engine["efficiency"]
        try:
            efficiency = Efficiency(
                float(values["bandwidth"]),
                float(values["flops"]),
                float(values.get("roofline_p", float("inf"))),
                float(values.get("gemm_floor_s", 0.0)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ScenarioError(f"{key}: {label}: engine.efficiency is invalid ({exc})") from None
    tp = engine.get("tensor_parallel_size")
    overheads = {
        name: _number(engine, name, key, label)
        for name in engine
        if isinstance(name, str) and name.endswith("_overhead_s")
    }
    return EngineProfile(
        name=label,
        step_overhead_s=_number(engine, "step_overhead_s", key, label),
        per_sequence_overhead_s=_number(engine, "per_sequence_overhead_s", key, label),
        efficiency=efficiency,
        gpu=engine.get("gpu"),
        model=engine.get("model"),
        tensor_parallel_size=int(tp) if isinstance(tp, int) else None,
        provenance=dict(document["provenance"]),
        overheads_s=overheads,
    )


def load_acceptance_profile(name_or_path: str, base_dir: Path, method: str) -> AcceptanceModel:
    """The acceptance law a calibrated profile fitted for ``method``.

    The entry named ``method`` is used; else ``any`` (counters that did not name their method);
    else the only entry. Raise ScenarioError naming ``speculation.acceptance.profile`` if there is
    no acceptance section, no entry fits, or the entry has neither rates nor a mean length.
    """
    key = "speculation.acceptance.profile"
    document, label = read_profile(name_or_path, base_dir, key)
    section = document.get("acceptance")
    if not isinstance(section, dict) or not section:
        raise ScenarioError(f"{key}: {label} has no acceptance section")
    if method in section:
        chosen = method
    elif "any" in section:
        chosen = "any"
    elif len(section) == 1:
        chosen = next(iter(section))
    else:
        raise ScenarioError(
            f"{key}: {label} has no acceptance for method {method!r}; it has {sorted(section)}"
        )
    entry = section[chosen]
    provenance = {"profile": label, "entry": chosen, "fit": entry.get("fit")}
    rates = entry.get("conditional_rates")
    if rates:
        return PositionalAcceptanceModel(
            [float(r) for r in rates], name="calibrated_profile", provenance=provenance
        )
    tau = entry.get("mean_acceptance_length")
    if isinstance(tau, int | float) and not isinstance(tau, bool):
        return TargetTauModel(float(tau))
    raise ScenarioError(
        f"{key}: {label}: acceptance.{chosen} has neither conditional_rates nor "
        "mean_acceptance_length"
    )
