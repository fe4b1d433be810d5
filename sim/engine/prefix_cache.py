"""Automatic prefix caching: which KV blocks two requests can share, and the cache of such blocks.

vLLM V1 names a full KV block by a chained hash, ``hash(parent block's hash, this block's token
ids)`` (``hash_block_tokens`` in vllm/v1/core/kv_cache_utils.py), so equal hashes mean equal
prefixes up to the block's end. The simulator has no token ids; a request instead carries its
prefix structure, and a block's key is built from it so that equal prefixes give equal keys and
different prefixes never collide (keys are exact tuples, not hashes that could clash):

* block ``i`` lying wholly inside a shared prefix (a system prompt) of ``prefix_id`` ``p`` is
  ``(PREFIX, p, i)``: every request opening with that prefix computes the same tokens there;
* any other full block of a turn of session ``s`` is ``(SESSION, s, i)``: turn ``t`` resends the
  session's history (earlier prompts and answers), so its first tokens are those of turn ``t - 1``
  and block ``i`` holds the same tokens in every turn that reaches it;
* other blocks (a request's own question, any block of a request with no prefix structure) can
  never be shared, so they get no key: the block manager counts them without naming them.

:class:`PrefixCache` is the table of named blocks: a reference count for each (the running
requests holding it) and, for those no request holds, a least-recently-freed queue from which a
block is evicted only when the pool has no unnamed free block left.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from sim.errors import InvariantError

IntArray = NDArray[np.int64]

#: The kinds of shareable block.
PREFIX, SESSION = 0, 1

BlockKey = tuple[int, int, int]

#: ``hash_limit_tokens`` of a session turn: every full block of it can be shared.
UNLIMITED_TOKENS = np.iinfo(np.int64).max // 4


@dataclass(frozen=True)
class PrefixStructure:
    """What each request shares with others: columns with one entry per request.

    ``prefix_id``: the shared prefix it opens with (-1: none), ``prefix_tokens`` long;
    ``session_id``: the multi-turn session it is a turn of (-1: none).

    Raise ValueError if the columns differ in length or a prefix has no tokens.
    """

    prefix_id: IntArray
    prefix_tokens: IntArray
    session_id: IntArray

    def __post_init__(self) -> None:
        n = len(self.prefix_id)
        if len(self.prefix_tokens) != n or len(self.session_id) != n:
            raise ValueError("prefix_id, prefix_tokens and session_id differ in length")
        if ((self.prefix_id >= 0) & (self.prefix_tokens < 1)).any():
            raise ValueError("a request with a shared prefix has prefix_tokens < 1")

    @classmethod
    def none(cls, num_requests: int) -> PrefixStructure:
        """No request shares anything (prefix caching can then never hit)."""
        minus_one = np.full(num_requests, -1, dtype=np.int64)
        return cls(minus_one, np.zeros(num_requests, dtype=np.int64), minus_one.copy())

    def hash_limit_tokens(self) -> IntArray:
        """Per request, the tokens from its start whose full blocks can be shared (0: none)."""
        limit = np.where(self.prefix_id >= 0, self.prefix_tokens, 0)
        return np.where(self.session_id >= 0, UNLIMITED_TOKENS, limit).astype(np.int64)

    def keys(
        self, request: int, first_block: int, end_block: int, block_size: int
    ) -> list[BlockKey]:
        """Keys of blocks ``first_block`` .. ``end_block - 1`` of ``request`` (all shareable)."""
        prefix = int(self.prefix_id[request])
        prefix_blocks = int(self.prefix_tokens[request]) // block_size if prefix >= 0 else 0
        session = int(self.session_id[request])
        return [
            (PREFIX, prefix, i) if i < prefix_blocks else (SESSION, session, i)
            for i in range(first_block, end_block)
        ]


class PrefixCache:
    """Named KV blocks: a reference count each, and an LRU queue of those no request holds.

    A named block is in exactly one of two places: held (count > 0) or free in the queue
    (count 0). Eviction takes the block freed longest ago and forgets its name.
    """

    def __init__(self) -> None:
        self.refcount: dict[BlockKey, int] = {}
        self.free_queue: OrderedDict[BlockKey, None] = OrderedDict()
        self.num_evicted = 0

    def __len__(self) -> int:
        return len(self.refcount)

    @property
    def num_free(self) -> int:
        """Named blocks no request holds (evictable)."""
        return len(self.free_queue)

    def num_hits(self, keys: list[BlockKey]) -> int:
        """How many of ``keys``, from the first, are cached: the longest cached prefix."""
        count = 0
        for key in keys:
            if key not in self.refcount:
                break
            count += 1
        return count

    def num_free_among(self, keys: list[BlockKey]) -> int:
        """How many of ``keys`` (all cached) sit in the free queue."""
        return sum(1 for key in keys if self.refcount[key] == 0)

    def acquire(self, keys: list[BlockKey]) -> int:
        """Take a reference to each cached key; return how many left the free queue."""
        taken = 0
        for key in keys:
            count = self.refcount[key]
            if count == 0:
                del self.free_queue[key]
                taken += 1
            self.refcount[key] = count + 1
        return taken

    def insert(self, key: BlockKey) -> bool:
        """Name a held block ``key`` (count 1); False if the name is cached already."""
        if key in self.refcount:
            return False
        self.refcount[key] = 1
        return True

    def release(self, keys: list[BlockKey]) -> int:
        """Drop one reference to each key, in order; a block no one holds joins the queue's tail.
        Return how many joined it.

        Raise InvariantError if a key is not held.
        """
        freed = 0
        for key in keys:
            count = self.refcount.get(key, 0)
            if count < 1:
                raise InvariantError(f"releasing block {key} that no request holds")
            self.refcount[key] = count - 1
            if count == 1:
                self.free_queue[key] = None
                freed += 1
        return freed

    def evict(self, num_blocks: int) -> None:
        """Forget the ``num_blocks`` least recently freed blocks.

        Raise InvariantError if fewer are free.
        """
        if num_blocks > len(self.free_queue):
            raise InvariantError(f"evicting {num_blocks} of {len(self.free_queue)} cached blocks")
        for _ in range(num_blocks):
            key, _ = self.free_queue.popitem(last=False)
            del self.refcount[key]
        self.num_evicted += num_blocks

    def check_invariants(self) -> None:
        """Raise InvariantError unless every free-queue block has count 0 and no count is < 0."""
        for key in self.free_queue:
            if self.refcount.get(key) != 0:
                raise InvariantError(f"block {key} is in the free queue while held")
        num_zero = sum(1 for count in self.refcount.values() if count == 0)
        if num_zero != len(self.free_queue):
            raise InvariantError("a cached block no request holds is missing from the free queue")
        if any(count < 0 for count in self.refcount.values()):
            raise InvariantError("a cached block has a negative reference count")
