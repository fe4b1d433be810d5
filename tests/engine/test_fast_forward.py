"""Fast-forward is an optimisation only: with it on or off, every record is identical.

``EngineCore.fast_forward`` applies many pure-decode steps at once; ``EngineCore.step`` applies
one. Both must produce the same step rows, the same request rows and the same irregular ITL
samples, bit for bit (``np.array_equal`` with NaNs equal), whatever the workload: speculation
chains and trees, open and closed loops, KV pressure with preemption, chunked prefill under small
budgets, either rollback policy, prefix caching over shared prefixes and multi-turn sessions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings

from sim.run import REQUEST_COLUMNS, build_simulation, execute
from sim.scenario import validate_document

from .harness import EngineSetup, check_finished, drive_node, record_of, tight_pool
from .strategies import engine_setups


def _assert_identical(fast: dict[str, Any], slow: dict[str, Any]) -> None:
    assert fast.keys() == slow.keys()
    for name in fast:
        a, b = np.asarray(fast[name]), np.asarray(slow[name])
        assert a.shape == b.shape, name
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), name


def _both(setup: EngineSetup) -> int:
    fast, num_stretched = drive_node(setup, fast_forward=True)
    slow, num_stretched_slow = drive_node(setup, fast_forward=False)
    check_finished(fast)
    assert num_stretched_slow == 0
    _assert_identical(record_of(fast), record_of(slow))
    return num_stretched


EQUIVALENCE = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@EQUIVALENCE
@given(setup=engine_setups(speculative=False))
def test_identical_records_without_speculation(setup: EngineSetup) -> None:
    event(f"fast-forwarded: {_both(setup) > 0}")


@EQUIVALENCE
@given(setup=engine_setups(speculative=True))
def test_identical_records_with_random_acceptance_plans(setup: EngineSetup) -> None:
    event(f"fast-forwarded: {_both(setup) > 0}")


@EQUIVALENCE
@given(setup=engine_setups(speculative=True, sharing=True, prefix_caching=True))
def test_identical_records_with_prefix_caching(setup: EngineSetup) -> None:
    event(f"fast-forwarded: {_both(setup) > 0}")


@EQUIVALENCE
@given(setup=engine_setups(speculative=True, separate_batches=True))
def test_identical_records_with_prefill_and_decode_batches_apart(setup: EngineSetup) -> None:
    event(f"fast-forwarded: {_both(setup) > 0}")


def test_a_long_decode_is_fast_forwarded_across_chunks() -> None:
    # 300 decode steps exceed several fast-forward chunks; the equivalence must hold across them.
    setup = EngineSetup(
        prompt_tokens=np.array([30, 50, 70]),
        output_tokens=np.array([300, 250, 280]),
        num_blocks=200,
        block_size=16,
        max_num_seqs=4,
        max_num_batched_tokens=256,
    )
    assert _both(setup) > 200


# --- whole scenarios through sim.run -------------------------------------------------------------
def _scenario(**overrides: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "seed": 5,
        "workload": {
            "num_requests": 40,
            "arrival": {"process": "poisson", "rate_per_s": 30.0},
            "prompt_tokens": {"distribution": "uniform", "low": 20, "high": 600},
            "output_tokens": {"distribution": "uniform", "low": 1, "high": 300},
        },
    }
    for key, value in overrides.items():
        document[key] = {**document.get(key, {}), **value}
    return document


_PREFIX = {"num_shared_prefixes": 2, "shared_prefix_tokens": 200}
_SESSIONS = {"num_turns": 3, "think_time_s": 0.02}

SCENARIOS = {
    "open-loop": _scenario(),
    "closed-loop": _scenario(
        workload={"arrival": {"process": "closed_loop", "concurrency": 12, "think_time_s": 0.01}}
    ),
    "kv-pressure": _scenario(
        workload={"arrival": {"process": "closed_loop", "concurrency": 40}},
    ),
    "chunked-small-budget": _scenario(engine={"max_num_batched_tokens": 64, "max_num_seqs": 8}),
    "eagle3-chain": _scenario(speculation={"method": "eagle3", "num_speculative_tokens": 4}),
    "eagle3-scratch-kv-pressure": _scenario(
        engine={"kv_rollback": "scratch"},
        speculation={"method": "eagle3"},
        workload={"arrival": {"process": "closed_loop", "concurrency": 40}},
    ),
    "eagle-static-tree": _scenario(speculation={"method": "eagle", "tree": {"shape": [2, 2, 2]}}),
    "draft-model-budget": _scenario(
        engine={"max_num_batched_tokens": 96},
        speculation={
            "method": "draft_model",
            "draft_model": "llama-3.2-1b",
            "num_speculative_tokens": 5,
            "acceptance": {"alpha": 0.7},
        },
    ),
    "prefix-sessions": _scenario(workload={"prefix": _PREFIX, "sessions": _SESSIONS}),
    "prefix-sessions-kv-pressure": _scenario(
        workload={
            "arrival": {"process": "closed_loop", "concurrency": 14},
            "prefix": _PREFIX,
            "sessions": _SESSIONS,
        },
    ),
    "eagle3-prefix-sessions": _scenario(
        speculation={"method": "eagle3"}, workload={"prefix": _PREFIX, "sessions": _SESSIONS}
    ),
    "sglang-eagle2-tree": _scenario(
        engine={"preset": "sglang"},
        speculation={"method": "eagle2", "tree": {"topk": 4, "depth": 5, "num_draft_tokens": 8}},
    ),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_identical_records_for_whole_scenarios(name: str) -> None:
    document = SCENARIOS[name]
    if name.endswith("kv-pressure"):
        document = tight_pool(document)
    scenario = validate_document(document, name)
    results = []
    fast_forwarded = [0, 0]
    for index, fast_forward in enumerate((True, False)):
        simulation = build_simulation(
            scenario, Path("."), fast_forward=fast_forward, check_invariants=True
        )
        recorder = simulation.core.recorder
        original = recorder.append

        def counted(rows: dict[str, object], index: int = index, original: Any = original) -> None:
            # A call that appends several steps at once is a fast-forwarded stretch.
            num_rows = len(np.atleast_1d(np.asarray(rows["start_at_s"])))
            if num_rows > 1:
                fast_forwarded[index] += num_rows
            original(rows)

        recorder.append = counted  # type: ignore[method-assign]
        results.append(execute(simulation))
    fast, slow = results
    assert fast.summary.num_completed == scenario.workload.num_requests
    _assert_identical(fast.steps, slow.steps)
    _assert_identical(
        {k: fast.requests[k] for k in REQUEST_COLUMNS},
        {k: slow.requests[k] for k in REQUEST_COLUMNS},
    )
    fast_summary, slow_summary = fast.summary.to_dict(), slow.summary.to_dict()
    for key in fast_summary:
        if key != "wall_time_s":
            assert fast_summary[key] == slow_summary[key] or (
                fast_summary[key] != fast_summary[key] and slow_summary[key] != slow_summary[key]
            ), key
    assert fast_forwarded[0] > 0 and fast_forwarded[1] == 0
    if name.endswith("kv-pressure"):
        assert fast.summary.num_preemptions > 0
