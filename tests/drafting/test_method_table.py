"""The one table of drafting methods (sim/speculation.py): every method has its settings family,
its builder and its support rows, and a tree given to a method that never drafts one is refused
when the scenario is loaded, naming the key."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest
import yaml

from calibration.draft_overhead import FIT_METHODS, fit_points
from sim.acceptance.config import AcceptanceConfig, build_acceptance_model
from sim.acceptance.plan import Proposal
from sim.drafting import BUILDERS
from sim.errors import ScenarioError
from sim.scenario import load_scenario, validate_document
from sim.speculation import (
    ADAPTIVE_METHODS,
    CHAIN_ONLY_METHODS,
    FITTED_OVERHEAD_METHODS,
    HIDDEN_STATE_DRAFTERS,
    LOOKUP_METHODS,
    METHOD_TABLE,
    METHODS,
    SUPPORT,
    TRACE_METHODS,
    ChainMethodName,
    ChainSpeculationConfig,
    MethodFacts,
    TreeMethodName,
    TreeSpeculationConfig,
)
from sim.speculation import (
    BUILDERS as METHOD_BUILDERS,
)
from sim.validate import ISSUE_20780_TPOT_MS

ROOT = Path(__file__).resolve().parents[2]


def test_every_method_has_one_family_one_builder_and_an_engine_or_a_reason() -> None:
    tree_methods = typing.get_args(TreeMethodName)
    assert sorted(CHAIN_ONLY_METHODS + tree_methods) == sorted(METHODS)
    assert not set(CHAIN_ONLY_METHODS) & set(tree_methods)
    assert list(METHOD_BUILDERS) == list(METHODS)
    assert set(BUILDERS) == set(METHODS) and all(callable(b) for b in BUILDERS.values())
    for engine in SUPPORT.values():
        assert set(engine) <= set(METHODS)


def test_every_method_states_every_fact_once_and_the_lists_derive_from_the_table() -> None:
    # No fact has a default, so a row that leaves one out cannot be written.
    facts = dataclasses.fields(MethodFacts)
    assert all(f.default is dataclasses.MISSING for f in facts)
    assert all(f.default_factory is dataclasses.MISSING for f in facts)
    assert list(METHOD_TABLE) == list(METHODS)
    for method, row in METHOD_TABLE.items():
        assert ":" in row.builder, method
        for fact in ("chain_only", "reads_hidden_states", "adaptive_k", "proposes_on_match",
                     "fitted_draft_overhead"):  # fmt: skip
            assert isinstance(getattr(row, fact), bool), (method, fact)
        assert row.trace_field is None or isinstance(row.trace_field, str), method
    # The settings family's static type says what the table's column says.
    assert typing.get_args(ChainMethodName) == CHAIN_ONLY_METHODS
    for derived, fact in (
        (HIDDEN_STATE_DRAFTERS, "reads_hidden_states"),
        (ADAPTIVE_METHODS, "adaptive_k"),
        (LOOKUP_METHODS, "proposes_on_match"),
        (FITTED_OVERHEAD_METHODS, "fitted_draft_overhead"),
    ):
        assert derived == tuple(m for m in METHODS if getattr(METHOD_TABLE[m], fact)), fact
    assert FIT_METHODS == FITTED_OVERHEAD_METHODS


def test_an_adaptive_method_drafts_a_chain_some_engine_runs() -> None:
    # A policy changes a chain's length, so the method must run as a chain somewhere.
    for method in ADAPTIVE_METHODS:
        assert any("chain" in forms.get(method, {}) for forms in SUPPORT.values()), method


def test_each_trace_field_measured_one_method_and_the_schema_accepts_it() -> None:
    # trace_field: Literal[...] | None; every field the schema takes names one method.
    literal, _none = typing.get_args(AcceptanceConfig.model_fields["trace_field"].annotation)
    assert sorted(TRACE_METHODS.values()) == sorted(typing.get_args(literal))


def test_the_fitted_methods_are_the_ones_the_measured_rows_hold_in_their_order() -> None:
    # vLLM issue #20780 measured EAGLE-1 and EAGLE-3; its rows alternate in the table's order.
    assert set(FITTED_OVERHEAD_METHODS) == set(ISSUE_20780_TPOT_MS)
    document = yaml.safe_load((ROOT / "sim" / "data" / "draft_overheads.yaml").read_text())
    shipped = {row["csv_line"]: row["method"] for row in document["meta"]["fit_rows"]}
    assert {p.csv_line: p.method for p in fit_points()} == shipped


@pytest.mark.parametrize("method", [m for m in METHODS if m != "none"])
def test_the_match_rate_thins_only_a_lookup_drafter(method: str) -> None:
    # tau = 1 + match_rate * (a + a^2 + a^3) for a chain of 3 at constant alpha a.
    config = AcceptanceConfig(alpha=0.5, ngram_match_rate=0.4)
    model = build_acceptance_model(config, method, "llama-3.1-8b", None, 0.0, ROOT)
    match_rate = 0.4 if method in LOOKUP_METHODS else 1.0
    tau = model.expected_acceptance_length(Proposal.chain(3))
    assert tau == pytest.approx(1.0 + match_rate * (0.5 + 0.25 + 0.125))


def test_a_method_refusing_trees_is_never_offered_as_one() -> None:
    # The settings of a chain-only method have no tree, so no engine may list a tree form for it.
    for engine, methods in SUPPORT.items():
        for method in CHAIN_ONLY_METHODS:
            assert set(methods.get(method, {})) <= {"chain"}, (engine, method)


@pytest.mark.parametrize("method", CHAIN_ONLY_METHODS)
def test_a_tree_for_a_chain_method_is_refused_at_load_with_its_key_path(method: str) -> None:
    override = f"speculation={{method: {method}, tree: {{shape: [2, 2]}}}}"
    with pytest.raises(
        ScenarioError, match=rf"speculation\.tree: method '{method}' drafts a chain"
    ):
        load_scenario(None, [override])


def test_the_method_picks_the_settings_model_and_the_default_is_none() -> None:
    default, _ = load_scenario(None, [])
    assert isinstance(default.speculation, ChainSpeculationConfig)
    assert default.speculation.method == "none"
    tree, _ = load_scenario(None, ["speculation={method: eagle2, tree: {shape: [2, 2, 2]}}"])
    assert isinstance(tree.speculation, TreeSpeculationConfig)
    assert tree.speculation.tree is not None and tree.speculation.tree.shape == [2, 2, 2]


def test_an_unknown_method_is_refused_naming_every_method() -> None:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(None, ["speculation.method=eagle4"])
    message = str(caught.value)
    assert "speculation.method: Input should be" in message and "got 'eagle4'" in message
    assert all(repr(method) in message for method in METHODS)


@pytest.mark.parametrize(
    "path", sorted((ROOT / "scenarios").glob("*.yaml")), ids=lambda path: path.stem
)
def test_every_shipped_scenario_loads_with_the_same_speculation_keys(path: Path) -> None:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    scenario = validate_document(document, str(path))
    dumped = scenario.speculation.model_dump(mode="json")
    assert list(dumped) == [
        "method",
        "num_speculative_tokens",
        "draft_model",
        "draft_tp",
        "tree",
        "acceptance",
        "policy",
        "allow_unsupported",
    ]
    given = document.get("speculation") or {}
    assert dumped["method"] == given.get("method", "none")


def test_a_method_reading_another_methods_profiles_reads_shipped_ones() -> None:
    """EAGLE-2 drafts with EAGLE-1's heads (Li et al. 2024): it reads EAGLE-1's shipped profiles,
    and every other method its own; a profile key names the method the table says."""
    from sim.acceptance.shipped_data import load_profile_document, profile_key
    from sim.method_table import METHOD_TABLE, PROFILE_METHOD

    assert PROFILE_METHOD == {"eagle2": "eagle"}
    shipped = {key.split("/")[0] for key in load_profile_document()["profiles"]}
    for method, facts in METHOD_TABLE.items():
        assert facts.profile_method in METHOD_TABLE
        assert profile_key(method, "m", None).split("/")[0] == facts.profile_method
        if facts.profile_method != method:
            assert facts.profile_method in shipped
