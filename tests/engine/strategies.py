"""Hypothesis strategies for random engine setups: workloads, limits, pools and plans."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from sim.engine.kv_cache import blocks_for
from sim.engine.prefix_cache import PrefixStructure
from sim.workload.sharing import PrefixConfig, SessionConfig, share

from .harness import EngineSetup, random_plan


@st.composite
def engine_setups(
    draw: st.DrawFn,
    speculative: bool = True,
    max_requests: int = 10,
    policies: tuple[str, ...] = ("in_place", "scratch"),
    sharing: bool = False,
    prefix_caching: bool = False,
    spare_blocks: int | None = None,
    separate_batches: bool = False,
) -> EngineSetup:
    """A small random node: tight pools and budgets so chunking and preemption happen often.

    The pool always holds the longest request with room for its last verify step's drafts; without
    chunked prefill the budget holds the longest request too (as ``sim.run`` requires), so a
    recompute after preemption always fits. ``sharing`` gives the requests shared prefixes and
    multi-turn sessions (prompts resending the history), ``prefix_caching`` turns the cache on,
    ``spare_blocks`` fixes the pool's room beyond the minimum, ``separate_batches`` schedules
    prefill and decode batches apart (SGLang), with a random cap on prefills per step.
    """
    n = draw(st.integers(1, max_requests))
    prompts = np.array(draw(st.lists(st.integers(1, 40), min_size=n, max_size=n)))
    outputs = np.array(draw(st.lists(st.integers(1, 30), min_size=n, max_size=n)))
    block_size = draw(st.sampled_from([1, 2, 4, 16]))
    prefixes = None
    next_turn = None
    turn_think = 0.0
    if sharing:
        kind = draw(st.sampled_from(["both", "sessions", "prefix"]))
        prefix = None
        sessions = None
        if kind != "sessions":
            prefix = PrefixConfig(
                num_shared_prefixes=draw(st.integers(1, 3)),
                shared_prefix_tokens=draw(st.integers(1, 40)),
                fraction_with_prefix=draw(st.sampled_from([1.0, 0.5])),
            )
        if kind != "prefix":
            sessions = SessionConfig(
                num_turns=draw(st.integers(2, 4)),
                think_time_s=draw(st.sampled_from([0.0, 0.01])),
            )
        seed = draw(st.integers(0, 2**32 - 1))
        shared = share(prompts, outputs, prefix, sessions, np.random.default_rng(seed))
        prompts = shared.prompt_tokens
        prefixes = PrefixStructure(shared.prefix_id, shared.prefix_tokens, shared.session_id)
        next_turn = shared.next_turn
        turn_think = 0.0 if sessions is None else sessions.think_time_s
    longest = int((prompts + outputs).max())
    chunked = draw(st.booleans())
    budget = draw(st.integers(1, 64)) if chunked else longest + draw(st.integers(0, 16))
    plan = None
    extra = 0
    max_accepted = 0
    lookahead = 0
    lookahead_slots = 0
    if speculative:
        k = draw(st.integers(1, 5))
        tree_extra = draw(st.sampled_from([0, 0, 3, 8]))  # a tree proposes more than its depth
        extra = draw(st.sampled_from([0, 0, 0, 2]))  # lookahead's non-draft verify tokens
        seed = draw(st.integers(0, 2**32 - 1))
        plan = random_plan(
            np.random.default_rng(seed), outputs - 1, k + tree_extra, k, draw(st.booleans())
        )
        max_accepted = k
        lookahead = k + tree_extra + extra
        # vLLM V1's reservation for the drafter's next proposal (SchedulerConfig.lookahead_slots).
        lookahead_slots = draw(st.sampled_from([0, 0, k + tree_extra]))
    # A lone sequence's last verify step fits: its committed tokens, its input token, every
    # draft slot (own blocks in place; own plus scratch blocks with scratch) and its lookahead.
    min_blocks = int(blocks_for(longest - 1 + lookahead + lookahead_slots, block_size)) + int(
        blocks_for(lookahead, block_size)
    )
    spare = draw(st.integers(0, 24 // block_size + 4)) if spare_blocks is None else spare_blocks
    num_blocks = min_blocks + spare
    arrival = draw(st.sampled_from(["burst", "spread", "closed"]))
    arrival_at_s = None
    concurrency = None
    think = 0.0
    if arrival == "closed":
        concurrency = draw(st.integers(1, n))
        think = draw(st.sampled_from([0.0, 0.005]))
    else:
        span = 0.0 if arrival == "burst" else draw(st.sampled_from([0.02, 0.2]))
        seed = draw(st.integers(0, 2**32 - 1))
        arrival_at_s = np.sort(np.random.default_rng(seed).uniform(0.0, span, n))
        if next_turn is not None:
            # Later turns follow their predecessor's answer: only first turns have a time.
            follows = np.zeros(n, dtype=bool)
            follows[next_turn[next_turn >= 0]] = True
            arrival_at_s[follows] = np.nan
            arrival_at_s[~follows] = np.sort(arrival_at_s[~follows])
    setup = EngineSetup(
        prompt_tokens=prompts,
        output_tokens=outputs,
        num_blocks=num_blocks,
        block_size=block_size,
        max_num_seqs=draw(st.integers(1, 6)),
        max_num_batched_tokens=budget,
        chunked_prefill=chunked,
        rollback_policy=draw(st.sampled_from(policies)),
        extra_tokens_per_decode=extra,
        lookahead_slots=lookahead_slots,
        plan=plan,
        arrival_at_s=arrival_at_s,
        concurrency=concurrency,
        think_time_s=think,
        max_accepted=max_accepted,
        prefixes=prefixes,
        prefix_caching=prefix_caching,
        next_turn=next_turn,
        turn_think_time_s=turn_think,
        mixed_batches=not separate_batches,
        max_prefills_per_step=draw(st.sampled_from([0, 1, 2])) if separate_batches else 0,
    )
    return setup
