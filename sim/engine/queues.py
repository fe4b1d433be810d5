"""The scheduler's queues and records: its limits (:class:`SchedulerConfig`), one step's batch
(:class:`ScheduledBatch`), and the waiting and running queues with their commands and
invariants (:class:`SchedulerQueues`), which :class:`sim.engine.scheduler.Scheduler` builds on.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from sim.engine.drafter import StepPlan
from sim.engine.kv_cache import BlockManager, blocks_for
from sim.engine.requests import FINISHED, RUNNING, WAITING, RequestTable
from sim.errors import InvariantError

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
    #: KV slots a running request reserves beyond the step's tokens for the drafter's next
    #: proposal: vLLM V1 passes ``num_lookahead_tokens`` (the k of EAGLE, EAGLE-3, MTP and draft
    #: models) to ``KVCacheManager.allocate_slots`` for every running request, which then needs
    #: ``computed + new + lookahead`` slots (vllm/v1/core/sched/scheduler.py and
    #: kv_cache_manager.py, v0.14.0 and v0.15.0); a request admitted with nothing computed
    #: reserves none.
    lookahead_slots: int = 0
    #: Whether a step may mix prefill chunks with decodes (vLLM V1, chunked prefill) or is either
    #: a prefill batch or a decode batch, prefills first (SGLang: ``enable_mixed_chunk`` off by
    #: default; ``Scheduler.get_next_batch_to_run`` runs a new prefill batch when it can).
    mixed_batches: bool = True
    #: Requests a prefill batch may carry (0: any number; SGLang's ``prefill_only_one_req``: 1).
    max_prefills_per_step: int = 0

    def __post_init__(self) -> None:
        if self.rollback_policy not in ROLLBACK_POLICIES:
            raise ValueError(f"rollback_policy must be one of {ROLLBACK_POLICIES}")
        if self.lookahead_slots < 0:
            raise ValueError(f"lookahead_slots must be >= 0, got {self.lookahead_slots}")


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


class SchedulerQueues:
    """The scheduler's state and its commands: the waiting queue (FCFS) and the running array over
    a request table and a KV block ledger, the blocks a step's sequences need, and the
    invariants that tie them."""

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
        own = r.num_computed_tokens[prefilling] + take + self.config.lookahead_slots
        return int(self.kv.blocks_needed(prefilling, own).sum())

    def _slots(
        self, ids: IntArray, take: IntArray, is_dec: NDArray[np.bool_], proposed: IntArray
    ) -> tuple[IntArray, IntArray]:
        """Own KV slots each sequence must hold during the step, and scratch blocks for drafts.

        In place: every new token (drafts included) is written into the sequence's own blocks.
        Scratch: the sequence's blocks take only its input token; drafts go to scratch blocks.
        Either way a running sequence also holds the config's ``lookahead_slots``.
        """
        computed = self.requests.num_computed_tokens[ids] + self.config.lookahead_slots
        if self.config.rollback_policy == "in_place":
            return computed + take, np.zeros(len(ids), dtype=np.int64)
        own = computed + np.where(is_dec, 1, take)
        scratch = np.where(is_dec, blocks_for(take - 1, self.kv.block_size), 0)
        return own, scratch

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
