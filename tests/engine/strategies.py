"""Hypothesis strategies for random engine setups: workloads, limits, pools and plans."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from sim.engine.kv_cache import blocks_for

from .harness import EngineSetup, random_plan


@st.composite
def engine_setups(
    draw: st.DrawFn,
    speculative: bool = True,
    max_requests: int = 10,
    policies: tuple[str, ...] = ("in_place", "scratch"),
) -> EngineSetup:
    """A small random node: tight pools and budgets so chunking and preemption happen often.

    The pool always holds the longest request with room for its last verify step's drafts; without
    chunked prefill the budget holds the longest request too (as ``sim.run`` requires), so a
    recompute after preemption always fits.
    """
    n = draw(st.integers(1, max_requests))
    prompts = np.array(draw(st.lists(st.integers(1, 40), min_size=n, max_size=n)))
    outputs = np.array(draw(st.lists(st.integers(1, 30), min_size=n, max_size=n)))
    block_size = draw(st.sampled_from([1, 2, 4, 16]))
    longest = int((prompts + outputs).max())
    chunked = draw(st.booleans())
    budget = draw(st.integers(1, 64)) if chunked else longest + draw(st.integers(0, 16))
    plan = None
    extra = 0
    max_accepted = 0
    lookahead = 0
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
    # A lone sequence's last verify step fits: its committed tokens, its input token and every
    # draft slot (own blocks in place; own plus scratch blocks with scratch).
    min_blocks = int(blocks_for(longest - 1 + lookahead, block_size)) + int(
        blocks_for(lookahead, block_size)
    )
    num_blocks = min_blocks + draw(st.integers(0, 24 // block_size + 4))
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
        plan=plan,
        arrival_at_s=arrival_at_s,
        concurrency=concurrency,
        think_time_s=think,
        max_accepted=max_accepted,
    )
    return setup
