"""Per-step policies inside the compiled loop: the records of the Python path, bit for bit.

:mod:`sim.engine.policy_kernel` runs a policy's per-step decisions (the scheduler's query, the
drafting's query one step ahead, what it learns from the step applied) inside the compiled loop
of :mod:`sim.engine.loop_kernel`; :class:`~sim.engine.policies.AdaptivePlan` on the Python
path is the reference. Over random small nodes (tight pools that preempt, small budgets that cut
a decode's drafts, policies that change k between steps and, for the oracle, between the
sequences of one step), every step record, request row and irregular gap must be identical with
the loop on and off, and the KV ledger must hold after every compiled step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sim import build_adaptive
from sim.engine import compiled_loop, policy_state
from sim.engine.drafter import StepPlan
from sim.engine.policies import (
    AdaptivePlan,
    FixedPolicy,
    GoodputPolicy,
    PositionAcceptance,
    TabulatedStepTime,
)
from sim.run import build_simulation
from sim.scenario import load_scenario

from .harness import EngineSetup, Monitor, check_finished, drive_node, record_of
from .strategies import engine_setups
from .test_adaptive_seam import POLICY_KINDS, _core, _step_time
from .test_compiled_loop import _scenario_records
from .test_fast_forward import _assert_identical

pytest.importorskip("numba")


POLICIES = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@POLICIES
@given(
    setup=engine_setups(speculative=True, policies=("in_place",)),
    kind=st.sampled_from(POLICY_KINDS),
    knob=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
)
def test_compiled_policies_give_the_python_records(
    setup: EngineSetup, kind: str, knob: int, seed: int
) -> None:
    if kind.startswith("sglang-ema") and setup.max_accepted < 2:
        kind = "oracle"  # SGLang needs two candidate step counts
    fast, _ = drive_node(setup, core=_core(setup, kind, knob, seed, True, loop=True))
    check_finished(fast)
    assert fast.num_compiled_steps > 0
    slow, _ = drive_node(setup, core=_core(setup, kind, knob, seed, True, loop=False))
    assert slow.num_compiled_steps == 0
    _assert_identical(record_of(fast), record_of(slow))
    chosen = np.unique(fast.recorder.columns()["spec_k"])
    event(f"{kind}: several k = {len(chosen) > 1}")
    event(f"preempted: {bool(fast.requests.num_preemptions.any())}")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    setup=engine_setups(speculative=True, policies=("in_place",)),
    kind=st.sampled_from(POLICY_KINDS),
    knob=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
)
def test_kv_holds_between_compiled_policy_steps(
    setup: EngineSetup, kind: str, knob: int, seed: int
) -> None:
    # The monitor after every step (blocks held = committed tokens, a rejected draft never
    # committed, preemption restores the logical length, FCFS admissions), the loop made to
    # return after each step, with k changing between steps and between a step's sequences.
    if kind.startswith("sglang-ema") and setup.max_accepted < 2:
        kind = "oracle"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compiled_loop, "STEPS_PER_CALL", 1)
        core = _core(setup, kind, knob, seed, True, loop=True)
        monitor = Monitor(core, setup.max_accepted)
        core, _ = drive_node(setup, observer=monitor, core=core)
    check_finished(core)
    assert core.num_compiled_steps > 0


CHAT = Path(__file__).resolve().parents[2] / "scenarios" / "spec-chat-eagle3.yaml"

#: Every compiled policy on the chat scenario on vLLM V1 (the loop covers its mixed batches),
#: disable-above-batch at about the run's batch so that it switches.
SCENARIO_POLICIES = {
    "disable-above-batch": "{name: disable-above-batch, params: {max_batch_size: 24}}",
    "oracle": "{name: oracle}",
    "sglang-ema": "{name: sglang-ema, params: {warmup_batches: 4, update_interval: 3}}",
    "sglang-ema slots": "{name: sglang-ema, params: {batch_slots: sglang}}",
    # Loose hysteresis and a fast EMA: k moves dozens of times, in two slots.
    "sglang-ema moving": "{name: sglang-ema, params: {warmup_batches: 2, update_interval: 2, "
    "ema_alpha: 0.6, candidate_steps: [1, 2], down_hysteresis: 0.3, up_hysteresis: 0.3}}",
    "sglang-ema moving slots": "{name: sglang-ema, params: {ema_alpha: 0.6, warmup_batches: 2, "
    "update_interval: 1, batch_slots: [{min_batch_size: 1, down_hysteresis: 0.5, "
    "up_hysteresis: -0.5}, {min_batch_size: 16, candidate_steps: [1, 2], down_hysteresis: 0.3, "
    "up_hysteresis: 0.3}]}}",
    "goodput": "{name: goodput}",
    "goodput every step": "{name: goodput, params: {update_interval: 1}}",
}


def _chat_run(overrides: list[str], loop: bool) -> tuple[dict[str, Any], dict[str, Any], Any]:
    return _scenario_records(overrides, loop, CHAT)


CHAT_BASE = [
    "engine.preset=vllm-v1",
    "workload.num_requests=400",
    "workload.arrival.rate_per_s=16",
    "speculation.num_speculative_tokens=4",
    "speculation.allow_unsupported=true",
]


@pytest.mark.parametrize("name", sorted(SCENARIO_POLICIES))
def test_compiled_policy_runs_the_python_run(name: str) -> None:
    # The EAGLE-3 drafter prices each step's drafting by the k of the next verify step, so the
    # drafting query's answer is in every step's duration as well as the policy's state.
    overrides = [*CHAT_BASE, f"speculation.policy={SCENARIO_POLICIES[name]}"]
    fast, fast_summary, core = _chat_run(overrides, loop=True)
    slow, slow_summary, slow_core = _chat_run(overrides, loop=False)
    assert core.num_compiled_steps > 0.9 * core.num_steps
    assert slow_core.num_compiled_steps == 0
    _assert_identical(fast, slow)
    assert fast_summary == slow_summary
    if name != "oracle":
        # The policy moved k over the run (the oracle's k is per sequence: its spec_k is the
        # step's longest chain).
        assert len(np.unique(fast["step.spec_k"])) > 1


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("acceptance", ["trace", "alpha"])
def test_fixed_policy_is_its_fixed_k_plan(k: int, acceptance: str, monkeypatch: Any) -> None:
    # A run with the fixed policy is built with the fixed-k plan read from its positions; with
    # the policy kept (the build's check made to miss), the records are the same bit for bit.
    overrides = [*CHAT_BASE, f"speculation.policy={{name: fixed, params: {{k: {k}}}}}"]
    if acceptance == "alpha":
        overrides.append("speculation.acceptance={alpha: 0.7}")
    planned, planned_summary, core = _chat_run(overrides, loop=False)
    assert type(core.plan) is StepPlan
    with monkeypatch.context() as patch:
        patch.setattr(build_adaptive, "FixedPolicy", type("NeverFixed", (), {}))
        kept, kept_summary, kept_core = _chat_run(overrides, loop=False)
    assert isinstance(kept_core.plan, AdaptivePlan)
    assert isinstance(kept_core.plan.policy, FixedPolicy)
    _assert_identical(planned, kept)
    assert planned_summary == kept_summary
    assert set(np.unique(planned["step.spec_k"])) <= {0, k}


def test_fixed_policy_with_trace_replay_is_the_fixed_k_run() -> None:
    # Trace replay draws the trace keys from the acceptance stream as the fixed-k plan does, so
    # `eagle3:adaptive=fixed` with k = num_speculative_tokens is `eagle3:k=...` record for record.
    base = [*CHAT_BASE[:3], "speculation.num_speculative_tokens=3"]
    fixed, fixed_summary, _ = _chat_run(base, loop=True)
    policy, policy_summary, core = _chat_run([*base, "speculation.policy={name: fixed}"], True)
    assert type(core.plan) is StepPlan
    _assert_identical(fixed, policy)
    assert fixed_summary == policy_summary


def test_what_the_loop_does_not_compile_keeps_the_python_path() -> None:
    # A policy the loop does not compile (here goodput on a step time of its own, not the
    # tabulated one its bins are read from; likewise any other policy class) and a drafter the
    # evaluator does not price (a draft model's) keep the Python path: the loop refuses them.
    acceptance = PositionAcceptance(np.full(4, 2, dtype=np.uint8), np.arange(5, dtype=np.int64))
    raw = AdaptivePlan(acceptance, GoodputPolicy(3, 4, _step_time), 3)
    assert policy_state.lower(raw, 8, 100) is None
    kept_fixed = AdaptivePlan(acceptance, FixedPolicy(3), 3)
    assert policy_state.lower(kept_fixed, 8, 100) is None
    tabulated = AdaptivePlan(acceptance, GoodputPolicy(3, 4, TabulatedStepTime(_step_time)), 3)
    assert policy_state.lower(tabulated, 8, 100) is not None
    draft_model = [
        *CHAT_BASE,
        "speculation.method=draft_model",
        "speculation.draft_model=llama-3.2-1b",
        "speculation.acceptance={alpha: 0.6}",
        "speculation.policy={name: disable-above-batch, params: {max_batch_size: 24}}",
    ]
    _, _, core = _chat_run(draft_model, loop=True)
    assert core.num_compiled_steps == 0


@pytest.mark.parametrize(
    "scenario",
    [CHAT, CHAT.parent / "lib-adaptive-70b-draft-model.yaml"],
    ids=["eagle3", "draft-model"],
)
def test_goodput_bins_equal_the_step_time_one_batch_at_a_time(scenario: Path) -> None:
    # The goodput table fills a context bin for many batch sizes in one call (a first call the
    # sizes up to twice the one asked, the rest when a larger one is asked); each entry must be
    # the single step time of that batch at the bin's centre to the bit (EAGLE-3 drafting and a
    # draft model's, whose full-accept row adds a forward).
    overrides = ["speculation.policy={name: goodput}", "speculation.allow_unsupported=true"]
    document, base_dir = load_scenario(scenario, overrides)
    simulation = build_simulation(document, base_dir)
    step_time = simulation.plan.policy.step_time
    assert isinstance(step_time, TabulatedStepTime) and step_time.rows_of is not None
    k_max = simulation.plan.k_max
    sizes = np.array([0, 1, 2, 3, 17, 64, step_time.max_batch])
    for per_seq in (0, 1, 6, 40):
        first = step_time.row(k_max, per_seq, 17)
        assert 18 <= len(first) < step_time.max_batch + 1
        row = step_time.row(k_max, per_seq)
        assert np.array_equal(row[: len(first)], first)
        assert row.shape == (step_time.max_batch + 1, 2, k_max + 1)
        for b in sizes.tolist():
            single = step_time.step_time(b, k_max, per_seq * 128 * max(b, 1))
            assert np.array_equal(row[b], single)
