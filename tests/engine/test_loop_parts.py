"""The compiled loop's parts that answer a query another way than the Python path's code does.

The oracle's acceptance read once per row and position (:func:`policy_kernel.acc_len_at`, a
value kept per request) must be ``PositionAcceptance.at`` at every read, whatever order the
positions come in (a row read ahead that does not move as read, a preempted row read again, a
trace that wraps); and a step after which ``disable-above-batch`` drafts nothing
(:func:`policy_kernel.drafts_next` false), which gathers no drafting work, must be one whose
look-ahead (:func:`policy_lookahead.draft_proposed`) would propose no draft. The whole loop's
records are compared with the Python path's in ``test_compiled_loop.py`` and
``test_compiled_policies.py``; these check the two shortcuts on their own, compiled as the loop
runs them.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine import loop_kernel, loop_state, policy_kernel, policy_lookahead
from sim.engine.policies import PositionAcceptance
from sim.engine.policy_kernel import _K, _K_MAX, _KIND, _MAX_BATCH, _NUM_INTS, DISABLE

pytest.importorskip("numba")


@pytest.fixture(scope="module", autouse=True)
def _compiled() -> None:
    # The kernels compiled as the loop runs them (no reference counting).
    assert loop_kernel.compiled() is not None


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=5),
    seed=st.integers(0, 2**32 - 1),
    num_reads=st.integers(1, 60),
)
def test_acc_len_kept_per_request_is_the_acceptance_at_every_read(
    lengths: list[int], seed: int, num_reads: int
) -> None:
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    values = rng.integers(1, 6, size=int(offsets[-1])).astype(np.uint8)
    acceptance = PositionAcceptance(values, offsets)
    cache = np.full((len(lengths), 2), -1, dtype=np.int64)
    # Reads as the loop makes them: mostly a row's next position, sometimes one it read before
    # or one past its trace's end (the trace wraps).
    for _ in range(num_reads):
        r = int(rng.integers(len(lengths)))
        position = int(rng.integers(0, 3 * lengths[r]))
        if rng.random() < 0.5 and cache[r, 0] >= 0:
            position = int(cache[r, 0])
        expected = int(acceptance.at(np.array([r]), np.array([position]))[0])
        assert policy_kernel.acc_len_at(values, offsets, cache, r, position) == expected
        assert policy_kernel.acc_len(values, offsets, r, position) == expected


@settings(max_examples=80, deadline=None)
@given(
    k=st.integers(0, 4),
    max_batch=st.integers(1, 6),
    batch_after=st.integers(0, 9),
    drafting=st.lists(st.booleans(), min_size=1, max_size=6),
    decoding=st.lists(st.booleans(), min_size=1, max_size=6),
)
def test_no_drafting_work_only_where_disable_above_batch_proposes_none(
    k: int, max_batch: int, batch_after: int, drafting: list[bool], decoding: list[bool]
) -> None:
    n = min(len(drafting), len(decoding))
    ints = np.zeros(_NUM_INTS, dtype=np.int64)
    ints[_KIND], ints[_K], ints[_K_MAX], ints[_MAX_BATCH] = DISABLE, k, max(k, 1), max_batch
    is_dec = np.array(decoding[:n])
    drafts = np.array(drafting[:n])
    drafting_dec = int((is_dec & drafts).sum())
    rows = loop_state.step_buffers(n)[0]
    f1, i2, f2 = np.zeros(1), np.zeros((1, 1), dtype=np.int64), np.zeros((1, 1))
    proposed = policy_lookahead.draft_proposed(
        ints, f1, np.zeros(3, dtype=np.int64), i2, i2, f2, f2, np.zeros((1, 1, 1, 1)), f2,
        np.ones(1, dtype=np.uint8), np.zeros(2, dtype=np.int64), i2, rows[0], is_dec, drafts,
        rows[1], n, batch_after, int(is_dec.sum()), drafting_dec, int(drafts.sum()) - drafting_dec,
        np.zeros(1, dtype=np.int64), np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64),
    )  # fmt: skip
    # The look-ahead proposes k for every drafting row up to the batch size, none above it.
    assert proposed == (k * int(drafts.sum()) if batch_after <= max_batch else 0)
    if not policy_kernel.drafts_next(ints, batch_after):
        assert proposed == 0
