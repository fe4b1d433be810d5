"""The paged KV-cache block ledger (vLLM's block manager, by counts).

The pool holds ``num_blocks`` blocks of ``block_size`` token slots. Blocks are interchangeable, so
the ledger keeps, per request, how many blocks it holds, and the number free; that is all the
scheduler and the cost model need, and it vectorises over a batch. Paired query/command methods
(``blocks_needed``/``can_allocate`` then ``allocate``) keep every change explicit, and
``check_invariants()`` verifies conservation after any of them: ``free + Σ held == num_blocks``,
nothing negative, and no request holding fewer slots than its logical KV length.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

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

    def __init__(self, num_blocks: int, block_size: int, num_requests: int) -> None:
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

    # --- queries ------------------------------------------------------------------------------
    def blocks_needed(self, requests: IntArray, num_slots: IntArray) -> IntArray:
        """Extra blocks each request needs to hold ``num_slots`` token slots in total."""
        return np.maximum(blocks_for(num_slots, self.block_size) - self.held[requests], 0)

    def can_allocate(self, requests: IntArray, num_slots: IntArray) -> bool:
        """Whether all ``requests`` can grow to ``num_slots`` slots at once."""
        return int(self.blocks_needed(requests, num_slots).sum()) <= self.num_free

    @property
    def num_used(self) -> int:
        """Blocks held by requests."""
        return self.num_blocks - self.num_free

    # --- commands -----------------------------------------------------------------------------
    def allocate(self, requests: IntArray, num_slots: IntArray) -> None:
        """Grow each request's holding to cover ``num_slots`` slots.

        Raise InvariantError if the pool cannot cover it (callers ask ``can_allocate`` first).
        """
        need = self.blocks_needed(requests, num_slots)
        total = int(need.sum())
        if total > self.num_free:
            raise InvariantError(f"allocating {total} blocks with only {self.num_free} free")
        self.held[requests] += need
        self.num_free -= total

    def grant(self, requests: IntArray, num_blocks: IntArray) -> None:
        """Give each request ``num_blocks`` more blocks (as computed by :meth:`blocks_needed`).

        Raise InvariantError if the pool cannot cover them.
        """
        total = int(num_blocks.sum())
        if total > self.num_free:
            raise InvariantError(f"allocating {total} blocks with only {self.num_free} free")
        self.held[requests] += num_blocks
        self.num_free -= total

    def set_logical(self, requests: IntArray, num_tokens: IntArray) -> None:
        """Record the logical KV length (committed tokens) of each request."""
        self.logical_tokens[requests] = num_tokens

    def truncate(self, requests: IntArray) -> None:
        """Free the blocks beyond each request's logical length (write-in-place rollback)."""
        keep = blocks_for(self.logical_tokens[requests], self.block_size)
        excess = np.maximum(self.held[requests] - keep, 0)
        self.held[requests] -= excess
        self.num_free += int(excess.sum())

    def free(self, requests: IntArray) -> None:
        """Return every block of ``requests`` to the pool (finish or preemption)."""
        self.num_free += int(self.held[requests].sum())
        self.held[requests] = 0
        self.logical_tokens[requests] = 0

    def reserve_scratch(self, num_blocks: int) -> None:
        """Take ``num_blocks`` from the pool for a step's scratch slots.

        Raise InvariantError if fewer are free.
        """
        if num_blocks > self.num_free:
            raise InvariantError(f"reserving {num_blocks} scratch blocks with {self.num_free} free")
        self.num_free -= num_blocks

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
        total = self.num_free + int(self.held.sum()) + scratch_blocks
        if total != self.num_blocks:
            raise InvariantError(f"blocks not conserved: {total} accounted of {self.num_blocks}")
        short = blocks_for(self.logical_tokens, self.block_size) > self.held
        if short.any():
            first = int(np.flatnonzero(short)[0])
            raise InvariantError(
                f"request {first} holds {self.held[first]} blocks for "
                f"{self.logical_tokens[first]} logical tokens"
            )
