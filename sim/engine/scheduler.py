"""The continuous-batching scheduler, after vLLM V1: one token budget shared by decodes and
prefill chunks, FCFS admission, preemption by recompute when KV blocks run out.

A synchronous state machine that knows nothing about time: ``schedule()`` decides the next step's
batch and commits the KV blocks it needs, ``finish()`` and ``preempt()`` release them. The common
case (every running decode fits) is decided with a few vectorised operations; only block shortage
falls back to vLLM's one-request-at-a-time loop.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import islice

import numpy as np
from numpy.typing import NDArray

from sim.engine.drafter import StepPlan
from sim.engine.kv_cache import BlockManager, blocks_for
from sim.engine.requests import FINISHED, RUNNING, WAITING, RequestTable
from sim.errors import InvariantError, ScenarioError

IntArray = NDArray[np.int64]

#: KV rollback policies for rejected draft tokens.
ROLLBACK_POLICIES = ("in_place", "scratch")


@dataclass(frozen=True)
class SchedulerConfig:
    """Scheduling limits, as vLLM names them."""

    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool
    rollback_policy: str = "in_place"
    #: Tokens a decode step computes besides the input token and the drafts (lookahead decoding's
    #: Jacobi window and n-gram guesses): they take budget and KV slots but are never committed.
    extra_tokens_per_decode: int = 0
    #: Recompute the last block of a prefix-cache hit: a drafter reading the target's hidden
    #: states needs them there (vLLM V1 with EAGLE/MTP: FullAttentionManager.find_longest_cache_hit
    #: in vllm/v1/core/single_type_kv_cache_manager.py pops the last matched block if use_eagle).
    drop_last_cached_block: bool = False
    #: Whether a step may mix prefill chunks with decodes (vLLM V1, chunked prefill) or is either
    #: a prefill batch or a decode batch, prefills first (SGLang: ``enable_mixed_chunk`` off by
    #: default; ``Scheduler.get_next_batch_to_run`` runs a new prefill batch when it can).
    mixed_batches: bool = True
    #: Requests a prefill batch may carry (0: any number; SGLang's ``prefill_only_one_req``: 1).
    max_prefills_per_step: int = 0

    def __post_init__(self) -> None:
        if self.rollback_policy not in ROLLBACK_POLICIES:
            raise ValueError(f"rollback_policy must be one of {ROLLBACK_POLICIES}")


@dataclass(frozen=True)
class ScheduledBatch:
    """The sequences of one step and what each computes.

    ``num_new_tokens``: tokens computed for the sequence (a prefill chunk, or 1 + drafts);
    ``is_decode``: a verify/decode step rather than a prefill chunk; ``proposed``/``accepted``:
    draft tokens carried and accepted (0 for prefills); ``scratch_blocks``: blocks lent to the step
    for draft slots under the scratch policy.
    """

    ids: IntArray
    num_new_tokens: IntArray
    is_decode: NDArray[np.bool_]
    proposed: IntArray
    accepted: IntArray
    scratch_blocks: int
    num_preempted: int


class Scheduler:
    """Waiting and running queues over a request table and a KV block ledger."""

    def __init__(
        self, config: SchedulerConfig, requests: RequestTable, kv: BlockManager, plan: StepPlan
    ) -> None:
        self.config = config
        self.requests = requests
        self.kv = kv
        self.plan = plan
        self.waiting: deque[int] = deque()
        self.running: IntArray = np.zeros(0, dtype=np.int64)

    # --- queue commands ---------------------------------------------------------------------
    def add_waiting(self, ids: IntArray) -> None:
        """Append newly arrived requests to the waiting queue (FCFS)."""
        for r in ids.tolist():
            self.waiting.append(r)
        self.requests.state[ids] = WAITING

    def finish(self, ids: IntArray) -> None:
        """Retire finished requests and return their blocks (shareable full blocks stay cached)."""
        if len(ids) == 0:
            return
        self._cache_computed(ids)
        self.kv.free(ids)
        self.requests.state[ids] = FINISHED
        self.running = self.running[self.requests.state[self.running] == RUNNING]

    def admit_planned(self, ids: IntArray, now_s: float) -> None:
        """Admit ``ids``, the head of the waiting queue in order, as a planned stretch's first
        step does (whole prompts, checked by its planner): off the queue, onto running's end."""
        for _ in range(len(ids)):
            self.waiting.popleft()
        self.running = np.concatenate((self.running, ids))
        r = self.requests
        r.state[ids] = RUNNING
        first_time = ids[np.isnan(r.scheduled_at_s[ids])]  # not a readmission
        r.scheduled_at_s[first_time] = now_s

    def _preempt_tail(self) -> int:
        """Preempt the most recently admitted running request (recompute): back to the front."""
        victim = int(self.running[-1])
        self.running = self.running[:-1]
        self._cache_computed(np.array([victim]))
        self.kv.free(np.array([victim]))
        self.requests.num_computed_tokens[victim] = 0
        self.requests.num_preemptions[victim] += 1
        self.requests.state[victim] = WAITING
        self.waiting.appendleft(victim)
        return victim

    def _cache_computed(self, ids: IntArray) -> None:
        """Name the shareable full blocks of ``ids``'s computed tokens before they are freed: a
        session's answer is part of the history its next turn resends (vLLM caches each block
        as it fills; no other request can ask for an answer's blocks before the turn ends)."""
        kv = self.kv
        if not kv.caching:
            return
        computed = self.requests.num_computed_tokens
        for request in ids[kv.hash_limit_tokens[ids] > 0].tolist():
            kv.cache_blocks(request, int(computed[request]))

    def _cache_scheduled(self, ids: IntArray, take: IntArray, is_dec: NDArray[np.bool_]) -> None:
        """Name the shareable blocks that this step's prefill chunks fill (vLLM caches them when
        it schedules the chunk, so a request admitted later in the same step already hits)."""
        kv = self.kv
        if not kv.caching or len(ids) == 0:
            return
        chunk = ~is_dec & (kv.hash_limit_tokens[ids] > 0)
        if not chunk.any():
            return
        computed = self.requests.num_computed_tokens
        for request, num_new in zip(ids[chunk].tolist(), take[chunk].tolist(), strict=True):
            kv.cache_blocks(request, int(computed[request]) + num_new)

    # --- queries ----------------------------------------------------------------------------
    def decode_mask(self, ids: IntArray) -> NDArray[np.bool_]:
        """Which requests are decoding (all known tokens but the last are in the KV cache)."""
        r = self.requests
        return (r.num_emitted[ids] >= 1) & (r.num_computed_tokens[ids] == r.known_tokens(ids) - 1)

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
                most_blocks = num_running * (-(-take // kv.block_size) + 1)
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
            most_blocks = len(running) * (int(blocks_for(take, kv.block_size)) + 1)
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

    def _decode_blocks(self, decoding: IntArray) -> int:
        """Blocks the decoding requests ``decoding`` need for their next step (drafts included)."""
        if len(decoding) == 0:
            return 0
        r, cfg = self.requests, self.config
        proposed = np.zeros(len(decoding), dtype=np.int64)
        if len(self.plan.proposed):
            proposed = self.plan.lookup(decoding, r.num_decode_steps[decoding])[0]
        take = 1 + cfg.extra_tokens_per_decode + proposed
        own, scratch = self._slots(decoding, take, np.ones(len(decoding), dtype=bool), proposed)
        return int(self.kv.blocks_needed(decoding, own).sum()) + int(scratch.sum())

    def _prefill_blocks(self, prefilling: IntArray, budget: int) -> int:
        """Blocks the next chunks of the requests still prefilling need within ``budget``."""
        if len(prefilling) == 0:
            return 0
        r = self.requests
        want = r.known_tokens(prefilling) - r.num_computed_tokens[prefilling]
        take = np.minimum(np.maximum(budget - (np.cumsum(want) - want), 0), want)
        own = r.num_computed_tokens[prefilling] + take
        return int(self.kv.blocks_needed(prefilling, own).sum())

    def _slots(
        self, ids: IntArray, take: IntArray, is_dec: NDArray[np.bool_], proposed: IntArray
    ) -> tuple[IntArray, IntArray]:
        """Own KV slots each sequence must hold during the step, and scratch blocks for drafts.

        In place: every new token (drafts included) is written into the sequence's own blocks.
        Scratch: the sequence's blocks take only its input token; drafts go to scratch blocks.
        """
        computed = self.requests.num_computed_tokens[ids]
        if self.config.rollback_policy == "in_place":
            return computed + take, np.zeros(len(ids), dtype=np.int64)
        own = computed + np.where(is_dec, 1, take)
        scratch = np.where(is_dec, blocks_for(take - 1, self.kv.block_size), 0)
        return own, scratch

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

    def _max_proposed(self) -> int:
        """The most drafts any verify step of the plan carries."""
        cached = self.__dict__.get("_max_proposed_cache")
        if cached is None:
            proposed = self.plan.proposed
            cached = int(proposed.max()) if len(proposed) else 0
            self._max_proposed_cache = cached
        return cached

    def check_invariants(self, scratch_blocks: int = 0) -> None:
        """Raise InvariantError if the queues or the block ledger are inconsistent."""
        r = self.requests
        if len(self.running) > self.config.max_num_seqs:
            raise InvariantError(f"{len(self.running)} running > max_num_seqs")
        if len(np.unique(self.running)) != len(self.running):
            raise InvariantError("a request is running twice")
        if (r.state[self.running] != RUNNING).any():
            raise InvariantError("a running request is not in the RUNNING state")
        waiting = np.array(self.waiting, dtype=np.int64)
        if (r.state[waiting] != WAITING).any():
            raise InvariantError("a waiting request is not in the WAITING state")
        if np.isin(waiting, self.running).any():
            raise InvariantError("a request is both waiting and running")
        if (r.num_computed_tokens > r.prompt_tokens + r.num_emitted).any():
            raise InvariantError("a request computed more tokens than it knows")
        if (r.num_emitted > r.output_tokens).any():
            raise InvariantError("a request emitted more tokens than its output length")
        if (self.kv.held[r.state != RUNNING] != 0).any():
            raise InvariantError("a request that is not running holds KV blocks")
        self.kv.check_invariants(scratch_blocks)
