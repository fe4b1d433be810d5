"""KV bookkeeping of speculative steps: what is committed, what is rolled back, for both policies.

The verifier writes every draft's KV (in place, or into scratch blocks) and the step then commits
the accepted prefix only: after a verify step that accepts ``a`` drafts a sequence has emitted
``a + 1`` more tokens and commits the KV of exactly those, minus the newest one, whose KV the next
step computes. So at every step boundary a decoding sequence holds
``committed = prompt + emitted − 1`` tokens and exactly ``ceil(committed / block_size)`` blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.engine.core import EngineCore
from sim.engine.drafter import StepPlan
from sim.engine.kv_cache import blocks_for

from .harness import EngineSetup, Monitor, build_core, check_finished, random_plan, run_node

POLICIES = ("in_place", "scratch")


def _plan(rows: list[list[tuple[int, int]]]) -> StepPlan:
    """A plan from per-request lists of (proposed, accepted)."""
    offsets = np.cumsum([0] + [len(row) for row in rows])
    flat = [step for row in rows for step in row]
    return StepPlan(
        offsets=offsets.astype(np.int64),
        proposed=np.array([p for p, _ in flat], dtype=np.int16),
        accepted=np.array([a for _, a in flat], dtype=np.int16),
    )


@dataclass(frozen=True)
class Snapshot:
    """Per-request KV state after a given step."""

    emitted: list[int]
    committed: list[int]
    held: list[int]
    logical: list[int]
    num_free: int
    drafted: list[int]
    accepted: list[int]
    decode_steps: list[int]


def _two_sequences(policy: str) -> tuple[dict[int, Snapshot], dict[str, Any]]:
    """Sequences A and B, 10-token prompts, one k = 3 verify step: A accepts all, B accepts 1.

    Return the state after the first two steps (the prefill, then the verify step) and the step
    records.
    """
    setup = EngineSetup(
        prompt_tokens=np.array([10, 10]),
        output_tokens=np.array([20, 20]),
        num_blocks=32,
        block_size=4,
        max_num_seqs=8,
        max_num_batched_tokens=64,
        rollback_policy=policy,
        plan=_plan([[(3, 3)], [(3, 1)]]),
    )
    after: dict[int, Snapshot] = {}

    def observe(core: EngineCore) -> None:
        r = core.requests
        if core.num_steps in (1, 2) and core.num_steps not in after:
            after[core.num_steps] = Snapshot(
                r.num_emitted.tolist(),
                r.num_computed_tokens.tolist(),
                core.kv.held.tolist(),
                core.kv.logical_tokens.tolist(),
                core.kv.num_free,
                r.num_drafted.tolist(),
                r.num_accepted.tolist(),
                r.num_decode_steps.tolist(),
            )

    core = run_node(setup, fast_forward=False, observer=observe)
    assert sorted(after) == [1, 2], "each step is observed"
    steps = {name: column[:2].tolist() for name, column in core.recorder.columns().items()}
    return after, steps


@pytest.mark.parametrize("policy", POLICIES)
def test_two_sequences_one_rejecting_lengths(policy: str) -> None:
    after, steps = _two_sequences(policy)
    # The prefill: both compute their 10 prompt tokens (3 blocks each) and emit one token.
    prefill = after[1]
    assert prefill.emitted == [1, 1]
    assert prefill.committed == [10, 10]
    assert prefill.held == [3, 3]
    s = after[2]
    # A: 3 accepted + the bonus token = 4 emitted by the step, 5 in all; it commits the prefill's
    # token and its 3 drafts (10 + 4 = 14), the bonus token's KV comes with the next step.
    # B: 1 accepted + the correction token = 2 emitted, 3 in all; commits 10 + 2 = 12; its two
    # rejected drafts never enter the committed sequence.
    assert s.emitted == [5, 3]
    assert s.committed == [14, 12]
    assert s.committed == [10 + e - 1 for e in s.emitted]
    assert s.drafted == [3, 3]
    assert s.accepted == [3, 1]
    assert s.decode_steps == [1, 1]
    # block_size 4: ceil(14 / 4) = 4 blocks for A, ceil(12 / 4) = 3 for B; B's 4th block (its
    # rejected drafts' slots, in place) went back to the pool.
    assert s.held == [4, 3]
    assert s.num_free == 32 - 7
    assert s.logical == [14, 12]
    assert steps["num_tokens"] == [20, 8]
    assert steps["num_emitted_tokens"] == [2, 6]
    assert steps["num_draft_tokens"] == [0, 6]
    assert steps["num_accepted_tokens"] == [0, 4]
    assert steps["num_decode_seqs"] == [0, 2]


@pytest.mark.parametrize("policy", POLICIES)
def test_two_sequences_one_rejecting_peak_blocks(policy: str) -> None:
    _, steps = _two_sequences(policy)
    # During the verify step: in place each sequence holds ceil((10 + 4) / 4) = 4 blocks (8 in
    # all); with scratch each holds ceil((10 + 1) / 4) = 3 of its own plus ceil(3 / 4) = 1 scratch
    # block for its drafts (8 in all). The prefill step held ceil(10 / 4) = 3 each.
    assert steps["kv_blocks_used"] == [6, 8]


def _expected_trajectory(
    prompt: int, output: int, plan: StepPlan, request: int
) -> tuple[list[int], list[int]]:
    """Emitted and committed after each step, for a request that runs alone in every step."""
    steps = plan.accepted[plan.offsets[request] : plan.offsets[request + 1]].astype(int).tolist()
    emitted = [1]
    for accepted in steps:
        if emitted[-1] >= output:
            break
        emitted.append(min(emitted[-1] + accepted + 1, output))
    committed = [prompt + e - 1 for e in emitted]
    return emitted, committed


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_requests=st.integers(1, 6),
    k=st.integers(1, 6),
    tree_extra=st.sampled_from([0, 0, 4, 10]),
    block_size=st.sampled_from([1, 4, 16]),
    policy=st.sampled_from(POLICIES),
    seed=st.integers(0, 2**32 - 1),
)
def test_committed_length_follows_each_sequences_own_acceptance(
    num_requests: int, k: int, tree_extra: int, block_size: int, policy: str, seed: int
) -> None:
    # Ample pool, budget and sequence slots: every request runs in every step, so each one's
    # trajectory must depend on its own plan alone, whatever the others accept.
    rng = np.random.default_rng(seed)
    prompts = rng.integers(1, 50, num_requests)
    outputs = rng.integers(1, 40, num_requests)
    plan = random_plan(rng, outputs - 1, k + tree_extra, k, ragged=bool(rng.integers(2)))
    setup = EngineSetup(
        prompt_tokens=prompts,
        output_tokens=outputs,
        num_blocks=int(blocks_for(200, block_size)) * num_requests,
        block_size=block_size,
        max_num_seqs=num_requests,
        max_num_batched_tokens=int(prompts.sum()) + num_requests * (k + tree_extra + 1),
        rollback_policy=policy,
        plan=plan,
    )
    emitted: list[np.ndarray] = []
    committed: list[np.ndarray] = []
    held: list[np.ndarray] = []

    def observe(core: EngineCore) -> None:
        emitted.append(core.requests.num_emitted.copy())
        committed.append(core.requests.num_computed_tokens.copy())
        held.append(core.kv.held.copy())

    core = run_node(setup, fast_forward=False, observer=observe)
    check_finished(core)
    emitted_by_step = np.array(emitted)
    committed_by_step = np.array(committed)
    held_by_step = np.array(held)
    for req in range(num_requests):
        want_emitted, want_committed = _expected_trajectory(
            int(prompts[req]), int(outputs[req]), plan, req
        )
        n = len(want_emitted)
        assert emitted_by_step[:n, req].tolist() == want_emitted
        steps_emitted = np.diff([0, *want_emitted])
        # A chain step emits 1..k+1 tokens; a tree step 1..depth+1.
        assert ((steps_emitted >= 1) & (steps_emitted <= k + 1)).all()
        if n > 1:
            # While it runs (the last step frees it), it commits exactly its accepted prefix.
            assert committed_by_step[: n - 1, req].tolist() == want_committed[: n - 1]
            assert held_by_step[: n - 1, req].tolist() == [
                int(blocks_for(c, block_size)) for c in want_committed[: n - 1]
            ]


@pytest.mark.parametrize("policy", POLICIES)
def test_one_rejection_leaves_the_other_sequences_untouched(policy: str) -> None:
    rng = np.random.default_rng(7)
    outputs = np.array([30, 30, 30])
    base = random_plan(rng, outputs - 1, 4, 4, ragged=False)
    accepted = base.accepted.copy()
    # Request 1 rejects everything instead of what the base plan says.
    accepted[base.offsets[1] : base.offsets[2]] = 0
    changed = StepPlan(base.offsets, base.proposed, accepted)
    trajectories = []
    for plan in (base, changed):
        states: list[tuple[np.ndarray, np.ndarray]] = []

        def observe(core: EngineCore, states: list[tuple[np.ndarray, np.ndarray]] = states) -> None:
            states.append((core.requests.num_computed_tokens.copy(), core.kv.held.copy()))

        setup = EngineSetup(
            prompt_tokens=np.array([12, 7, 20]),
            output_tokens=outputs,
            num_blocks=64,
            block_size=4,
            max_num_seqs=4,
            max_num_batched_tokens=256,
            rollback_policy=policy,
            plan=plan,
        )
        run_node(setup, fast_forward=False, observer=observe)
        trajectories.append(states)
    base_states, changed_states = trajectories
    # Request 1 is slower now; requests 0 and 2 see identical KV at every step they are running.
    assert len(changed_states) > len(base_states)
    for (c0, h0), (c1, h1) in zip(base_states, changed_states, strict=False):
        assert c0[[0, 2]].tolist() == c1[[0, 2]].tolist()
        assert h0[[0, 2]].tolist() == h1[[0, 2]].tolist()


def test_policies_agree_on_everything_but_block_usage_when_the_pool_is_ample() -> None:
    rng = np.random.default_rng(3)
    prompts, outputs = rng.integers(1, 60, 8), rng.integers(1, 60, 8)
    plan = random_plan(rng, outputs - 1, 5, 5)
    arrival_at_s = np.sort(rng.uniform(0, 0.1, 8))
    records = []
    for policy in POLICIES:
        setup = EngineSetup(
            prompt_tokens=prompts,
            output_tokens=outputs,
            num_blocks=400,
            block_size=4,
            max_num_seqs=4,
            max_num_batched_tokens=48,
            rollback_policy=policy,
            plan=plan,
            arrival_at_s=arrival_at_s,
        )
        core = run_node(setup)
        check_finished(core)
        records.append(core)
    a, b = (core.recorder.columns() for core in records)
    for name in a:
        if name != "kv_blocks_used":
            assert np.array_equal(a[name], b[name]), name
    for name in ("first_token_at_s", "finished_at_s", "num_accepted", "num_decode_steps"):
        assert np.array_equal(
            getattr(records[0].requests, name), getattr(records[1].requests, name)
        )


@pytest.mark.parametrize("policy", POLICIES)
def test_preemption_and_resume_restore_the_logical_length(policy: str) -> None:
    # Four sequences that each need up to 7 blocks share 12: the youngest are preempted
    # (recompute) and must come back with every emitted token committed again.
    rng = np.random.default_rng(11)
    outputs = np.array([20, 20, 20, 20])
    setup = EngineSetup(
        prompt_tokens=np.array([8, 8, 8, 8]),
        output_tokens=outputs,
        num_blocks=12,
        block_size=4,
        max_num_seqs=4,
        max_num_batched_tokens=64,
        rollback_policy=policy,
        plan=random_plan(rng, outputs - 1, 3, 3, ragged=False),
        max_accepted=3,
    )
    monitor = Monitor(build_core(setup), setup.max_accepted)
    core = run_node(setup, observer=monitor)
    check_finished(core)
    assert core.requests.num_preemptions.sum() > 0
    assert monitor.num_resumes > 0
