"""Which engines verify a token tree with a custom attention mask, and whether a scenario does.

A chain of k drafts is verified with the causal kernel the engine decodes with: each draft attends
to the context and the drafts before it. A tree of t tokens is not causal in its own order (a node
sees its ancestors, not its siblings), so the engine hands the attention kernel a mask. What that
costs depends on the kernel the engine picks (:class:`sim.kernels.TreeMaskAttention`):

Which presets do either is a sourced preset field (``tree_verify_custom_mask``,
``tree_draft_per_node_prefix_reads`` in sim/data/engine_presets.yaml).

* **SGLang 0.4** (``sglang-0.4``): its attention backend on CUDA is FlashInfer (FA3 became the
  Hopper default after v0.4.4: sgl-project/sglang issue #5064 of 2025-04-04 proposes it, issue
  #6066 of 2025-05-07 reports it shipped). ``target_verify`` runs FlashInfer's
  ``BatchPrefillWithPagedKVCacheWrapper`` with the tree's custom mask, one bool per (query, key)
  pair over the whole context and the tree (``build_tree_kernel_efficient``, FULL_MASK,
  python/sglang/srt/speculative/eagle_utils.py: ``t·(c + t)`` entries per sequence), which
  FlashInfer packs to bits (``segment_packbits``) and runs on its FA2 template even on Hopper
  (``is_fa3_backend_supported`` is False with a custom mask, flashinfer/utils.py).
* Not priced with a mask: SGLang 0.5 (its Hopper default, the FA3 backend, takes topk > 1 with
  a second "expand" pass over the tree, ``forward_metadata_spec_decode_expand`` in
  python/sglang/srt/layers/attention/flashattention_backend.py, merged with the prefix pass by
  ``merge_state_v2``: no custom mask; its cost was not read further and keeps the causal
  pricing) and vLLM (its tree-attention backend, vllm-project/vllm PR #20401, is experimental
  and was not read here).

The draft's later forwards expand ``topk`` nodes per sequence. SGLang 0.4 runs them with its
multi-step draft decode backend over ``B·topk`` rows, each with its own KV index list: the
sequence's whole prefix and the node's path (``generate_draft_decode_kv_indices``,
python/sglang/srt/speculative/eagle_utils.py: ``kv_offset = cum_seq_len·topk + bid·iters·topk +
topk_id·(seq_len + iters)``). The draft layer's KV of the prefix is then read once per node, not
once per sequence (:func:`reads_prefix_per_node`).

After the verify, SGLang keeps the accepted tokens' KV where the verify wrote it at page size 1
(``batch.out_cache_loc[accept_index]`` into ``req_to_token``; ``move_kv_cache`` runs only for
paged pools with topk > 1), so no compaction is priced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.engine.presets import get_preset

if TYPE_CHECKING:
    from sim.scenario import Scenario

#: SGLang's EAGLE defaults when a dynamic tree is not given (topk, steps, draft tokens):
#: --speculative-eagle-topk 4, --speculative-num-steps 5, --speculative-num-draft-tokens 8
#: (SGLang speculative decoding docs).
SGLANG_DEFAULT_TREE = (4, 5, 8)


def verifies_tree_with_mask(scenario: Scenario, engine_preset: str) -> bool:
    """Whether ``scenario``'s verify steps carry a token tree (more than one child somewhere)
    and ``engine_preset`` verifies trees with a custom mask (its ``tree_verify_custom_mask``,
    sourced in the presets file)."""
    return get_preset(engine_preset).tree_verify_custom_mask and drafts_tree(scenario)


def reads_prefix_per_node(engine_preset: str) -> bool:
    """Whether ``engine_preset``'s tree drafting reads each node's prefix KV on its own (its
    ``tree_draft_per_node_prefix_reads``, sourced in the presets file)."""
    return get_preset(engine_preset).tree_draft_per_node_prefix_reads


def drafts_tree(scenario: Scenario) -> bool:
    """Whether ``scenario`` drafts a token tree (more than one child somewhere)."""
    spec = scenario.speculation
    tree = spec.tree
    if tree is None:
        # EAGLE-2 without a tree drafts SGLang's default one; every other method a chain.
        return spec.method == "eagle2" and SGLANG_DEFAULT_TREE[0] > 1
    if tree.shape is not None:
        return any(width > 1 for width in tree.shape)
    return tree.topk is not None and tree.topk > 1
