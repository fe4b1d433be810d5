"""The scenario key ``speculation.acceptance`` and the factory that turns it into a model.

Exactly one source is given: ``alpha``, ``per_position``, ``mean_acceptance_length``, ``trace`` or
``profile``; ``trace_field`` and ``ngram_match_rate`` refine it. When the key is omitted
the default is,
in order: the shipped traces for the model and dataset (EAGLE-3 and n-gram on Llama-3.1-8B at
temperature 0, where per-request replay is the most faithful model we have); else the
shipped profile
for the method, model and dataset at the scenario's temperature; else a ScenarioError that asks for
an explicit key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from sim.acceptance.models import ConstantAlphaModel, PositionalAcceptanceModel, TargetTauModel
from sim.acceptance.plan import AcceptanceModel
from sim.acceptance.shipped_data import (
    PACKAGE_DATA_DIR,
    SHIPPED_TRACES,
    load_profile_document,
    load_shipped_traces,
    normalise_dataset,
    profile_key,
    profile_model,
)
from sim.acceptance.traces import TraceReplayModel, load_jsonl_traces
from sim.errors import InvariantError, ScenarioError
from sim.inputs import SCHEMA_CONFIG

SOURCE_KEYS = ("alpha", "per_position", "mean_acceptance_length", "trace", "profile")


class AcceptanceConfig(BaseModel):
    """``speculation.acceptance``: exactly one source of acceptance, plus optional refinements."""

    model_config = SCHEMA_CONFIG

    alpha: float | None = Field(default=None, ge=0.0, lt=1.0)
    per_position: tuple[float, ...] | None = Field(default=None, strict=False, max_length=64)
    # At most k + 1 tokens per verify step; k is at most 32 (speculation.num_speculative_tokens).
    mean_acceptance_length: float | None = Field(default=None, ge=1.0, le=33.0)
    trace: str | None = None
    profile: str | None = None
    trace_field: Literal["acc_eagle", "acc_ngram"] | None = None
    ngram_match_rate: float | None = Field(default=None, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _exactly_one_source(self) -> AcceptanceConfig:
        given = [key for key in SOURCE_KEYS if getattr(self, key) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(SOURCE_KEYS)}; got {given or 'none'}")
        if self.per_position is not None and (
            not self.per_position or any(not 0.0 <= rate <= 1.0 for rate in self.per_position)
        ):
            raise ValueError(f"per_position: rates must be a non-empty list in [0, 1], got "
                             f"{list(self.per_position)}")  # fmt: skip
        if self.trace_field is not None and self.trace is None:
            raise ValueError("trace_field applies only with trace")
        return self

    @property
    def source_key(self) -> str:
        """Which of the exclusive keys is set."""
        return next(key for key in SOURCE_KEYS if getattr(self, key) is not None)


def pair_name(model_name: str, draft_model: str | None) -> str:
    """The model part of an acceptance key: the target's name, or ``target+draft`` for a
    draft-model pair (acceptance depends on both)."""
    return f"{model_name}+{draft_model}" if draft_model else model_name


def _default_model(
    method: str,
    model_name: str,
    dataset: str | None,
    temperature: float,
    data_dir: Path,
    draft_model: str | None = None,
) -> AcceptanceModel:
    # Imported here: the method table's module imports this one (AcceptanceConfig).
    from sim.speculation import TRACE_METHODS

    name = f"{model_name}/{normalise_dataset(dataset)}"
    if method in TRACE_METHODS and temperature == 0.0 and name in SHIPPED_TRACES:
        return TraceReplayModel(
            load_shipped_traces(name, TRACE_METHODS[method], data_dir),
            field=TRACE_METHODS[method],
            provenance={"default": f"shipped traces {name} (acceptance key omitted)"},
        )
    pair = pair_name(model_name, draft_model)
    key = profile_key(method, pair, dataset)
    if key in load_profile_document(data_dir)["profiles"]:
        return profile_model(key, temperature, data_dir=data_dir)
    published = published_pair(method, pair, dataset, temperature, data_dir)
    if isinstance(published, AcceptanceConfig):
        return _build(published, method, data_dir, temperature, data_dir)
    drafted = f", draft {draft_model!r}" if draft_model else ""
    raise ScenarioError(
        f"speculation.acceptance: no shipped acceptance data for method {method!r}, model "
        f"{model_name!r}{drafted}, dataset {dataset!r} at temperature {temperature}"
        f"{'; ' + published if published else ''}; set one of {', '.join(SOURCE_KEYS)}"
    )


def published_pair(
    method: str, model_name: str, dataset: str | None, temperature: float, data_dir: Path
) -> AcceptanceConfig | str:
    """The published acceptance of a (method, model) pair of ``acceptance_published_pairs.yaml``
    at ``temperature`` (the dataset's own entry, else the pair's ``any``), or why there is none.
    ``model_name`` is :func:`pair_name`'s ``target+draft`` for a draft-model pair."""
    import yaml  # the file is read only when no profile covers the scenario

    document = yaml.safe_load((data_dir / "acceptance_published_pairs.yaml").read_text("utf-8"))
    for name in (normalise_dataset(dataset), "any"):
        entry = document["pairs"].get(f"{method}/{model_name}/{name}")
        if entry is not None and float(entry["temperature"]) == temperature:
            keys = {k: entry[k] for k in ("per_position", "mean_acceptance_length") if k in entry}
            return AcceptanceConfig(**keys)
    reason: str = document["not_published"].get(f"{method}/{model_name}", "")
    return reason


def _build(
    config: AcceptanceConfig, method: str, base_dir: Path, temperature: float, data_dir: Path
) -> AcceptanceModel:
    # Imported here: the method table's module imports this one (AcceptanceConfig).
    from sim.speculation import LOOKUP_METHODS, default_trace_field

    match_rate = config.ngram_match_rate
    # A lookup drafter (n-gram, suffix decoding) proposes nothing where its lookup finds no match.
    lookup = method in LOOKUP_METHODS
    chain_match = match_rate if (lookup and match_rate is not None) else 1.0
    if config.alpha is not None:
        return ConstantAlphaModel(config.alpha, match_rate=chain_match)
    if config.per_position is not None:
        return PositionalAcceptanceModel(list(config.per_position), match_rate=chain_match)
    if config.mean_acceptance_length is not None:
        return TargetTauModel(config.mean_acceptance_length, match_rate=chain_match)
    if config.profile is not None:
        # Imported here: sim.calibrated_profiles imports the acceptance models this package defines.
        from sim.calibrated_profiles import is_profile_reference, load_acceptance_profile

        if is_profile_reference(config.profile):
            return load_acceptance_profile(config.profile, base_dir, method)
        return profile_model(config.profile, temperature, match_rate, data_dir)
    if config.trace is None:
        raise InvariantError("speculation.acceptance: the validator let through no source")
    field = config.trace_field or default_trace_field(method)
    if config.trace in SHIPPED_TRACES:
        traces = load_shipped_traces(config.trace, field, data_dir)
    else:
        path = Path(config.trace)
        traces = load_jsonl_traces(path if path.is_absolute() else base_dir / path, field)
    rate = match_rate if field == "acc_ngram" else None
    return TraceReplayModel(traces, field=field, match_rate=rate)


def build_acceptance_model(
    config: AcceptanceConfig | None,
    method: str,
    model_name: str,
    dataset: str | None,
    temperature: float,
    base_dir: Path,
    data_dir: Path = PACKAGE_DATA_DIR,
    draft_model: str | None = None,
) -> AcceptanceModel:
    """The acceptance model for a scenario; ``base_dir`` resolves relative trace paths;
    ``draft_model`` names the draft of a draft-model scenario, whose shipped acceptance is that
    of the (target, draft) pair.

    Raise ScenarioError naming ``speculation.acceptance.<key>`` if a value is invalid, or naming
    ``speculation.acceptance`` if it is omitted and nothing is shipped for this scenario.
    """
    if method == "none":
        raise ScenarioError("speculation.acceptance: method 'none' verifies no draft tokens")
    if config is None:
        return _default_model(method, model_name, dataset, temperature, data_dir, draft_model)
    key = config.source_key
    try:
        return _build(config, method, base_dir, temperature, data_dir)
    except ScenarioError as error:
        message = str(error)
        if message.startswith("speculation.acceptance"):
            raise
        raise ScenarioError(f"speculation.acceptance.{key}: {message}") from error
