"""The shipped acceptance data: calibrated profiles and the Llama-3.1-8B traces.

``sim/data/acceptance_profiles.yaml`` maps ``<method>/<model>/<dataset>`` to one entry per measured
temperature, each with per-position conditional rates, how they were fitted, the citation and the
lines of the published-measurements table they came from. ``acceptance_traces_llama31_8b.npz`` holds
the per-request traces replayed by ``trace: llama-3.1-8b/<dataset>``. Both are written by
``tools/build_acceptance_data.py``; nothing here reads outside the package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sim.acceptance.models import PositionalAcceptanceModel
from sim.acceptance.plan import offsets_from_counts
from sim.acceptance.traces import TRACE_FIELDS, TraceSet
from sim.errors import CalibrationError, ScenarioError
from sim.method_table import PROFILE_METHOD

PACKAGE_DATA_DIR = Path(__file__).resolve().parents[1] / "data"
PROFILES_FILE = "acceptance_profiles.yaml"
TRACES_FILE = "acceptance_traces_llama31_8b.npz"
SHIPPED_TRACES = (
    "llama-3.1-8b/sharegpt",
    "llama-3.1-8b/cnn",
    "llama-3.1-8b/gsm8k",
    "llama-3.1-8b/instructcoder",
)
DATASET_ALIASES = {
    "cnn/dm": "cnn", "cnn-dm": "cnn", "cnn_dm": "cnn", "cnn-dailymail": "cnn",
    "cnn_dailymail": "cnn",
    "mtbench": "mt-bench", "mt_bench": "mt-bench", "human-eval": "humaneval", "gsm-8k": "gsm8k",
}  # fmt: skip


def normalise_dataset(dataset: str | None) -> str | None:
    """The profile spelling of a dataset name (lower case, common aliases folded)."""
    if dataset is None:
        return None
    name = dataset.strip().lower()
    return DATASET_ALIASES.get(name, name)


def load_profile_document(data_dir: Path = PACKAGE_DATA_DIR) -> dict[str, Any]:
    """The parsed profiles file.

    Raise CalibrationError if it is missing or not a mapping with ``profiles``.
    """
    path = data_dir / PROFILES_FILE
    if not path.is_file():
        raise CalibrationError(f"{path}: shipped acceptance profiles are missing")
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(document, dict) or not isinstance(document.get("profiles"), dict):
        raise CalibrationError(f"{path}: expected a mapping with a 'profiles' key")
    return document


def load_shipped_traces(name: str, field: str, data_dir: Path = PACKAGE_DATA_DIR) -> TraceSet:
    """One shipped dataset's traces for ``field`` (``acc_eagle`` or ``acc_ngram``).

    Raise ScenarioError if the name or field is unknown, CalibrationError if the file is missing.
    """
    if name not in SHIPPED_TRACES:
        raise ScenarioError(
            f"speculation.acceptance.trace: unknown shipped trace {name!r}; shipped: "
            f"{', '.join(SHIPPED_TRACES)}"
        )
    if field not in TRACE_FIELDS:
        raise ScenarioError(
            f"speculation.acceptance.trace_field: must be one of {TRACE_FIELDS}, got {field!r}"
        )
    path = data_dir / TRACES_FILE
    if not path.is_file():
        raise CalibrationError(f"{path}: shipped acceptance traces are missing")
    dataset = name.split("/", 1)[1]
    with np.load(path) as arrays:
        acc_len = arrays[f"{dataset}/{field}/acc_len"]
        lengths = arrays[f"{dataset}/{field}/lengths"].astype(np.int64)
    return TraceSet(acc_len, offsets_from_counts(lengths), name)


def select_profile_entry(document: dict[str, Any], key: str, temperature: float) -> dict[str, Any]:
    """The entry of profile ``key`` measured at ``temperature``.

    Raise ScenarioError listing the shipped profiles, or the temperatures that exist for ``key``.
    """
    profiles = document["profiles"]
    if key not in profiles:
        raise ScenarioError(
            f"speculation.acceptance.profile: unknown profile {key!r}; shipped profiles: "
            f"{', '.join(sorted(profiles))}"
        )
    for entry in profiles[key]:
        if abs(float(entry["temperature"]) - temperature) < 1e-9:
            return dict(entry)
    available = sorted(float(entry["temperature"]) for entry in profiles[key])
    raise ScenarioError(
        f"speculation.acceptance.profile: {key!r} has no entry at workload.temperature = "
        f"{temperature}; measured temperatures: {available}"
    )


def profile_model(
    key: str,
    temperature: float,
    match_rate: float | None = None,
    data_dir: Path = PACKAGE_DATA_DIR,
) -> PositionalAcceptanceModel:
    """The positional model of a shipped profile at a temperature.

    An explicit ``match_rate`` overrides the profile's n-gram match rate.
    Raise ScenarioError if the profile or temperature does not exist.
    """
    document = load_profile_document(data_dir)
    entry = select_profile_entry(document, key, temperature)
    rate = entry.get("ngram_match_rate", 1.0) if match_rate is None else match_rate
    provenance = {
        "profile": key,
        "temperature": float(entry["temperature"]),
        "citation": entry["citation"],
        "source_ids": entry["source_ids"],
        "rows": entry.get("rows", []),
        "fit": entry["fit"],
    }
    return PositionalAcceptanceModel(
        entry["conditional_rates"],
        name="profile",
        match_rate=float(rate),
        sibling_decay=float(document["tree_rule"]["sibling_decay"]),
        provenance=provenance,
    )


def profile_key(method: str, model_name: str, dataset: str | None) -> str:
    """The profile key a scenario's method, model and dataset would use."""
    return f"{PROFILE_METHOD.get(method, method)}/{model_name}/{normalise_dataset(dataset)}"
