"""The paged KV-cache block ledger (vLLM's block manager, by counts).

The pool holds ``num_blocks`` blocks of ``block_size`` token slots. Blocks a request alone can use
are interchangeable, so the ledger keeps, per request, how many blocks it holds, and the number
free; that is all the scheduler and the cost model need, and it vectorises over a batch. Blocks
two requests can share (a common prefix) are named and reference-counted by
:class:`~sim.engine.prefix_cache.PrefixCache`: a request's block table is its ``num_shared`` named
blocks, first, then its own. A named block no request holds stays cached among the free blocks
and is evicted only when no unnamed free block is left. Paired query/command methods
(``blocks_needed``/``can_allocate`` then ``allocate``; ``settle`` after each step) keep every
change explicit, and ``check_invariants()`` verifies conservation after any of them:
``free + Σ own + named held == num_blocks``, nothing negative, reference counts equal to the
requests holding each named block, and no request holding fewer slots than its logical KV length.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from sim.engine.prefix_cache import BlockKey, PrefixCache, PrefixStructure
from sim.errors import InvariantError

IntArray = NDArray[np.int64]

# Every command taking ``requests`` expects distinct request ids (numpy's fancy-index updates
# apply a repeated id once); the scheduler never repeats one, and check_invariants() detects it.


def blocks_for(num_tokens: IntArray | int, block_size: int) -> IntArray:
    """Blocks needed to hold ``num_tokens`` token slots: ceil(num_tokens / block_size)."""
    return -(-np.asarray(num_tokens, dtype=np.int64) // block_size)


class BlockManager:
    """Counts of KV blocks held per request, and the free pool.

    Raise ValueError if ``num_blocks`` < 1 or ``block_size`` < 1.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        num_requests: int,
        prefixes: PrefixStructure | None = None,
    ) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.num_blocks = int(num_blocks)
        self.block_size = int(block_size)
        self.num_free = int(num_blocks)
        self.held = np.zeros(num_requests, dtype=np.int64)
        # Slots a request's logical KV length occupies (for the invariant check only).
        self.logical_tokens = np.zeros(num_requests, dtype=np.int64)
        # Prefix caching: None (off) or what each request can share.
        self.prefixes = prefixes
        self.hash_limit_tokens = (
            np.zeros(num_requests, dtype=np.int64)
            if prefixes is None
            else prefixes.hash_limit_tokens()
        )
        #: Whether any request can share a block (else the named-block paths never run).
        self.caching = bool((self.hash_limit_tokens > 0).any())
        self.cache = PrefixCache()
        #: Leading blocks of each request that are named (shared, reference-counted).
        self.num_shared = np.zeros(num_requests, dtype=np.int64)
        #: Leading blocks of each request already offered to the cache (named or not).
        self.num_offered = np.zeros(num_requests, dtype=np.int64)
        self.shared_keys: dict[int, list[BlockKey]] = {}

    # --- queries ------------------------------------------------------------------------------
    def blocks_needed(self, requests: IntArray, num_slots: IntArray) -> IntArray:
        """Extra blocks each request needs to hold ``num_slots`` token slots in total."""
        return np.maximum(blocks_for(num_slots, self.block_size) - self.held[requests], 0)

    def can_allocate(self, requests: IntArray, num_slots: IntArray) -> bool:
        """Whether all ``requests`` can grow to ``num_slots`` slots at once."""
        return int(self.blocks_needed(requests, num_slots).sum()) <= self.num_free

    @property
    def num_used(self) -> int:
        """Blocks held by requests (cached blocks no request holds count as free)."""
        return self.num_blocks - self.num_free

    @property
    def num_free_unnamed(self) -> int:
        """Free blocks that hold no cached prefix (taken before any cached block is evicted)."""
        return self.num_free - self.cache.num_free

    @property
    def num_named_held(self) -> int:
        """Distinct named blocks some request holds."""
        return len(self.cache) - self.cache.num_free

    def room_without_eviction(self, requests: IntArray) -> int:
        """Pool blocks ``requests`` (all the running ones) could hold evicting no cached block."""
        room = self.num_free_unnamed + int(self.held[requests].sum())
        if self.caching:
            room += self.num_named_held - int(self.num_shared[requests].sum())
        return room

    def pool_blocks(
        self, requests: IntArray, table_blocks: IntArray, active: NDArray[np.bool_]
    ) -> IntArray:
        """Pool blocks per step of a stretch from the sum ``table_blocks`` of the block tables of
        ``requests`` active in each step (``active``: request × step): a named block several
        requests hold is one block of the pool, and none is named or freed within a stretch."""
        if not self.caching:
            return table_blocks
        shared = self.num_shared[requests]
        if not shared.any():
            return table_blocks
        return table_blocks - (shared[:, None] * active).sum(axis=0) + self.num_named_held

    def lookup(self, request: int, max_tokens: int) -> list[BlockKey]:
        """Keys of the longest cached prefix of ``request`` within its first ``max_tokens``."""
        if self.prefixes is None:
            return []
        end = min(int(self.hash_limit_tokens[request]), max_tokens) // self.block_size
        if end <= 0:
            return []
        keys = self.prefixes.keys(request, 0, end, self.block_size)
        return keys[: self.cache.num_hits(keys)]

    # --- commands -----------------------------------------------------------------------------
    def _take(self, num_blocks: int) -> None:
        """Take ``num_blocks`` free blocks, evicting cached ones (LRU) when no other is free."""
        if num_blocks > self.num_free:
            raise InvariantError(f"allocating {num_blocks} blocks with only {self.num_free} free")
        if self.cache.free_queue:
            short = num_blocks - self.num_free_unnamed
            if short > 0:
                self.cache.evict(short)
        self.num_free -= num_blocks

    def acquire_cached(self, request: int, keys: list[BlockKey]) -> None:
        """Start ``request``'s block table with the cached blocks ``keys`` (a prefix hit).

        Raise InvariantError if the request already holds blocks.
        """
        if self.held[request] != 0:
            raise InvariantError(f"request {request} hits the cache while holding blocks")
        self.num_free -= self.cache.acquire(keys)
        n = len(keys)
        self.held[request] = n
        self.num_shared[request] = n
        self.num_offered[request] = n
        self.shared_keys[request] = list(keys)

    def cache_blocks(self, request: int, num_tokens: int) -> None:
        """Name ``request``'s full blocks within its first ``num_tokens`` tokens (as vLLM caches a
        block once the tokens filling it are scheduled). A block whose name is already cached
        stays the request's own (a duplicate), and so do all after it: a block table's named
        blocks are always its first ones.

        Raise InvariantError if the request does not hold those blocks.
        """
        if self.prefixes is None:
            return
        end = min(int(self.hash_limit_tokens[request]), num_tokens) // self.block_size
        start = int(self.num_offered[request])
        if end <= start:
            return
        if end > self.held[request]:
            raise InvariantError(f"request {request} names {end} blocks but holds fewer")
        self.num_offered[request] = end
        if self.num_shared[request] != start:
            return  # the chain broke at a duplicate
        keys = self.shared_keys.setdefault(request, [])
        for key in self.prefixes.keys(request, start, end, self.block_size):
            if not self.cache.insert(key):
                break
            keys.append(key)
            self.num_shared[request] += 1

    def grow(self, request: int, num_blocks: int) -> None:
        """Give one request ``num_blocks`` more blocks.

        Raise InvariantError if the pool cannot cover them.
        """
        self._take(num_blocks)
        self.held[request] += num_blocks

    def allocate(self, requests: IntArray, num_slots: IntArray) -> None:
        """Grow each request's holding to cover ``num_slots`` slots.

        Raise InvariantError if the pool cannot cover it (callers ask ``can_allocate`` first).
        """
        need = self.blocks_needed(requests, num_slots)
        self._take(int(need.sum()))
        self.held[requests] += need

    def grant(self, requests: IntArray, num_blocks: IntArray) -> None:
        """Give each request ``num_blocks`` more blocks (as computed by :meth:`blocks_needed`).

        Raise InvariantError if the pool cannot cover them.
        """
        self._take(int(num_blocks.sum()))
        self.held[requests] += num_blocks

    def settle(self, requests: IntArray, num_tokens: IntArray) -> None:
        """Record each request's logical KV length (its committed tokens) and make it hold
        exactly the blocks they fill: the blocks beyond are freed (rejected drafts written in
        place), missing ones taken (accepted drafts kept in scratch slots, or a stretch's
        growth), evicting cached blocks only when no other is free.

        Raise InvariantError if the pool cannot cover the growth.
        """
        change = -(-num_tokens // self.block_size) - self.held[requests]
        if not self.cache.free_queue:
            # No cached block to evict: freeing the excess and taking the growth is one net
            # change, and the growth fits exactly when the net change does.
            net = int(change.sum())
            if net > self.num_free:
                need = int(change[change > 0].sum())
                excess = need - net
                raise InvariantError(
                    f"settling needs {need} blocks with {self.num_free + excess} free"
                )
            self.logical_tokens[requests] = num_tokens
            self.num_free -= net
            self.held[requests] += change
            return
        excess = int(-change[change < 0].sum())
        need = int(change[change > 0].sum())
        if need > self.num_free + excess:
            raise InvariantError(f"settling needs {need} blocks with {self.num_free + excess} free")
        self.logical_tokens[requests] = num_tokens
        self.num_free += excess
        if need:
            self._take(need)
        self.held[requests] += change

    def free(self, requests: IntArray) -> None:
        """Return every block of ``requests`` to the pool (finish or preemption), in order.

        Named blocks drop a reference; those no request holds any more stay cached at the tail of
        the free queue, a request's last block first (vLLM frees a block table in reverse, so
        its tail is evicted first).
        """
        if not self.caching:
            self.num_free += int(self.held[requests].sum())
        else:
            shared = self.num_shared[requests]
            self.num_free += int((self.held[requests] - shared).sum())
            for request in requests[shared > 0].tolist():
                keys = self.shared_keys.pop(request)
                self.num_free += self.cache.release(keys[::-1])
            self.num_shared[requests] = 0
            self.num_offered[requests] = 0
        self.held[requests] = 0
        self.logical_tokens[requests] = 0

    def reserve_scratch(self, num_blocks: int) -> None:
        """Take ``num_blocks`` from the pool for a step's scratch slots.

        Raise InvariantError if fewer are free.
        """
        if num_blocks > self.num_free:
            raise InvariantError(f"reserving {num_blocks} scratch blocks with {self.num_free} free")
        self._take(num_blocks)

    def release_scratch(self, num_blocks: int) -> None:
        """Give back scratch blocks taken by :meth:`reserve_scratch`."""
        self.num_free += num_blocks

    # --- invariants ---------------------------------------------------------------------------
    def check_invariants(self, scratch_blocks: int = 0) -> None:
        """Raise InvariantError unless blocks are conserved and every holding covers its tokens."""
        if self.num_free < 0:
            raise InvariantError(f"negative free blocks: {self.num_free}")
        if (self.held < 0).any():
            raise InvariantError("a request holds a negative number of blocks")
        if self.num_free_unnamed < 0:
            raise InvariantError(
                f"{self.cache.num_free} cached free blocks of {self.num_free} free"
            )
        if (self.num_shared > self.held).any():
            raise InvariantError("a request holds more named blocks than blocks")
        own = int((self.held - self.num_shared).sum())
        total = self.num_free + own + self.num_named_held + scratch_blocks
        if total != self.num_blocks:
            raise InvariantError(f"blocks not conserved: {total} accounted of {self.num_blocks}")
        self._check_references()
        short = blocks_for(self.logical_tokens, self.block_size) > self.held
        if short.any():
            first = int(np.flatnonzero(short)[0])
            raise InvariantError(
                f"request {first} holds {self.held[first]} blocks for "
                f"{self.logical_tokens[first]} logical tokens"
            )

    def _check_references(self) -> None:
        """Raise InvariantError unless each named block's count is the requests holding it."""
        self.cache.check_invariants()
        holders: dict[BlockKey, int] = {}
        for request, keys in self.shared_keys.items():
            if len(keys) != self.num_shared[request] or len(set(keys)) != len(keys):
                raise InvariantError(f"request {request}: named blocks do not match its table")
            for key in keys:
                holders[key] = holders.get(key, 0) + 1
        if int(self.num_shared.sum()) != sum(holders.values()):
            raise InvariantError("a request counts named blocks it has no key for")
        for key, count in self.cache.refcount.items():
            if holders.get(key, 0) != count:
                raise InvariantError(f"block {key}: count {count}, held by {holders.get(key, 0)}")
        if any(key not in self.cache.refcount for key in holders):
            raise InvariantError("a request holds a named block the cache forgot")
