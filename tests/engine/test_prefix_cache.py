"""Prefix caching: named blocks, reference counts, LRU eviction, and the engine running with them.

Unit tests pin the cache's commands; property tests run random nodes whose requests share
prefixes and sessions, checking after every event that no block is leaked or freed twice, that
each named block's count is the requests holding it, that a cached block is held or queued but
never both, that a hit never covers the last prompt token, and that caching changes nothing when
nothing is shared, and nothing between fast-forwarded and stepped runs.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from sim.engine.drafter import StepPlan
from sim.engine.kv_cache import BlockManager
from sim.engine.prefix_cache import PREFIX, SESSION, PrefixCache, PrefixStructure
from sim.engine.queues import SchedulerConfig
from sim.engine.requests import RequestTable
from sim.engine.scheduler import Scheduler
from sim.errors import InvariantError

from .harness import EngineSetup, Monitor, build_core, check_finished, record_of, run_node
from .strategies import engine_setups

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


def _structure(
    prefix_ids: list[int], prefix_tokens: list[int], sessions: list[int]
) -> PrefixStructure:
    return PrefixStructure(
        np.array(prefix_ids, dtype=np.int64),
        np.array(prefix_tokens, dtype=np.int64),
        np.array(sessions, dtype=np.int64),
    )


# --- the cache's commands ------------------------------------------------------------------------
def test_keys_share_the_prefix_blocks_and_name_the_rest_by_session() -> None:
    structure = _structure([3, 3, 4], [40, 40, 40], [-1, 7, 7])
    # Block 1 ends at token 32 <= 40: still the prefix; block 2 runs past it: the session's.
    assert structure.keys(1, 0, 3, 16) == [(PREFIX, 3, 0), (PREFIX, 3, 1), (SESSION, 7, 2)]
    assert structure.keys(0, 0, 2, 16) == structure.keys(1, 0, 2, 16)
    assert set(structure.keys(2, 0, 2, 16)).isdisjoint(structure.keys(1, 0, 2, 16))
    assert list(structure.hash_limit_tokens()[:1]) == [40]


def test_eviction_takes_the_least_recently_freed_block_and_forgets_it() -> None:
    cache = PrefixCache()
    keys = [(PREFIX, 0, i) for i in range(3)]
    for key in keys:
        assert cache.insert(key)
    assert not cache.insert(keys[0])  # already named
    cache.release([keys[2], keys[0]])
    cache.release([keys[1]])
    cache.check_invariants()
    cache.evict(2)
    assert list(cache.refcount) == [keys[1]] and cache.num_free == 1
    assert cache.num_hits(keys) == 0
    with pytest.raises(InvariantError):
        cache.evict(2)
    with pytest.raises(InvariantError):
        cache.release([keys[0]])


def test_a_hit_takes_the_block_out_of_the_free_queue() -> None:
    cache = PrefixCache()
    key = (SESSION, 1, 0)
    cache.insert(key)
    cache.release([key])
    assert cache.num_free_among([key]) == 1
    assert cache.acquire([key]) == 1
    assert cache.num_free == 0 and cache.refcount[key] == 1
    cache.check_invariants()


def test_unnamed_free_blocks_go_before_any_cached_block() -> None:
    structure = _structure([0, 0, -1], [32, 32, 0], [-1, -1, -1])
    kv = BlockManager(4, 16, 3, structure)
    kv.grow(0, 2)
    kv.cache_blocks(0, 32)
    assert kv.num_shared[0] == 2 and kv.num_named_held == 2
    kv.free(np.array([0]))
    assert kv.num_free == 4 and kv.cache.num_free == 2
    kv.grow(2, 2)  # takes the two unnamed blocks
    assert kv.cache.num_free == 2
    hits = kv.lookup(1, 31)
    assert len(hits) == 1  # the last prompt token is always computed: one block, not two
    kv.acquire_cached(1, kv.lookup(1, 32))
    assert kv.held[1] == 2 and kv.num_free == 0
    kv.check_invariants()
    kv.free(np.array([1, 2]))
    kv.grow(2, 3)  # two unnamed, then the least recently freed cached block
    assert kv.cache.num_evicted == 1 and kv.cache.num_free == 1
    kv.check_invariants()


def test_a_duplicate_block_stays_its_request_own() -> None:
    structure = _structure([0, 0], [32, 32], [-1, -1])
    kv = BlockManager(8, 16, 2, structure)
    kv.grow(0, 2)
    kv.grow(1, 2)
    kv.cache_blocks(0, 32)
    kv.cache_blocks(1, 32)  # computed in the same step before either was cached
    assert kv.num_shared.tolist() == [2, 0]
    kv.check_invariants()
    kv.free(np.array([0, 1]))
    assert kv.num_free == 8 and kv.cache.num_free == 2
    kv.check_invariants()


def test_references_count_the_holders() -> None:
    structure = _structure([0, 0], [32, 32], [-1, -1])
    kv = BlockManager(8, 16, 2, structure)
    kv.grow(0, 2)
    kv.cache_blocks(0, 32)
    kv.acquire_cached(1, kv.lookup(1, 32))
    assert kv.cache.refcount[(PREFIX, 0, 0)] == 2
    assert kv.num_used == 2  # one copy in the pool for two holders
    kv.free(np.array([0]))
    assert kv.cache.num_free == 0  # still held by request 1
    kv.shared_keys[1] = kv.shared_keys[1][:1]  # corrupt: the table no longer matches
    with pytest.raises(InvariantError):
        kv.check_invariants()


# --- the engine with caching on ------------------------------------------------------------------
@SETTINGS
@given(engine_setups(sharing=True, prefix_caching=True))
def test_invariants_hold_after_every_event_with_shared_prefixes(setup: EngineSetup) -> None:
    monitor = Monitor(build_core(setup), setup.max_accepted)
    core = run_node(setup, observer=monitor)
    check_finished(core)
    kv = core.kv
    assert kv.num_named_held == 0 and not kv.shared_keys
    assert kv.num_free == kv.num_blocks
    kv.check_invariants()


@SETTINGS
@given(engine_setups(sharing=True, prefix_caching=True))
def test_fast_forward_matches_stepping_with_prefix_caching(setup: EngineSetup) -> None:
    fast = record_of(run_node(setup, fast_forward=True))
    slow = record_of(run_node(setup, fast_forward=False))
    assert fast.keys() == slow.keys()
    for key in fast:
        assert np.array_equal(fast[key], slow[key], equal_nan=True), key


@SETTINGS
@given(engine_setups(sharing=False, prefix_caching=True))
def test_caching_changes_nothing_when_nothing_is_shared(setup: EngineSetup) -> None:
    on = record_of(run_node(setup))
    off = record_of(run_node(EngineSetup(**{**setup.__dict__, "prefix_caching": False})))
    for key in on:
        assert np.array_equal(on[key], off[key], equal_nan=True), key


@SETTINGS
@given(engine_setups(sharing=True, prefix_caching=True, spare_blocks=400))
def test_caching_never_adds_prefill_and_saves_exactly_the_hits(setup: EngineSetup) -> None:
    """With room for every request at once (nothing is preempted) a request prefills its prompt
    less its cached tokens; off, its whole prompt."""
    on = run_node(setup)
    off = run_node(EngineSetup(**{**setup.__dict__, "prefix_caching": False}))
    assert on.requests.num_preemptions.sum() == 0 == off.requests.num_preemptions.sum()
    prefill_on = int(on.recorder.columns()["num_prefill_tokens"].sum())
    prefill_off = int(off.recorder.columns()["num_prefill_tokens"].sum())
    cached = int(on.requests.num_cached_tokens.sum())
    assert prefill_off == int(setup.prompt_tokens.sum())
    assert prefill_on == prefill_off - cached
    assert (on.requests.num_cached_tokens <= on.requests.prompt_tokens - 1).all()


@pytest.mark.parametrize("drop_last", [False, True])
def test_admission_starts_after_the_cached_prefix(drop_last: bool) -> None:
    """Four cached blocks of a 64-token system prompt: the next request with that prompt (80
    tokens) prefills 16 tokens, or 32 when a hidden-state drafter recomputes the last block; a
    prompt that is exactly the prefix still computes its last block."""
    structure = _structure([0, 0, 0], [64, 64, 64], [-1, -1, -1])
    requests = RequestTable(prompt_tokens=np.array([64, 80, 64]), output_tokens=np.array([4, 4, 4]))
    kv = BlockManager(16, 16, 3, structure)
    config = SchedulerConfig(8, 8192, True, drop_last_cached_block=drop_last)
    scheduler = Scheduler(config, requests, kv, StepPlan.without_speculation(3))
    scheduler.add_waiting(np.array([0]))
    batch = scheduler.schedule(0.0)
    assert batch.num_new_tokens.tolist() == [64] and kv.num_shared[0] == 4
    requests.num_computed_tokens[0] = 64
    scheduler.finish(np.array([0]))
    assert kv.cache.num_free == 4
    scheduler.add_waiting(np.array([1, 2]))
    batch = scheduler.schedule(1.0)
    lost = 16 if drop_last else 0
    assert batch.num_new_tokens.tolist() == [16 + lost, 16 + lost]
    assert requests.num_cached_tokens[1:].tolist() == [64 - lost, 48 - lost]
    assert kv.cache.refcount[(PREFIX, 0, 0)] == 2
    # A recomputed last block duplicates the cached one, which stays cached and free.
    assert kv.cache.num_free == (1 if drop_last else 0)
    scheduler.check_invariants()
