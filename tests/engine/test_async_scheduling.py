"""Async scheduling (vLLM 0.14+): the scheduler works one step ahead, so a new request joins
the step after next.

vLLM's engine core takes in new requests only between calls of its step function
(``EngineCoreProc.run_busy_loop``); under async scheduling that is ``step_with_batch_queue``
with a queue of two, which schedules step n+1 while step n runs (vllm-project/vllm @ 00080ee13c7a,
``vllm/v1/engine/core.py``). A request that arrives while step n runs is therefore first
scheduled in step n+2; on an idle engine it is scheduled at once. These tests check that rule
on the records, and that stepping one step at a time and fast-forwarding still agree bit for
bit under it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from sim.engine.core import EngineCore

from .harness import EngineSetup, build_core, check_finished, drive_node, record_of
from .strategies import engine_setups
from .test_fast_forward import _assert_identical


def _steps(core: EngineCore) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each step's start and end, and the step each request was first scheduled in."""
    record = record_of(core)
    starts, durations = record["step.start_at_s"], record["step.duration_s"]
    first = np.searchsorted(starts, core.requests.scheduled_at_s, side="left")
    assert np.array_equal(starts[first], core.requests.scheduled_at_s)
    return starts, starts + durations, first


def _setup(async_scheduling: bool) -> EngineSetup:
    # One long request keeps the engine busy; three more arrive while it decodes.
    return EngineSetup(
        prompt_tokens=np.array([32, 8, 8, 8]),
        output_tokens=np.array([40, 4, 4, 4]),
        num_blocks=64,
        block_size=16,
        max_num_seqs=8,
        max_num_batched_tokens=256,
        arrival_at_s=np.array([0.0, 0.0301, 0.0702, 0.1003]),
        async_scheduling=async_scheduling,
    )


def test_an_arrival_during_step_n_joins_step_n_plus_2() -> None:
    for async_scheduling, lag in ((False, 1), (True, 2)):
        core, _ = drive_node(_setup(async_scheduling))
        check_finished(core)
        starts, ends, first = _steps(core)
        assert np.array_equal(starts[1:], ends[:-1])  # busy throughout
        # The step running when each later request arrived.
        during = np.searchsorted(starts, core.requests.engine_arrival_at_s[1:], side="right") - 1
        assert (first[1:] == during + lag).all(), (async_scheduling, during, first)


def test_an_idle_engine_schedules_an_arrival_at_once() -> None:
    setup = replace(
        _setup(True), output_tokens=np.array([2, 2, 2, 2]), arrival_at_s=np.arange(4) * 1.0
    )
    core, _ = drive_node(setup)
    # Every request finds the engine idle: its prefill starts when it arrives.
    assert np.array_equal(core.requests.scheduled_at_s, core.requests.engine_arrival_at_s)


def test_async_scheduling_delays_first_tokens_and_never_hastens_them() -> None:
    sync_core, _ = drive_node(_setup(False))
    async_core, _ = drive_node(_setup(True))
    assert (async_core.requests.first_token_at_s >= sync_core.requests.first_token_at_s).all()
    assert (async_core.requests.first_token_at_s > sync_core.requests.first_token_at_s).any()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=engine_setups(speculative=True))
def test_identical_records_stepped_and_fast_forwarded(setup: EngineSetup) -> None:
    setup = replace(setup, async_scheduling=True)
    fast, _ = drive_node(setup, fast_forward=True)
    slow, num_stretched = drive_node(setup, fast_forward=False)
    check_finished(fast)
    assert num_stretched == 0
    _assert_identical(record_of(fast), record_of(slow))
    # The rule itself, in every run: a request first scheduled in step m > 0 joins a step that
    # carries other requests, right after step m-1 ended, only if it arrived by the start of
    # step m-1 (that step scheduled step m).
    record = record_of(slow)
    starts, ends, first = _steps(slow)
    num_seqs = record["step.num_seqs"]
    newcomers = np.bincount(first, minlength=len(starts))
    m = first[first > 0]
    arrived = slow.requests.engine_arrival_at_s[first > 0]
    busy = (starts[m] == ends[m - 1]) & (num_seqs[m] > newcomers[m])
    assert (arrived[busy] <= starts[m - 1][busy]).all()


def test_the_compiled_loop_leaves_async_runs_to_the_python_path() -> None:
    # The compiled loop admits by the synchronous rule: it must refuse async runs, which then
    # give the Python path's records.
    pytest.importorskip("numba")
    for async_scheduling in (False, True):
        setup = _setup(async_scheduling)
        core = build_core(setup)
        core.compiled_loop, core.compiled_loop_min_requests = True, 0
        core, _ = drive_node(setup, core=core)
        reference, _ = drive_node(setup)
        assert (core.num_compiled_steps > 0) == (not async_scheduling)
        _assert_identical(record_of(core), record_of(reference))
