"""The continuous-batching scheduler, after vLLM V1: one token budget shared by decodes and
prefill chunks, FCFS admission, preemption by recompute when KV blocks run out.

A synchronous state machine that knows nothing about time: ``schedule()`` decides the next step's
batch and commits the KV blocks it needs, ``finish()`` and ``preempt()`` release them. The common
case (every running decode fits) is decided with a few vectorised operations; only block shortage
falls back to vLLM's one-request-at-a-time loop.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from sim.engine.admission_queries import AdmissionQueries
from sim.engine.kv_cache import blocks_for
from sim.engine.queues import IntArray, ScheduledBatch
from sim.engine.requests import RUNNING
from sim.errors import ScenarioError


class Scheduler(AdmissionQueries):
    """Waiting and running queues over a request table and a KV block ledger: the step decision
    (:meth:`schedule`) over the queues' commands (:class:`SchedulerQueues`) and the admission
    queries the planner asks (:class:`AdmissionQueries`)."""

    # --- the step decision --------------------------------------------------------------------
    def schedule(self, now_s: float) -> ScheduledBatch:
        """Choose the next step's batch, allocating its KV blocks (preempting if needed).

        Raise ScenarioError if a lone request can never fit in the KV pool.
        """
        cfg = self.config
        budget = cfg.max_num_batched_tokens
        ids_out: list[IntArray] = []
        new_out: list[IntArray] = []
        dec_out: list[NDArray[np.bool_]] = []
        prop_out: list[IntArray] = []
        acc_out: list[IntArray] = []
        scratch_blocks = 0
        num_preempted = 0

        if cfg.mixed_batches:
            num_preempted, scratch_blocks, budget = self._schedule_running(
                self.running, budget, ids_out, new_out, dec_out, prop_out, acc_out
            )
            admitted = self._admit(now_s, budget) if num_preempted == 0 else None
        else:
            # Prefill batch first: chunks of requests still prefilling, then new admissions. A
            # prefill never takes the blocks the running decodes need for their next step (they
            # would preempt it at once, and the two would trade places forever): SGLang admits
            # new requests only within the room left for the running ones' decodes.
            limit = cfg.max_prefills_per_step or cfg.max_num_seqs
            decode = self.decode_mask(self.running)
            reserve = self._decode_blocks(self.running[decode])
            prefilling = self.running[~decode][:limit]
            fits = self._prefill_blocks(prefilling, budget) + reserve <= self.kv.num_free
            if len(prefilling) and fits:
                num_preempted, scratch_blocks, budget = self._schedule_running(
                    prefilling, budget, ids_out, new_out, dec_out, prop_out, acc_out
                )
            room = limit - sum(len(ids) for ids in ids_out)
            admitted = (
                self._admit(now_s, budget, room, reserve)
                if num_preempted == 0 and room > 0
                else None
            )
            if not ids_out and admitted is None and num_preempted == 0:
                decoding = self.running[self.decode_mask(self.running)]
                if len(decoding):
                    num_preempted, scratch_blocks, budget = self._schedule_running(
                        decoding, budget, ids_out, new_out, dec_out, prop_out, acc_out
                    )
        if admitted is not None:
            ids_out.append(admitted[0])
            new_out.append(admitted[1])
            dec_out.append(np.zeros(len(admitted[0]), dtype=bool))
            zeros = np.zeros(len(admitted[0]), dtype=np.int64)
            prop_out.append(zeros)
            acc_out.append(zeros)

        if not ids_out:
            empty = np.zeros(0, dtype=np.int64)
            return ScheduledBatch(empty, empty, np.zeros(0, dtype=bool), empty, empty, 0, 0)
        return ScheduledBatch(
            ids=np.concatenate(ids_out),
            num_new_tokens=np.concatenate(new_out),
            is_decode=np.concatenate(dec_out),
            proposed=np.concatenate(prop_out),
            accepted=np.concatenate(acc_out),
            scratch_blocks=scratch_blocks,
            num_preempted=num_preempted,
        )

    def _schedule_running(
        self,
        running: IntArray,
        budget: int,
        ids_out: list[IntArray],
        new_out: list[IntArray],
        dec_out: list[NDArray[np.bool_]],
        prop_out: list[IntArray],
        acc_out: list[IntArray],
    ) -> tuple[int, int, int]:
        """Schedule ``running`` (in order) into the step's lists: their decodes or prefill chunks
        within ``budget``, their KV blocks (preempting from the tail of running if short).
        Return the requests preempted, the scratch blocks reserved and the budget left."""
        cfg, r, kv = self.config, self.requests, self.kv
        num_preempted = scratch_blocks = 0
        if len(running) == 0:
            return num_preempted, scratch_blocks, budget
        is_dec = self.decode_mask(running)
        if len(self.plan.proposed):
            proposed, accepted = self.plan.lookup(running, r.num_decode_steps[running])
            proposed = proposed * is_dec
            accepted = accepted * is_dec
        else:
            proposed = accepted = np.zeros(len(running), dtype=np.int64)
        want = np.where(
            is_dec,
            1 + cfg.extra_tokens_per_decode + proposed,
            r.known_tokens(running) - r.num_computed_tokens[running],
        )
        cum = np.cumsum(want)
        take = np.minimum(np.maximum(budget - (cum - want), 0), want)
        if len(self.plan.proposed):
            # A decode short of budget verifies fewer drafts (vLLM V1 trims spec tokens).
            proposed = np.maximum(take - 1 - cfg.extra_tokens_per_decode, 0) * is_dec
            accepted = np.minimum(accepted, proposed)
        keep = take > 0
        ids, take, is_dec = running[keep], take[keep], is_dec[keep]
        proposed, accepted = proposed[keep], accepted[keep]
        own_slots, scratch = self._slots(ids, take, is_dec, proposed)
        need = kv.blocks_needed(ids, own_slots)
        if int(need.sum()) + int(scratch.sum()) > kv.num_free:
            ids, take, is_dec, proposed, accepted, own_slots, scratch, num_preempted = (
                self._allocate_with_preemption(ids, take, is_dec, proposed, accepted)
            )
        else:
            kv.grant(ids, need)
        self._cache_scheduled(ids, take, is_dec)
        scratch_blocks = int(scratch.sum())
        kv.reserve_scratch(scratch_blocks)
        budget -= int(take.sum())
        ids_out.append(ids)
        new_out.append(take)
        dec_out.append(is_dec)
        prop_out.append(proposed)
        acc_out.append(accepted)

        return num_preempted, scratch_blocks, budget

    def _allocate_with_preemption(
        self,
        ids: IntArray,
        take: IntArray,
        is_dec: NDArray[np.bool_],
        proposed: IntArray,
        accepted: IntArray,
    ) -> tuple[IntArray, IntArray, NDArray[np.bool_], IntArray, IntArray, IntArray, IntArray, int]:
        """vLLM V1's loop: allocate in order; when short, preempt from the tail of running.

        The requests that fit one after another are granted together (a cumulative sum of
        their blocks against the free count); only the one that does not fit goes through the
        preemption loop, then the rest carry on from it.
        """
        kv, state = self.kv, self.requests.state
        own_all, scratch_all = self._slots(ids, take, is_dec, proposed)
        need_all = kv.blocks_needed(ids, own_all)
        cost = need_all + scratch_all  # a preemption frees others' blocks, never changes these
        kept: list[IntArray] = []
        num_preempted = 0
        start = 0
        while start < len(ids):
            rest = start + np.flatnonzero(state[ids[start:]] == RUNNING)  # not preempted since
            if len(rest) == 0:
                break
            fit = int(np.searchsorted(np.cumsum(cost[rest]), kv.num_free, side="right"))
            if fit:
                granted = rest[:fit]
                kv.grant(ids[granted], need_all[granted])
                kv.reserve_scratch(int(scratch_all[granted].sum()))
                kept.append(granted)
            if fit == len(rest):
                break
            index = int(rest[fit])
            req = int(ids[index])
            while int(cost[index]) > kv.num_free:
                total = int(blocks_for(own_all[index], kv.block_size)) + int(scratch_all[index])
                if total > kv.num_blocks:
                    # Even alone it could never run: preempting would only repeat forever.
                    raise ScenarioError(
                        f"request {req} needs {total} KV blocks for one step "
                        f"({int(own_all[index])} token slots with its draft slots) but the pool "
                        f"holds {kv.num_blocks}: raise engine.gpu_memory_utilization or lower "
                        "speculation.num_speculative_tokens"
                    )
                victim = self._preempt_tail()
                num_preempted += 1
                if victim == req:
                    break
            else:
                kv.grant(ids[index : index + 1], need_all[index : index + 1])
                kv.reserve_scratch(int(scratch_all[index]))
                kept.append(np.array([index], dtype=np.int64))
            start = index + 1
        # Scratch was reserved as granted above; give it back so the caller reserves the total.
        idx = np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)
        own_slots, scratch = own_all[idx], scratch_all[idx]
        kv.release_scratch(int(scratch.sum()))
        return (
            ids[idx],
            take[idx],
            is_dec[idx],
            proposed[idx],
            accepted[idx],
            own_slots,
            scratch,
            num_preempted,
        )

    def _admit(
        self, now_s: float, budget: int, max_new: int | None = None, reserve_blocks: int = 0
    ) -> tuple[IntArray, IntArray] | None:
        """Admit waiting requests in FCFS order while budget, sequence slots and blocks allow
        (at most ``max_new`` of them, leaving ``reserve_blocks`` free)."""
        cfg, r, kv = self.config, self.requests, self.kv
        ids: list[int] = []
        takes: list[int] = []
        num_running = len(self.running)
        limit = len(self.waiting) if max_new is None else max_new
        while self.waiting and budget > 0 and num_running < cfg.max_num_seqs and len(ids) < limit:
            req = self.waiting[0]
            known = int(r.prompt_tokens[req] + r.num_emitted[req])
            computed = int(r.num_computed_tokens[req])
            hits = []
            if kv.caching and computed == 0 and kv.hash_limit_tokens[req] > 0:
                # The longest cached prefix, short of the last token: that one is always
                # computed, for its logits (vLLM: max_cache_hit_length = num_tokens - 1).
                hits = kv.lookup(req, known - 1)
                if cfg.drop_last_cached_block and hits:
                    hits = hits[:-1]
                computed = len(hits) * kv.block_size
            want = known - computed
            if want > budget and not cfg.chunked_prefill:
                break
            take = min(want, budget)
            slots = computed + take
            need = max(-(-slots // kv.block_size) - int(kv.held[req]) - len(hits), 0)
            # Hit blocks no one holds leave the free pool too: they cannot also be evicted.
            taken = need + (kv.cache.num_free_among(hits) if hits else 0)
            if taken + reserve_blocks > kv.num_free:
                if num_running == 0:
                    raise ScenarioError(
                        f"request {req} needs {-(-slots // kv.block_size)} KV blocks for its "
                        f"first chunk but the pool holds {kv.num_blocks}: raise "
                        "gpu_memory_utilization or lower max_num_batched_tokens"
                    )
                break
            if hits:
                kv.acquire_cached(req, hits)
                r.num_computed_tokens[req] = computed
            kv.grow(req, need)
            if kv.caching and kv.hash_limit_tokens[req] > 0:
                kv.cache_blocks(req, slots)
            self.waiting.popleft()
            num_running += 1
            r.state[req] = RUNNING
            if np.isnan(r.scheduled_at_s[req]):
                r.scheduled_at_s[req] = now_s
                r.num_cached_tokens[req] = computed
            ids.append(req)
            takes.append(take)
            budget -= take
        if not ids:
            return None
        admitted = np.array(ids, dtype=np.int64)
        self.running = np.concatenate((self.running, admitted))
        return admitted, np.array(takes, dtype=np.int64)
