"""Build a serving node from a scenario: workload, drafting strategy, acceptance plans, KV
pool and engine, every one from the scenario's settings in force (:mod:`sim.node_settings`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from sim.build_adaptive import adaptive_drafter, adaptive_plan, is_fixed_at_configured_k
from sim.calibrated_profiles import load_engine_profile
from sim.catalogue import Model, get_gpu, get_model
from sim.cost_model import StepCostModel
from sim.cpu_node import check_cpu_scenario, host_costs_on
from sim.drafting import Strategy, build_strategy
from sim.drafting.tree_verify import verifies_tree_with_mask
from sim.efficiency import load_efficiency
from sim.engine.core import EngineCore
from sim.engine.drafter import StepPlan
from sim.engine.kv_cache import BlockManager, blocks_for
from sim.engine.memory import MemoryPlan, plan_memory, window_pool_max_seqs
from sim.engine.node import ArrivalSchedule
from sim.engine.policies import AdaptiveDrafter, AdaptivePlan
from sim.engine.prefix_cache import PrefixStructure
from sim.engine.presets import EnginePreset
from sim.engine.queues import SchedulerConfig
from sim.engine.recorder import STEP_RECORDS, StepRecorder
from sim.engine.requests import RequestTable
from sim.engine.scheduler import Scheduler
from sim.errors import CatalogueError, ScenarioError
from sim.hf_config import resolve_model
from sim.host_costs import load_host_profile
from sim.linear_attention import state_reserve_bytes
from sim.moe import deepgemm_refusal, default_moe_kernel, matmul_ogs_refusal
from sim.node_settings import batching_of, resolve_engine
from sim.parallel import Layout, window_kv_reserve_bytes
from sim.pipeline import (
    PipelineStepCostModel,
    check_pipeline,
    stage_model,
    stage_weight_bytes_per_gpu,
)
from sim.precision import compute_dtype
from sim.random_streams import RandomStreams
from sim.scenario import Scenario
from sim.speculation import HIDDEN_STATE_DRAFTERS
from sim.workload import Workload, build_workload
from sim.workload.trace import TraceRequests


@dataclass
class Simulation:
    """Everything built from a scenario, ready to run."""

    scenario: Scenario
    engine: EnginePreset
    model: Model
    workload: Workload
    strategy: Strategy
    memory: MemoryPlan
    plan: StepPlan
    core: EngineCore
    arrivals: ArrivalSchedule


def build_simulation(
    scenario: Scenario,
    base_dir: Path,
    *,
    fast_forward: bool | None = None,
    check_invariants: bool = False,
    enforce_support: bool | None = None,
    step_records: str = "all",
    trace: TraceRequests | None = None,
) -> Simulation:
    """Build the node for ``scenario``; relative paths resolve against ``base_dir``.

    ``enforce_support=False`` lets a study run a method on an engine that does not offer it
    (default: refuse unless ``speculation.allow_unsupported`` is set). ``step_records``: keep
    every step column (``"all"``) or only those the summary reads (``"summary"``: for runs
    whose step records are not written, such as a sweep's points or a plan's probes; the
    summary is the same). ``trace``: the file of ``workload.arrival.path`` already read, for a
    caller that replays one trace many times (:func:`sim.workload.build_workload`).
    Raise SpecsimError (ScenarioError, CatalogueError) if the scenario cannot run, and
    ValueError if ``step_records`` is not one of :data:`~sim.engine.recorder.STEP_RECORDS`.
    """
    if step_records not in STEP_RECORDS:
        raise ValueError(f"step_records must be one of {sorted(STEP_RECORDS)}, got {step_records}")
    engine = resolve_engine(scenario, base_dir)
    gpu = get_gpu(scenario.hardware.gpu)
    precision = scenario.precision
    hw = scenario.hardware
    check_cpu_scenario(
        gpu,
        num_gpus=hw.num_gpus,
        num_nodes=hw.num_nodes,
        tensor_parallel=hw.tensor_parallel,
        preset=engine.name,
        weights=precision.weights,
    )
    try:
        compute_dtype(precision.weights, gpu)
    except CatalogueError as exc:
        raise ScenarioError(str(exc)) from None
    model = get_model(resolve_model(scenario.model, base_dir)).with_precision(
        precision.weights, precision.kv_cache
    )
    pp = hw.pipeline_parallel
    check_pipeline(pp, hw.num_nodes, model)
    # With pipeline parallelism the split below is that of one stage's nodes (sim/pipeline.py).
    layout = Layout(hw.num_gpus, hw.num_nodes // pp, hw.tensor_parallel, hw.expert_parallel)
    if hw.num_nodes == 1 and hw.tensor_parallel is None and model.spec.num_heads % hw.num_gpus:
        raise ScenarioError(
            f"hardware.num_gpus: {hw.num_gpus} does not divide {model.name}'s "
            f"{model.spec.num_heads} {'MLA ' if model.spec.attention == 'mla' else ''}"
            "attention heads"
        )
    layout.check(model)
    tp = layout.attention_tp
    streams = RandomStreams(scenario.seed)
    workload = build_workload(scenario.workload, streams, base_dir, trace)
    efficiency = load_efficiency(gpu.name)
    fitted = None
    if scenario.engine.profile is not None:
        fitted = load_engine_profile(scenario.engine.profile, base_dir).efficiency
        efficiency = fitted if fitted is not None else efficiency
    method = scenario.speculation.method
    host_profile = load_host_profile(engine.name)
    batching = batching_of(scenario, host_profile)
    host = host_profile.costs if method == "none" else host_profile.for_method(method)[0]
    host = host_costs_on(gpu, host)
    # A calibrated profile's host terms, then the scenario's own keys, over the preset's.
    profile_terms = (
        load_engine_profile(scenario.engine.profile, base_dir).overheads_s
        if scenario.engine.profile is not None
        else {}
    )
    per_layer = scenario.engine.per_layer_overhead_s
    per_layer = profile_terms.get("per_layer_overhead_s") if per_layer is None else per_layer
    per_token = scenario.engine.per_token_overhead_s
    per_token = profile_terms.get("per_token_overhead_s") if per_token is None else per_token
    if per_layer is not None:
        host = replace(host, per_layer_overhead_s=float(per_layer))
    if per_token is not None:
        host = replace(host, per_token_overhead_s=float(per_token))
    moe_kernel = scenario.engine.moe_kernel or default_moe_kernel(engine.name, model, gpu)
    refusal = ""
    if moe_kernel == "deepgemm":
        refusal = deepgemm_refusal(model, gpu)
    elif moe_kernel == "matmul_ogs":
        refusal = matmul_ogs_refusal(model, gpu)
    if refusal:
        raise ScenarioError(f"engine.moe_kernel: {refusal}")
    cost_terms: dict[str, Any] = dict(
        host=host,
        moe_kernel=moe_kernel,
        speculative=method != "none",
        layout=layout,
        # A profile's fitted efficiency is the user's own hardware: it prices the linear layers.
        measured_linear=fitted is None,
        tree_mask=verifies_tree_with_mask(scenario, engine.name),
    )
    overheads = (efficiency, engine.step_overhead_s, engine.per_sequence_overhead_s)
    cost_model = (
        StepCostModel(model, gpu, tp, *overheads, **cost_terms)
        if pp == 1
        else PipelineStepCostModel(
            model,
            pp,
            gpu,
            tp,
            *overheads,
            link_bandwidth_bytes_per_s=gpu.internode_bandwidth_bytes_per_s,
            link_latency_s=gpu.internode_latency_s,
            **cost_terms,
        )
    )
    strategy = build_strategy(
        scenario,
        model,
        gpu,
        cost_model,
        engine.name,
        base_dir,
        enforce_support=(
            not scenario.speculation.allow_unsupported
            if enforce_support is None
            else enforce_support
        ),
    )
    # A GPU holds one stage's layers and their KV (the heaviest stage: the last).
    memory_model = model if pp == 1 else stage_model(model, pp)
    # Sliding-window KV: SGLang's hybrid pool prices it per pool token; vLLM reserves it per slot.
    window_ratio = engine.swa_full_tokens_ratio or 0.0
    # Chunked-local attention (Llama 4) kept like full attention where the preset says so
    # (vLLM turns its hybrid KV manager off for it): every token's KV in the one pool, nothing
    # reserved per slot.
    chunked_as_full = (
        engine.chunked_local_as_full_attention and memory_model.spec.chunked_local_attention
    )
    memory = plan_memory(
        memory_model,
        gpu,
        tp,
        engine.gpu_memory_utilization,
        engine.block_size,
        engine.max_num_batched_tokens,
        engine.max_num_seqs,
        engine.reserved_memory_bytes
        + (
            0.0
            if window_ratio or chunked_as_full
            else window_kv_reserve_bytes(memory_model, layout, engine.max_num_seqs)
        )
        + state_reserve_bytes(memory_model, tp, layout.dp, engine.max_num_seqs),
        extra_weight_bytes=strategy.weight_bytes_per_gpu(),
        extra_kv_bytes_per_token=strategy.extra_kv_bytes_per_token()
        + (memory_model.window_kv_bytes_per_token if chunked_as_full else 0.0),
        weight_bytes_per_gpu=(
            stage_weight_bytes_per_gpu(model, pp, layout)
            if pp > 1
            else None
            if layout.is_single_group
            else layout.weight_bytes_per_gpu(model)
        ),
        window_pool_ratio=window_ratio,
        kv_sizing=engine.kv_sizing,
        speculative=strategy.proposal is not None,
    )
    if layout.dp > 1:
        # Each attention group keeps its own KV pool; the engine's ledger holds all of them.
        memory = replace(
            memory,
            num_blocks=memory.num_blocks * layout.dp,
            window_kv_tokens=memory.window_kv_tokens * layout.dp,
        )
    lookahead = strategy.extra_tokens_per_decode + (
        strategy.proposal.num_draft_tokens if strategy.proposal is not None else 0
    )
    lookahead_slots = (
        strategy.proposal.num_draft_tokens
        if strategy.proposal is not None
        and scenario.speculation.method in engine.lookahead_slot_methods
        else 0
    )
    _check_lengths(workload, model, memory, engine, lookahead + lookahead_slots)
    max_num_seqs = _window_pool_seq_limit(memory_model, memory, engine, lookahead)
    plan: StepPlan
    drafter: Strategy | AdaptiveDrafter = strategy
    if scenario.speculation.policy is None or is_fixed_at_configured_k(scenario, strategy):
        # The fixed policy at the configured k drafts k at every step: the fixed-k run itself
        # (the same plan from the same stream, the same drafter), built as cheaply.
        plan = strategy.plan(workload.output_tokens - 1, streams.stream("acceptance"))
    else:
        drafter = adaptive_drafter(scenario, strategy, (model, gpu, cost_model, engine, base_dir))
        plan = adaptive_plan(
            scenario, strategy, drafter, cost_model, workload, streams, engine.max_num_seqs
        )
    requests = RequestTable(
        prompt_tokens=workload.prompt_tokens.astype(np.int64).copy(),
        output_tokens=workload.output_tokens.astype(np.int64).copy(),
        prefix_id=workload.prefix_id.astype(np.int64).copy(),
        session_id=workload.session_id.astype(np.int64).copy(),
    )
    prefixes = None
    if engine.enable_prefix_caching:
        prefixes = PrefixStructure(
            workload.prefix_id.astype(np.int64),
            workload.prefix_tokens.astype(np.int64),
            workload.session_id.astype(np.int64),
        )
    kv = BlockManager(memory.num_blocks, engine.block_size, len(requests), prefixes)
    scheduler = Scheduler(
        SchedulerConfig(
            max_num_seqs,
            engine.max_num_batched_tokens,
            engine.chunked_prefill,
            engine.kv_rollback,
            strategy.extra_tokens_per_decode,
            drop_last_cached_block=engine.hidden_state_drafter_drops_last_cached_block
            and scenario.speculation.method in HIDDEN_STATE_DRAFTERS,
            lookahead_slots=lookahead_slots,
            mixed_batches=batching.mixed_batches,
            max_prefills_per_step=batching.max_prefills_per_step,
        ),
        requests,
        kv,
        plan,
    )
    if isinstance(plan, AdaptivePlan):
        plan.bind(requests, lambda: len(scheduler.running))
    use_fast = scenario.engine.fast_forward if fast_forward is None else fast_forward
    core = EngineCore(
        scheduler,
        cost_model,
        drafter,
        plan,
        StepRecorder(columns=STEP_RECORDS[step_records]),
        use_fast,
        check_invariants=check_invariants,
        async_scheduling=engine.async_scheduling,
    )
    arrivals = ArrivalSchedule(
        len(requests),
        workload.arrival_at_s,
        workload.concurrency,
        workload.think_time_s,
        workload.next_turn,
        workload.turn_think_time_s,
        frontend=engine.frontend,
        prompt_tokens=requests.prompt_tokens,
        drain_after=(
            scenario.measurement.warmup_requests if scenario.measurement.warmup_drained else 0
        ),
    )
    return Simulation(scenario, engine, model, workload, strategy, memory, plan, core, arrivals)


def _window_pool_seq_limit(
    model: Model, memory: MemoryPlan, engine: EnginePreset, lookahead_tokens: int
) -> int:
    """``engine.max_num_seqs``, lowered to what SGLang's sliding-window pool holds at once (each
    running sequence keeps its window there: :func:`sim.engine.memory.window_pool_max_seqs`)."""
    limit = window_pool_max_seqs(
        memory,
        int(model.spec.sliding_window or 0),
        engine.max_num_batched_tokens,
        lookahead_tokens,
    )
    if limit is None:
        return engine.max_num_seqs
    if limit < 1:
        raise CatalogueError(
            f"engine.gpu_memory_utilization: the sliding-window KV pool of {model.name} "
            f"({memory.window_kv_tokens} tokens) cannot hold one sequence's "
            f"{model.spec.sliding_window}-token window: raise engine.gpu_memory_utilization or "
            "hardware.num_gpus"
        )
    return min(engine.max_num_seqs, limit)


def _check_lengths(
    workload: Workload,
    model: Model,
    memory: MemoryPlan,
    engine: EnginePreset,
    lookahead_tokens: int,
) -> None:
    total = workload.prompt_tokens + workload.output_tokens
    too_long = total > model.spec.max_context_tokens
    if too_long.any():
        first = int(np.flatnonzero(too_long)[0])
        raise ScenarioError(
            f"workload: {int(too_long.sum())} requests exceed {model.name}'s context of "
            f"{model.spec.max_context_tokens} tokens (request {first}: {int(total[first])}); "
            "set workload.max_prompt_tokens / max_output_tokens"
            + (" or fewer workload.sessions.num_turns" if workload.has_sessions else "")
        )
    if not engine.chunked_prefill and int(total.max()) > engine.max_num_batched_tokens:
        # Without chunking a prompt, or a preempted request's recompute of prompt + output, must
        # fit one step; vLLM likewise requires max_num_batched_tokens >= max_model_len.
        raise ScenarioError(
            f"engine.max_num_batched_tokens: {engine.max_num_batched_tokens} is below the longest "
            f"request ({int(total.max())} prompt + output tokens) and chunked_prefill is off"
        )
    # Its last verify step holds the whole request plus the step's draft (lookahead) slots.
    need = int(blocks_for(int(total.max()) + lookahead_tokens, engine.block_size))
    if need > memory.num_blocks:
        raise ScenarioError(
            f"workload: the longest request needs {need} KV blocks (with {lookahead_tokens} "
            f"draft slots) but the pool holds {memory.num_blocks}: it could never finish"
        )
