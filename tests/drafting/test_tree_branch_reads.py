"""SGLang 0.4 drafts a tree's later levels with one KV index list per node (its prefix and its
path), so the draft layer's prefix KV is read once per node: the extra time is that KV read,
written out, and chains and other engines keep one read per sequence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sim.build import build_simulation
from sim.drafting.eagle import EagleStrategy
from sim.drafting.proposer import ForwardProposer
from sim.engine.drafter import DraftWork
from sim.scenario import validate_document

TREE = {"method": "eagle2", "tree": {"topk": 4, "depth": 3, "num_draft_tokens": 16}}


def _strategy(engine: str, speculation: dict[str, Any]) -> EagleStrategy:
    document = {
        "seed": 1,
        "hardware": {"gpu": "h100-sxm", "num_gpus": 1},
        "model": "llama-3.1-8b",
        "engine": {"preset": engine},
        "speculation": {**speculation, "acceptance": {"alpha": 0.7}},
        "workload": {"num_requests": 2},
    }
    simulation = build_simulation(validate_document(document, "t"), Path("."))
    assert isinstance(simulation.strategy, EagleStrategy)
    return simulation.strategy


@pytest.mark.parametrize(
    ("engine", "speculation", "per_node"),
    [
        ("sglang-0.4", TREE, True),
        ("sglang-0.4", {"method": "eagle3", "num_speculative_tokens": 3}, False),  # a chain
        ("sglang-0.5", TREE, False),
    ],
)
def test_which_drafters_read_the_prefix_per_node(
    engine: str, speculation: dict[str, Any], per_node: bool
) -> None:
    assert _strategy(engine, speculation).branch_prefix_reads is per_node


def _shared_reads(strategy: EagleStrategy) -> EagleStrategy:
    """The same drafter with one prefix read per sequence."""
    return EagleStrategy(
        strategy.name,
        strategy.proposal,  # type: ignore[arg-type]
        strategy.acceptance,  # type: ignore[arg-type]
        strategy.overheads,
        strategy.first,
        strategy.later,
        strategy.level_nodes,
        strategy.tp,
    )


def _work(batch: int, context: int) -> DraftWork:
    return DraftWork(
        num_seqs=np.array([batch]),
        num_new_tokens=np.array([3 * batch]),
        context_tokens=np.array([batch * context]),
        num_full_accept=np.array([0]),
        num_proposed=np.array([15 * batch]),
    )


def test_the_extra_draft_time_is_the_repeated_prefix_read() -> None:
    # 64 sequences of 4,096 cached tokens, topk 4, two later levels: each level reads the
    # one-layer prefix KV 4 times instead of once. At this length the KV read outlasts the
    # level's attention FLOPs, so the difference is 3 extra reads of Σ(c + l·B) per level.
    strategy = _strategy("sglang-0.4", TREE)
    shared = _shared_reads(strategy)
    batch, context = 64, 4096
    work = _work(batch, context)
    extra = float(strategy.draft_time_s(work)[0] - shared.draft_time_s(work)[0])
    per_token = strategy.later._kv_s_per_token
    expected = sum(3 * (batch * context + level * batch) * per_token for level in (1, 2))
    assert extra == pytest.approx(expected, rel=1e-9)
    # The strategy's two paths (its vectorised draft_time_s and its list of forwards) agree.
    by_forward = ForwardProposer.draft_time_s(strategy, work)
    np.testing.assert_allclose(by_forward, strategy.draft_time_s(work), rtol=1e-12)


def test_at_chat_lengths_the_extra_read_is_a_fraction_of_a_percent_of_the_step() -> None:
    # 64 sequences of ~206 cached tokens (MT-bench, 100 prompt + half of 212 output tokens):
    # 3 extra reads of 64·206 tokens of 4 KiB per level, about 0.1 ms over two levels.
    strategy = _strategy("sglang-0.4", TREE)
    work = _work(64, 206)
    extra = float(strategy.draft_time_s(work)[0] - _shared_reads(strategy).draft_time_s(work)[0])
    assert 0.0 < extra < 2e-4
