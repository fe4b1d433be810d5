"""The scheduler's admission queries foretell what ``schedule()`` then does.

A stretch may run while the queue's head waits (``Scheduler.head_admissible`` says in which step
it would be admitted) and may open with admitting the queue's first requests
(``Scheduler.whole_admissions`` says how many). Both re-state ``_admit``'s rule as arithmetic
over many steps or many requests at once; here each prediction is made just before a real
``schedule()`` call, stepping one by one, and compared with what the call did.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, event, given, settings

from sim.engine.core import EngineCore
from sim.engine.queues import ScheduledBatch

from .harness import EngineSetup, build_core, check_finished, drive_node
from .strategies import engine_setups


def _predict(core: EngineCore) -> tuple[bool | None, int | None]:
    """Before a step: whether the head is admitted (None: not predictable in this state), and
    how many requests are admitted whole (None: the query declines)."""
    s, r = core.scheduler, core.requests
    running = s.running
    if len(running) and not s.decode_mask(running).all():
        return None, None  # a prefill chunk runs: neither query applies
    whole = s.whole_admissions() if s.waiting else None
    head = s.predictable_head()
    if head is None:
        return None, whole
    proposed = np.zeros(len(running), dtype=np.int64)
    if len(s.plan.proposed):
        proposed = s.plan.lookup(running, r.num_decode_steps[running])[0]
    tokens = int((1 + s.config.extra_tokens_per_decode + proposed).sum())
    used = s.kv.num_used + s._decode_blocks(running)
    if tokens > s.config.max_num_batched_tokens or used > s.kv.num_blocks:
        return None, whole  # the decodes themselves do not fit: trimmed or preempted
    admitted = s.head_admissible(head, np.array([tokens]), np.array([used]), len(running))
    return bool(admitted[0]), whole


def _checked(setup: EngineSetup) -> tuple[int, int]:
    """Step ``setup`` one step at a time, checking both queries before every schedule() call;
    return how many predictions of each kind were checked."""
    counts = [0, 0]
    core = build_core(setup, fast_forward=False)
    s = core.scheduler
    original = s.schedule

    def schedule(now_s: float) -> ScheduledBatch:
        waiting_before = list(s.waiting)
        head_admitted, whole = _predict(core)
        batch = original(now_s)
        if batch.num_preempted:
            return batch  # preemption reorders the queue: outside both queries' cases
        scheduled = set(batch.ids.tolist())
        admitted = [i for i in waiting_before if i in scheduled]
        if head_admitted is not None:
            counts[0] += 1
            assert head_admitted == (waiting_before[0] in scheduled)
        if whole is not None:
            counts[1] += 1
            assert admitted == waiting_before[:whole]
            # Each one admitted whole: its prefill took the prompt in one chunk.
            take = dict(zip(batch.ids.tolist(), batch.num_new_tokens.tolist(), strict=True))
            assert all(take[i] == int(core.requests.prompt_tokens[i]) for i in admitted)
        return batch

    s.schedule = schedule  # type: ignore[method-assign]
    check_finished(drive_node(setup, core=core)[0])
    return counts[0], counts[1]


QUERIES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@QUERIES
@given(setup=engine_setups(speculative=False))
def test_admission_queries_without_speculation(setup: EngineSetup) -> None:
    heads, wholes = _checked(setup)
    event(f"head predictions: {heads > 0}; whole-admission predictions: {wholes > 0}")


@QUERIES
@given(setup=engine_setups(speculative=True))
def test_admission_queries_with_drafts(setup: EngineSetup) -> None:
    heads, wholes = _checked(setup)
    event(f"head predictions: {heads > 0}; whole-admission predictions: {wholes > 0}")
