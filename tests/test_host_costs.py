"""Host-side step costs: CUDA-graph capture, eager launches, CPU work and its overlap.

The known results: a step inside the captured sizes never waits on launches; outside, it waits
exactly ``max(0, L·t_launch − T_forward)``; overlap hides CPU work up to the forward's length and
never adds time; with no host mechanism the breakdown is the plain two-overhead one, bit for bit.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.catalogue import get_gpu, get_model
from sim.cost_model import StepCostModel, StepShape
from sim.efficiency import load_efficiency
from sim.errors import CatalogueError
from sim.host_costs import (
    HostCostModel,
    HostCosts,
    capture_sizes,
    host_costs_document,
    load_host_profile,
)
from sim.scenario import METHODS

MODEL = get_model("llama-3.1-8b")
GPU = get_gpu("h100-sxm")


def test_capture_sizes_follow_the_engines_list() -> None:
    sizes = capture_sizes(512)
    assert list(sizes[:5]) == [1, 2, 4, 8, 16]
    assert sizes[-1] == 512
    assert all(s % 8 == 0 for s in sizes[3:] if s <= 256)
    assert all(s % 16 == 0 for s in sizes if s > 256)
    assert np.all(np.diff(sizes) > 0)
    assert len(capture_sizes(0)) == 0
    # A limit that is not on the grid is captured itself (the engine's largest size).
    assert capture_sizes(160)[-1] == 160 and 152 in capture_sizes(160)


def test_graphs_cover_decode_steps_up_to_the_limit_and_pad_them() -> None:
    host = HostCostModel(HostCosts(cuda_graph_max_tokens=512, cuda_graph_mixed_steps=False), 32)
    tokens = np.array([1, 3, 100, 512, 513])
    graphed = host.graphed(tokens, tokens, np.ones(5, dtype=bool))
    assert list(graphed) == [True, True, True, True, False]
    padded = host.padded_tokens(tokens, tokens, graphed)
    assert list(padded) == [1, 4, 104, 512, 513]
    # A step that carries a prefill chunk is not captured when only decode steps are.
    assert not host.graphed(np.array([10]), np.array([10]), np.array([False]))[0]


def test_without_padding_only_captured_sizes_replay() -> None:
    costs = HostCosts(cuda_graph_max_tokens=160, cuda_graph_padding=False)
    host = HostCostModel(costs, 32)
    sizes = np.array([16, 17, 24, 30, 160])
    assert list(host.graphed(sizes, sizes, np.ones(5, dtype=bool))) == [
        True,
        False,
        True,
        False,
        True,
    ]


def test_graphs_counted_in_sequences_pad_the_batch() -> None:
    costs = HostCosts(cuda_graph_max_tokens=160, cuda_graph_counts_sequences=True)
    host = HostCostModel(costs, 32)
    seqs, tokens = np.array([3, 100, 200]), np.array([24, 800, 1600])  # 8 tokens per sequence
    graphed = host.graphed(seqs, tokens, np.ones(3, dtype=bool))
    assert list(graphed) == [True, True, False]
    assert list(host.padded_tokens(seqs, tokens, graphed)) == [32.0, 832.0, 1600.0]


@given(
    forward_ms=st.floats(0.01, 50.0),
    launch_ms=st.floats(0.0, 1.0),
    layers=st.integers(1, 128),
)
def test_eager_steps_wait_for_launches_only_where_launching_is_slower(
    forward_ms: float, launch_ms: float, layers: int
) -> None:
    host = HostCostModel(HostCosts(eager_launch_s_per_layer=launch_ms * 1e-3), layers)
    forward = np.array([forward_ms * 1e-3])
    eager = host.launch_stall_s(forward, np.array([False]))[0]
    assert eager == pytest.approx(max(0.0, layers * launch_ms * 1e-3 - forward_ms * 1e-3))
    assert host.launch_stall_s(forward, np.array([True]))[0] == 0.0


@given(
    seqs=st.integers(1, 512),
    forward_ms=st.floats(0.0, 100.0),
    per_seq_us=st.floats(0.0, 200.0),
)
def test_overlap_hides_cpu_work_up_to_the_forward_and_never_adds(
    seqs: int, forward_ms: float, per_seq_us: float
) -> None:
    costs = HostCosts(step_overhead_s=5e-4, per_sequence_overhead_s=per_seq_us * 1e-6)
    host = HostCostModel(costs, 32)
    args = (np.array([seqs]), np.array([seqs]), np.array([forward_ms * 1e-3]))
    plain = host.cpu_s(*args, speculative=False, overlap=False)[0]
    hidden = host.cpu_s(*args, speculative=False, overlap=True)[0]
    assert 5e-4 <= hidden <= plain
    assert plain == pytest.approx(5e-4 + seqs * per_seq_us * 1e-6)
    assert hidden == pytest.approx(5e-4 + max(0.0, seqs * per_seq_us * 1e-6 - forward_ms * 1e-3))


def test_per_layer_and_speculative_terms_add_where_they_apply() -> None:
    costs = HostCosts(per_layer_overhead_s=1e-5, spec_per_sequence_overhead_s=2e-5)
    host = HostCostModel(costs, 32)
    one = (np.array([4]), np.array([16]), np.array([0.0]))
    assert host.cpu_s(*one, speculative=False, overlap=False)[0] == pytest.approx(32e-5)
    assert host.cpu_s(*one, speculative=True, overlap=False)[0] == pytest.approx(32e-5 + 8e-5)


def _shape(seqs: int, tokens: int, logits: int) -> StepShape:
    return StepShape(
        num_seqs=np.array([seqs]),
        num_tokens=np.array([tokens]),
        num_logit_tokens=np.array([logits]),
        kv_read_tokens=np.array([seqs * 500 + tokens]),
        attention_pairs=np.array([tokens * 500.0]),
    )


def test_without_host_costs_the_breakdown_is_the_operator_classes_and_two_overheads() -> None:
    eff = load_efficiency("h100-sxm")
    plain = StepCostModel(MODEL, GPU, 1, eff, 1e-3, 2e-5)
    for shape in (_shape(1, 1, 1), _shape(32, 128, 128), _shape(8, 2000, 7)):
        parts = plain.breakdown(shape)
        seqs = float(np.asarray(shape.num_seqs)[0])
        expected = {
            "fixed_s": 1e-3 + 2e-5 * seqs,
            # The elementwise operators (sim/elementwise.py) are GPU work, priced with or
            # without host costs; here with no per-layer floor under them.
            "linear_s": float(
                plain.linear_s(shape.num_tokens, shape.num_logit_tokens)[0]
                + plain.elementwise_s(shape.num_tokens)[0]
            ),
            "attention_s": float(plain.attention_s(shape.kv_read_tokens, shape.attention_pairs)[0]),
            "allreduce_s": 0.0,
            "sampling_s": float(plain.sampling_s(shape.num_logit_tokens)[0]),
            "draft_s": 0.0,
        }
        for key, value in expected.items():
            assert float(parts[key][0]) == pytest.approx(value, rel=1e-12, abs=1e-15), key


def test_a_verify_step_above_the_capture_limit_pays_the_eager_launches() -> None:
    eff = load_efficiency("h100-sxm")
    costs = HostCosts(cuda_graph_max_tokens=512, eager_launch_s_per_layer=3e-4)
    model = StepCostModel(MODEL, GPU, 1, eff, 1e-3, 0.0, host=costs)
    inside = float(model.step_time(_shape(128, 512, 512))[0])
    outside = float(model.step_time(_shape(130, 520, 520))[0])
    stall = model.breakdown(_shape(130, 520, 520))["fixed_s"][0] - 1e-3
    assert stall == pytest.approx(max(0.0, 32 * 3e-4 - (outside - 1e-3 - stall)), rel=1e-9)
    assert outside > inside


def test_every_shipped_preset_loads_and_its_rules_name_real_methods() -> None:
    presets = host_costs_document()["presets"]
    assert presets
    for name in presets:
        profile = load_host_profile(name)
        for rule in profile.rules:
            assert set(rule.methods) <= set(METHODS)
            assert rule.source
        for method in METHODS:
            costs, settings, sources = profile.for_method(method)
            assert isinstance(costs, HostCosts)
            assert len(sources) == sum(method in r.methods for r in profile.rules)
            assert set(settings) <= {"max_num_seqs", "chunked_prefill"}


def test_sglang_turns_overlap_and_padding_off_for_eagle_only() -> None:
    profile = load_host_profile("sglang-0.4")
    assert profile.costs.cpu_overlap
    eagle, settings, _ = profile.for_method("eagle")
    assert not eagle.cpu_overlap and not eagle.cuda_graph_padding
    assert settings["chunked_prefill"] is False
    ngram, _, _ = profile.for_method("ngram")
    assert ngram.cpu_overlap and ngram.cuda_graph_padding


def test_unknown_preset_names_the_known_ones() -> None:
    with pytest.raises(CatalogueError, match=r"known: .*vllm-v1"):
        load_host_profile("tgi")


def test_negative_host_cost_is_refused() -> None:
    with pytest.raises(ValueError, match="per_layer_overhead_s"):
        HostCosts(per_layer_overhead_s=-1.0)


def test_vllm_async_scheduling_hides_exactly_the_work_that_fits_under_the_forward() -> None:
    """vLLM 0.14+ (``vllm-v1-async``) runs the same CPU work as the synchronous ``vllm-v1``
    (its terms are carried over), but schedules one step ahead: a decode step saves
    ``min(per-sequence work, forward)``, and nothing else changes."""
    sync, asynchronous = (
        load_host_profile("vllm-v1").costs,
        load_host_profile("vllm-v1-async").costs,
    )
    assert not sync.cpu_overlap and asynchronous.cpu_overlap
    for name in ("per_layer_overhead_s", "per_sequence_overhead_s", "cuda_graph_max_tokens"):
        assert getattr(sync, name) == getattr(asynchronous, name)
    batch = np.array([1.0, 16.0, 64.0, 256.0])
    shape = StepShape(batch, batch, batch, 1000.0 * batch, 1000.0 * batch)
    models = [
        StepCostModel(
            MODEL, GPU, 1, load_efficiency(GPU.name), 0.0, c.per_sequence_overhead_s, host=c
        )
        for c in (sync, asynchronous)
    ]
    slow, fast = (m.breakdown(shape) for m in models)
    forward = sum(slow[k] for k in ("linear_s", "attention_s", "allreduce_s", "sampling_s"))
    hidden = np.minimum(sync.per_sequence_overhead_s * batch, forward)
    np.testing.assert_allclose(slow["fixed_s"] - fast["fixed_s"], hidden, rtol=1e-9)


def test_vllm_async_scheduling_stays_on_only_for_eagle_and_mtp() -> None:
    """vLLM 0.14 keeps async scheduling for EAGLE/MTP drafts and turns it off for the rest
    (vllm-project/vllm PR #31998)."""
    profile = load_host_profile("vllm-v1-async")
    for method in ("eagle", "eagle3", "mtp", "none"):
        assert profile.for_method(method)[0].cpu_overlap, method
    for method in ("draft_model", "ngram", "medusa"):
        assert not profile.for_method(method)[0].cpu_overlap, method


def test_vllm_v0_hides_output_processing_only_without_speculation() -> None:
    """vLLM 0.6's asynchronous output processing (on by default) overlaps the per-sequence CPU
    work with the next forward, and vllm/config.py turns it off whenever a speculative model is
    configured: the baseline overlaps, every drafting method pays the work in line."""
    profile = load_host_profile("vllm-v0")
    assert profile.for_method("none")[0].cpu_overlap
    for method in METHODS:
        if method != "none":
            assert not profile.for_method(method)[0].cpu_overlap, method


def test_batch_expansion_charges_each_added_sequence_its_cpu_work() -> None:
    """V0's batch expansion turns a verify step of B sequences and n tokens into n single-token
    sequences: the n − B it adds each cost ``expanded_sequence_overhead_s`` on the CPU (input
    preparation and sampler bookkeeping), a plain decode step (n = B) nothing, and a prefill step
    nothing (it is not expanded)."""
    costs, _, _ = load_host_profile("vllm-v0").for_method("draft_model")
    assert costs.verify_batch_expansion and costs.expanded_sequence_overhead_s > 0
    without = replace(costs, expanded_sequence_overhead_s=0.0)
    models = [
        StepCostModel(MODEL, GPU, 1, load_efficiency(GPU.name), 0.0, 0.0, host=c, speculative=True)
        for c in (costs, without)
    ]
    for seqs, tokens, logits, added in ((16, 80, 80, 64), (16, 16, 16, 0), (1, 400, 1, 0)):
        shape = _shape(seqs, tokens, logits)
        charged, plain = (m.breakdown(shape)["fixed_s"][0] for m in models)
        assert charged - plain == pytest.approx(added * costs.expanded_sequence_overhead_s)


def test_a_preset_may_leave_the_expansion_cost_out() -> None:
    """Only engines that expand batches state the term; the others load with it at 0."""
    assert load_host_profile("vllm-v1").costs.expanded_sequence_overhead_s == 0.0
    with pytest.raises(ValueError, match="expanded_sequence_overhead_s"):
        HostCosts(expanded_sequence_overhead_s=-1e-6)
