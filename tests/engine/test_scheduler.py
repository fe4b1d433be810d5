"""The continuous-batching scheduler under random workloads, tight pools and random plans.

Every run goes through the real SimPy node with the core's own invariant check after every step;
the monitor (``harness.Monitor``) adds the per-request properties between steps, and each run ends
with every request finished and every block back in the pool.
"""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sim.engine.core import EngineCore
from sim.engine.drafter import StepPlan
from sim.engine.node import ArrivalSchedule, ServingNode
from sim.errors import ScenarioError

from .harness import EngineSetup, Monitor, build_core, check_finished, run_node
from .strategies import engine_setups

PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _run_checked(setup: EngineSetup, fast_forward: bool = True) -> tuple[Monitor, EngineCore]:
    # The monitor's first snapshot comes from a fresh core in the same initial state.
    monitor = Monitor(build_core(setup, fast_forward), setup.max_accepted)
    core = run_node(setup, fast_forward, monitor)
    # Label what each example exercised (shown by --hypothesis-show-statistics).
    event(f"preempted: {bool(core.requests.num_preemptions.any())}")
    event(f"fast-forwarded: {monitor.num_observations < core.num_steps}")
    event(f"resumed: {monitor.num_resumes > 0}")
    return monitor, core


POLICIES = ["in_place", "scratch"]


@PROPERTY
@given(setup=engine_setups(speculative=False))
def test_random_workloads_without_speculation(setup: EngineSetup) -> None:
    _, core = _run_checked(setup)
    check_finished(core)


@pytest.mark.parametrize("policy", POLICIES)
@PROPERTY
@given(data=st.data())
def test_random_workloads_with_random_acceptance_plans(policy: str, data: st.DataObject) -> None:
    setup = data.draw(engine_setups(speculative=True, policies=(policy,)))
    _, core = _run_checked(setup)
    check_finished(core)


@pytest.mark.parametrize("policy", POLICIES)
def test_a_lone_sequence_whose_lookahead_can_never_fit_is_a_clear_error(policy: str) -> None:
    # 31 one-token blocks hold the whole request (1 + 30 tokens) but not a 9-draft verify step
    # late in it. Preempting itself would only recompute and fail again forever: the scheduler
    # names the problem instead of spinning.
    setup = EngineSetup(
        prompt_tokens=np.array([1]),
        output_tokens=np.array([30]),
        num_blocks=31,
        block_size=1,
        max_num_seqs=1,
        max_num_batched_tokens=28,
        rollback_policy=policy,
        plan=StepPlan(
            offsets=np.array([0, 30]),
            proposed=np.full(30, 9, dtype=np.int16),
            accepted=np.full(30, 1, dtype=np.int16),
        ),
        max_accepted=1,
    )
    core = build_core(setup, True)
    env = simpy.Environment()
    node = ServingNode(env, core, ArrivalSchedule(1, arrival_at_s=np.zeros(1)))
    with pytest.raises(ScenarioError, match="draft slots"):
        env.run(until=node.process)


@PROPERTY
@given(setup=engine_setups(speculative=True, separate_batches=True))
def test_separate_batches_never_mix_prefill_and_decode(setup: EngineSetup) -> None:
    """SGLang's batching: a step is a prefill batch (of at most the cap of requests) or a decode
    batch, never both; the engine's invariants hold throughout."""
    _, core = _run_checked(setup)
    check_finished(core)
    steps = core.recorder.columns()
    decode, prefill = steps["num_decode_seqs"], steps["num_prefill_seqs"]
    assert not ((decode > 0) & (prefill > 0)).any()
    if setup.max_prefills_per_step:
        assert (prefill <= setup.max_prefills_per_step).all()
