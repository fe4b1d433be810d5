"""Admission queries: whether, and how many of, the waiting requests the scheduler would admit in
the coming steps, asked by the stretch planner before it plans a stretch.
"""

from __future__ import annotations

from itertools import islice

import numpy as np
from numpy.typing import NDArray

from sim.engine.kv_cache import blocks_for
from sim.engine.queues import IntArray, SchedulerQueues


class AdmissionQueries(SchedulerQueues):
    """What the stretch planner asks before a step: whether and how many waiting requests the
    next steps would admit, by :meth:`Scheduler._admit`'s rule without running it."""

    def predictable_head(self, position: int = 0) -> int | None:
        """The waiting request at ``position`` (the head once those before it are admitted) if
        :meth:`head_admissible` can tell when the scheduler would admit it (batches mix
        prefills with decodes, and no cached prefix can shorten its prefill), else None."""
        if len(self.waiting) <= position or not self.config.mixed_batches:
            return None
        head = self.waiting[position]
        if self.kv.caching and self.kv.hash_limit_tokens[head] > 0:
            return None
        return head

    def whole_admissions(self) -> int | None:
        """How many requests from the head of the queue the next step would admit, each with
        its whole prompt, while every running sequence decodes: :meth:`_admit`'s rule as
        cumulative sums of budget and blocks. None when the step would admit one the planner
        cannot follow: a partial prompt chunk, a recompute after preemption, a prefix-cache
        hit, or batches that keep prefills apart."""
        cfg, r, kv = self.config, self.requests, self.kv
        room = cfg.max_num_seqs - len(self.running)
        if not cfg.mixed_batches or not self.waiting or room <= 0:
            return None
        if len(self.waiting) == 1:
            # One request waits (an arrival at a light load): the cheap bound below, in scalars.
            head = self.waiting[0]
            want_one = int(r.prompt_tokens[head])
            if (
                r.num_emitted[head] == 0
                and r.num_computed_tokens[head] == 0
                and not (kv.caching and kv.hash_limit_tokens[head] > 0)
            ):
                take = 1 + cfg.extra_tokens_per_decode + self._max_proposed()
                num_running = len(self.running)
                slots = take + cfg.lookahead_slots
                most_blocks = num_running * (-(-slots // kv.block_size) + 1)
                if (
                    num_running * take + want_one <= cfg.max_num_batched_tokens
                    and most_blocks + -(-want_one // kv.block_size) <= kv.num_free
                ):
                    return 1
        queue = np.fromiter(
            islice(self.waiting, room + 1), dtype=np.int64, count=min(room + 1, len(self.waiting))
        )
        want = r.prompt_tokens[queue]
        blocks = blocks_for(want, kv.block_size)
        plain = (r.num_emitted[queue] == 0) & (r.num_computed_tokens[queue] == 0)
        if kv.caching:
            plain &= kv.hash_limit_tokens[queue] == 0
        running = self.running
        if len(queue) <= room and plain.all():
            # A cheap bound first: if the running decodes took the most a decode can take (the
            # longest draft, and one more block than the tokens fill), would all still fit?
            take = 1 + cfg.extra_tokens_per_decode + self._max_proposed()
            slots = take + cfg.lookahead_slots
            most_blocks = len(running) * (int(blocks_for(slots, kv.block_size)) + 1)
            if (
                len(running) * take + int(want.sum()) <= cfg.max_num_batched_tokens
                and most_blocks + int(blocks.sum()) <= kv.num_free
            ):
                return len(queue)
        decode_tokens = 0
        if len(running):
            proposed = np.zeros(len(running), dtype=np.int64)
            if len(self.plan.proposed):
                proposed = self.plan.lookup(running, r.num_decode_steps[running])[0]
            decode_tokens = int((1 + cfg.extra_tokens_per_decode + proposed).sum())
        budget = cfg.max_num_batched_tokens - decode_tokens
        free = kv.num_free - self._decode_blocks(running)
        budget_before = budget - (np.cumsum(want) - want)
        free_before = free - (np.cumsum(blocks) - blocks)
        whole = (
            (np.arange(len(queue)) < room)
            & (want <= budget_before)
            & (blocks <= free_before)
            & plain
        )
        k = len(queue) if whole.all() else int(np.argmin(whole))
        if k == len(queue) or k >= room or budget_before[k] <= 0:
            return k
        if not plain[k]:
            return None  # it may be admitted by a path the planner does not model
        if want[k] > budget_before[k]:
            if not cfg.chunked_prefill:
                return k
            # Chunked: admitted with a partial prompt if that chunk's blocks fit.
            chunk = blocks_for(budget_before[k], kv.block_size)
            return None if chunk <= free_before[k] else k
        return k  # short of blocks

    def head_admissible(
        self, head: int, num_tokens: IntArray, used_blocks: IntArray, num_running: IntArray | int
    ) -> NDArray[np.bool_]:
        """Whether :meth:`schedule` would admit the waiting ``head`` (from
        :meth:`predictable_head`) in each of several steps whose ``num_running`` running decodes
        take ``num_tokens`` of the budget and leave ``used_blocks`` of the pool in use: it needs
        a sequence slot, budget, and the blocks of its first chunk (:meth:`_admit`'s rule)."""
        cfg, r = self.config, self.requests
        want = int(r.prompt_tokens[head] + r.num_emitted[head])
        computed = int(r.num_computed_tokens[head])  # 0: a waiting request holds no KV
        budget = cfg.max_num_batched_tokens - num_tokens
        take = np.minimum(want - computed, budget)
        need = blocks_for(computed + take, self.kv.block_size)
        fits = (budget > 0) & (need <= self.kv.num_blocks - used_blocks)
        if not cfg.chunked_prefill:
            fits &= want - computed <= budget
        return fits & (num_running < cfg.max_num_seqs)
