"""vLLM V1's lookahead slots: a running request with an EAGLE-style drafter holds k KV slots
beyond the step's tokens (``SchedulerConfig.lookahead_slots``).

vllm/v1/core/sched/scheduler.py (v0.14.0, v0.15.0) calls ``allocate_slots(request,
num_new_tokens, num_lookahead_tokens=k)`` for every running request, which needs
``num_computed_tokens + num_new_tokens + k`` slots (kv_cache_manager.py), and passes no lookahead
for a waiting request with nothing computed. The equivalence properties (fast-forward and the
compiled loop against the step-by-step Python path) draw random ``lookahead_slots`` through
:func:`tests.engine.strategies.engine_setups`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.engine.core import EngineCore
from sim.engine.drafter import StepPlan
from sim.engine.queues import SchedulerConfig
from sim.run import build_simulation
from sim.scenario import validate_document

from .harness import EngineSetup, check_finished, run_node


def _setup(lookahead_slots: int, num_blocks: int) -> EngineSetup:
    """Two 10-token prompts of 6-token answers, blocks of 4, every verify step proposing 3
    drafts and accepting 1."""
    steps = 5
    plan = StepPlan(
        offsets=np.array([0, steps, 2 * steps], dtype=np.int64),
        proposed=np.full(2 * steps, 3, dtype=np.int16),
        accepted=np.full(2 * steps, 1, dtype=np.int16),
    )
    return EngineSetup(
        prompt_tokens=np.array([10, 10]),
        output_tokens=np.array([6, 6]),
        num_blocks=num_blocks,
        block_size=4,
        max_num_seqs=8,
        max_num_batched_tokens=64,
        plan=plan,
        max_accepted=3,
        lookahead_slots=lookahead_slots,
    )


def _preemptions_after_step_two(setup: EngineSetup) -> list[int]:
    """Run ``setup`` step by step (the scheduler checks its invariants after each) and return
    each request's preemptions after the second step, the first verify step."""
    seen: dict[int, list[int]] = {}

    def observe(core: EngineCore) -> None:
        if core.num_steps == 2 and 2 not in seen:
            seen[2] = core.requests.num_preemptions.tolist()

    core = run_node(setup, fast_forward=False, observer=observe)
    check_finished(core)
    return seen[2]


def test_the_lookahead_slots_make_the_first_verify_step_preempt() -> None:
    # Admission reserves no lookahead: both 10-token prompts take 3 blocks, 6 of the 8. The
    # first verify step then needs 10 + 1 + 3 = 14 slots each (4 blocks, one more each: both
    # fit in the 2 free) without lookahead, and 14 + 3 = 17 (5 blocks, two more each) with it:
    # the first takes the 2 free blocks and the second, the tail of running, is preempted.
    assert _preemptions_after_step_two(_setup(0, 8)) == [0, 0]
    assert _preemptions_after_step_two(_setup(3, 8)) == [0, 1]
    # With the two blocks more that the reservation needs, the step fits again.
    assert _preemptions_after_step_two(_setup(3, 10)) == [0, 0]


def test_a_negative_lookahead_is_refused() -> None:
    with pytest.raises(ValueError, match="lookahead_slots must be >= 0, got -1"):
        SchedulerConfig(8, 64, True, lookahead_slots=-1)


def _lookahead(preset: str, method: str) -> int:
    document = {
        "seed": 1,
        "engine": {"preset": preset},
        "speculation": {
            "method": method,
            "num_speculative_tokens": 3,
            "acceptance": {"alpha": 0.7},
        },
        "workload": {
            "num_requests": 4,
            "arrival": {"process": "poisson", "rate_per_s": 1.0},
            "prompt_tokens": {"distribution": "uniform", "low": 20, "high": 90},
            "output_tokens": {"distribution": "uniform", "low": 1, "high": 20},
        },
    }
    simulation = build_simulation(validate_document(document, "lookahead"), Path("."))
    return simulation.core.scheduler.config.lookahead_slots


@pytest.mark.parametrize(
    ("preset", "method", "expected"),
    [
        ("vllm-v1-async", "eagle3", 3),  # use_eagle(): eagle, eagle3, mtp
        ("vllm-v1-async", "eagle", 3),
        ("vllm-v1", "eagle3", 3),  # the same rule from v0.9.0
        ("vllm-v1-async", "medusa", 0),  # neither use_eagle() nor a draft model
        ("sglang-0.5", "eagle3", 0),  # not vLLM's scheduler
    ],
)
def test_the_presets_reserve_vllms_lookahead(preset: str, method: str, expected: int) -> None:
    assert _lookahead(preset, method) == expected
