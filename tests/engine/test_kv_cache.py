"""The KV block ledger: blocks are conserved, never negative, never freed twice.

A hypothesis state machine drives a BlockManager with random allocations, logical lengths,
truncations, frees and scratch reservations, keeps its own model of what each request holds, and
checks the ledger against the model and its own invariants after every command.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sim.engine.kv_cache import BlockManager, blocks_for
from sim.errors import InvariantError

NUM_REQUESTS = 6


def test_blocks_for_is_the_ceiling() -> None:
    tokens = np.arange(0, 100)
    for block_size in (1, 3, 16):
        expected = np.array([int(np.ceil(t / block_size)) for t in tokens])
        assert np.array_equal(blocks_for(tokens, block_size), expected)


@pytest.mark.parametrize(("num_blocks", "block_size"), [(0, 16), (-1, 16), (8, 0)])
def test_constructor_rejects_empty_pools(num_blocks: int, block_size: int) -> None:
    with pytest.raises(ValueError):
        BlockManager(num_blocks, block_size, 1)


class LedgerMachine(RuleBasedStateMachine):
    """Random command sequences against a BlockManager, with a model of the holdings."""

    @initialize(num_blocks=st.integers(1, 40), block_size=st.integers(1, 8))
    def start(self, num_blocks: int, block_size: int) -> None:
        self.kv = BlockManager(num_blocks, block_size, NUM_REQUESTS)
        self.held = np.zeros(NUM_REQUESTS, dtype=np.int64)
        self.logical = np.zeros(NUM_REQUESTS, dtype=np.int64)
        self.scratch = 0

    def _free(self) -> int:
        return self.kv.num_blocks - int(self.held.sum()) - self.scratch

    @rule(
        ids=st.lists(st.integers(0, NUM_REQUESTS - 1), min_size=1, max_size=3, unique=True),
        slots=st.lists(st.integers(0, 60), min_size=3, max_size=3),
    )
    def allocate(self, ids: list[int], slots: list[int]) -> None:
        requests = np.array(ids, dtype=np.int64)
        num_slots = np.array(slots[: len(ids)], dtype=np.int64)
        need = np.maximum(blocks_for(num_slots, self.kv.block_size) - self.held[requests], 0)
        assert np.array_equal(self.kv.blocks_needed(requests, num_slots), need)
        fits = int(need.sum()) <= self._free()
        assert self.kv.can_allocate(requests, num_slots) == fits
        if fits:
            self.kv.allocate(requests, num_slots)
            self.held[requests] += need
        else:
            before = (self.kv.num_free, self.kv.held.copy())
            with pytest.raises(InvariantError):
                self.kv.allocate(requests, num_slots)
            # A refused allocation changes nothing.
            assert self.kv.num_free == before[0]
            assert np.array_equal(self.kv.held, before[1])

    @rule(
        ids=st.lists(st.integers(0, NUM_REQUESTS - 1), min_size=1, max_size=3, unique=True),
        data=st.data(),
    )
    def settle(self, ids: list[int], data: st.DataObject) -> None:
        requests = np.array(ids, dtype=np.int64)
        tokens = np.array(
            data.draw(st.lists(st.integers(0, 40), min_size=len(ids), max_size=len(ids)))
        )
        keep = blocks_for(tokens, self.kv.block_size)
        change = keep - self.held[requests]
        if int(change.sum()) <= self._free():
            self.kv.settle(requests, tokens)
            self.held[requests] = keep
            self.logical[requests] = tokens
        else:
            before = (self.kv.num_free, self.kv.held.copy())
            with pytest.raises(InvariantError):
                self.kv.settle(requests, tokens)
            # A refused settlement changes nothing.
            assert self.kv.num_free == before[0]
            assert np.array_equal(self.kv.held, before[1])

    @rule(ids=st.lists(st.integers(0, NUM_REQUESTS - 1), min_size=1, max_size=3, unique=True))
    def free(self, ids: list[int]) -> None:
        requests = np.array(ids, dtype=np.int64)
        self.kv.free(requests)
        self.held[requests] = 0
        self.logical[requests] = 0

    @rule(ids=st.lists(st.integers(0, NUM_REQUESTS - 1), min_size=1, max_size=3, unique=True))
    def free_twice_frees_once(self, ids: list[int]) -> None:
        requests = np.array(ids, dtype=np.int64)
        self.kv.free(requests)
        free_after_first = self.kv.num_free
        self.kv.free(requests)
        assert self.kv.num_free == free_after_first
        self.held[requests] = 0
        self.logical[requests] = 0

    @rule(num=st.integers(0, 10))
    def reserve_scratch(self, num: int) -> None:
        if num <= self._free():
            self.kv.reserve_scratch(num)
            self.scratch += num
        else:
            with pytest.raises(InvariantError):
                self.kv.reserve_scratch(num)

    @precondition(lambda self: self.scratch > 0)
    @rule(data=st.data())
    def release_scratch(self, data: st.DataObject) -> None:
        num = data.draw(st.integers(1, self.scratch))
        self.kv.release_scratch(num)
        self.scratch -= num

    @invariant()
    def ledger_matches_model(self) -> None:
        self.kv.check_invariants(self.scratch)
        assert np.array_equal(self.kv.held, self.held)
        assert self.kv.num_free == self._free()
        assert self.kv.num_free >= 0
        assert self.kv.num_used == int(self.held.sum()) + self.scratch


LedgerMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestLedger = LedgerMachine.TestCase


def _ledger_with_holdings() -> BlockManager:
    kv = BlockManager(num_blocks=10, block_size=4, num_requests=3)
    kv.settle(np.array([0, 1]), np.array([9, 4]))  # 3 and 1 blocks
    kv.check_invariants()
    return kv


def test_release_of_scratch_never_reserved_is_caught() -> None:
    kv = _ledger_with_holdings()
    kv.release_scratch(2)
    with pytest.raises(InvariantError, match="not conserved"):
        kv.check_invariants()


def test_scratch_is_accounted_only_while_reserved() -> None:
    kv = _ledger_with_holdings()
    kv.reserve_scratch(4)
    assert kv.num_free == 2
    with pytest.raises(InvariantError, match="not conserved"):
        kv.check_invariants()  # the caller must declare the scratch it holds
    kv.check_invariants(scratch_blocks=4)
    kv.release_scratch(4)
    kv.check_invariants()


def test_a_holding_short_of_its_logical_length_is_caught() -> None:
    kv = _ledger_with_holdings()
    kv.logical_tokens[1] = 5  # 5 tokens need 2 blocks, 1 held: a corrupt ledger
    with pytest.raises(InvariantError, match="request 1 holds 1 blocks for 5 logical tokens"):
        kv.check_invariants()


def test_settle_keeps_exactly_the_blocks_of_the_logical_length() -> None:
    kv = BlockManager(num_blocks=10, block_size=4, num_requests=2)
    kv.allocate(np.array([0, 1]), np.array([14, 14]))  # 4 blocks each, as a k = 3 step writes
    kv.settle(np.array([0, 1]), np.array([14, 12]))  # request 1 rejected 2 drafts
    assert kv.held.tolist() == [4, 3]
    assert kv.num_free == 3
    kv.settle(np.array([1]), np.array([21]))  # a stretch's growth: 21 tokens fill 6 blocks
    assert kv.held.tolist() == [4, 6]
    assert kv.num_free == 0
    kv.check_invariants()


@given(
    held=st.lists(st.integers(0, 5), min_size=2, max_size=2),
)
def test_freeing_returns_exactly_what_was_held(held: list[int]) -> None:
    kv = BlockManager(num_blocks=12, block_size=2, num_requests=2)
    kv.allocate(np.array([0, 1]), np.array(held) * 2)
    kv.free(np.array([0]))
    assert kv.num_free == 12 - held[1]
    kv.free(np.array([0]))  # a second free of the same request returns nothing more
    assert kv.num_free == 12 - held[1]
    kv.check_invariants()


def test_a_request_named_twice_in_one_free_is_caught() -> None:
    # The ledger does not reject duplicate ids itself; the conservation check must see the
    # double credit so the engine's own invariant run catches any such call.
    kv = _ledger_with_holdings()
    kv.free(np.array([0, 0]))
    with pytest.raises(InvariantError, match="not conserved"):
        kv.check_invariants()


def test_a_request_named_twice_in_one_allocate_is_caught() -> None:
    kv = _ledger_with_holdings()
    kv.allocate(np.array([2, 2]), np.array([8, 8]))
    with pytest.raises(InvariantError, match="not conserved"):
        kv.check_invariants()
