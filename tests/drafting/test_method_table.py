"""The one table of drafting methods (sim/speculation.py): every method has its settings family,
its builder and its support rows, and a tree given to a method that never drafts one is refused
when the scenario is loaded, naming the key."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
import yaml

from sim.drafting import BUILDERS
from sim.errors import ScenarioError
from sim.scenario import load_scenario, validate_document
from sim.speculation import (
    BUILDERS as METHOD_BUILDERS,
)
from sim.speculation import (
    CHAIN_ONLY_METHODS,
    METHODS,
    SUPPORT,
    ChainSpeculationConfig,
    TreeMethodName,
    TreeSpeculationConfig,
)

ROOT = Path(__file__).resolve().parents[2]


def test_every_method_has_one_family_one_builder_and_an_engine_or_a_reason() -> None:
    tree_methods = typing.get_args(TreeMethodName)
    assert sorted(CHAIN_ONLY_METHODS + tree_methods) == sorted(METHODS)
    assert not set(CHAIN_ONLY_METHODS) & set(tree_methods)
    assert list(METHOD_BUILDERS) == list(METHODS)
    assert set(BUILDERS) == set(METHODS) and all(callable(b) for b in BUILDERS.values())
    for engine in SUPPORT.values():
        assert set(engine) <= set(METHODS)


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
