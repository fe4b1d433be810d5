"""The engine under a policy that changes k between steps and between the sequences of a batch.

The KV properties of :class:`~tests.engine.harness.Monitor` (every running sequence holds exactly
the blocks of its committed tokens, a rejected draft never enters them, preemption restores the
logical length) must hold whatever k each step carries, and a fast-forwarded run must give the
same records as one stepped through the scheduler: the planner plays the policy forward inside a
stretch (or stops where its choice may change), the engine applies what it planned.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sim.engine.core import EngineCore
from sim.engine.policies import (
    AdaptivePlan,
    DisableAboveBatchPolicy,
    GoodputPolicy,
    OraclePolicy,
    PositionAcceptance,
    SglangEmaPolicy,
    SpeculationPolicy,
    TabulatedStepTime,
)

from .harness import EngineSetup, Monitor, build_core, check_finished, drive_node, record_of
from .strategies import engine_setups
from .test_fast_forward import _assert_identical

POLICY_KINDS = ("oracle", "disable-above-batch", "sglang-ema", "sglang-ema-slots", "goodput")


def _step_time(b: int, k_max: int, context: int) -> np.ndarray:
    """A made-up verify step time: a fixed part, the tokens and the context, so that the best k
    moves with the batch and the acceptance (the engine's cost model plays no part here)."""
    k = np.arange(k_max + 1)
    return 1e-3 + 2e-4 * b * (1 + k) ** 1.5 + 1e-8 * context


def _policy(kind: str, k_max: int, knob: int, num_requests: int) -> SpeculationPolicy:
    if kind == "oracle":
        return OraclePolicy(k_max)  # k differs between the sequences of one step
    if kind == "disable-above-batch":
        return DisableAboveBatchPolicy(k_max, max_batch_size=knob)  # on and off between steps
    if kind == "goodput":
        # Decides every knob steps; the first lookahead of a general step crosses a decision.
        # Tabulated as a run's own step time is (the form the compiled loop reads).
        step_time = TabulatedStepTime(_step_time)
        return GoodputPolicy(k_max, num_requests, step_time, update_interval=knob)
    if kind == "sglang-ema-slots":
        # Slots from 1, knob + 1 and knob + 3 sequences: batches cross them as they grow and
        # shrink (a stretch runs past finishes only within the lowest).
        slots = [
            {"min_batch_size": 1, "candidate_steps": [1]},
            {"min_batch_size": knob + 1, "down_hysteresis": 0.0},
            {"min_batch_size": knob + 3, "candidate_steps": [1], "up_hysteresis": -0.1},
        ]
        return SglangEmaPolicy(
            k_max, warmup_batches=knob - 1, update_interval=knob, batch_slots=slots
        )
    # Small warm-up and interval so that the choice moves within a short run.
    return SglangEmaPolicy(
        k_max, candidate_steps=[1], warmup_batches=knob - 1, update_interval=knob
    )


def _core(
    setup: EngineSetup, kind: str, knob: int, seed: int, fast: bool, loop: bool = False
) -> EngineCore:
    """A node whose plan is ``kind``'s policy over random acceptance positions; ``loop``: with
    the compiled loop (tests/engine/test_compiled_policies.py)."""
    n = len(setup.output_tokens)
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 12, size=n)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    values = rng.integers(1, setup.max_accepted + 3, size=int(offsets[-1])).astype(np.uint8)
    plan = AdaptivePlan(
        PositionAcceptance(values, offsets),
        _policy(kind, setup.max_accepted, knob, n),
        setup.max_accepted,
    )
    core = build_core(replace(setup, plan=plan), fast)
    plan.bind(core.requests, lambda: len(core.scheduler.running))
    core.compiled_loop = loop
    core.compiled_loop_min_requests = 0
    return core


ADAPTIVE = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@ADAPTIVE
@given(
    setup=engine_setups(speculative=True),
    kind=st.sampled_from(POLICY_KINDS),
    knob=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
)
def test_kv_and_records_hold_when_k_changes(
    setup: EngineSetup, kind: str, knob: int, seed: int
) -> None:
    if kind.startswith("sglang-ema") and setup.max_accepted < 2:
        kind = "oracle"  # SGLang needs two candidate step counts
    fast_core = _core(setup, kind, knob, seed, fast=True)
    monitor = Monitor(fast_core, setup.max_accepted)
    fast, num_stretched = drive_node(setup, True, monitor, core=fast_core)
    check_finished(fast)
    slow, _ = drive_node(setup, False, core=_core(setup, kind, knob, seed, fast=False))
    _assert_identical(record_of(fast), record_of(slow))
    chosen = np.unique(fast.recorder.columns()["spec_k"])
    event(f"{kind}: several k = {len(chosen) > 1}, fast-forwarded = {num_stretched > 0}")
