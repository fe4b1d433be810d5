"""Build a serving node from a scenario, run it, and collect its result.

The lifecycle is named and linear: resolve the scenario (preset defaults filled in) → build the
workload, the drafting strategy, the acceptance plans, the KV pool and the engine → run the SimPy
node until every request has finished → summarise the flat records.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import simpy

from sim import __version__
from sim.acceptance.policies import (
    ADAPTIVE_METHODS,
    AdaptiveDrafter,
    AdaptivePlan,
    PositionAcceptance,
    build_policy,
    check_policy_support,
    cost_model_step_time,
)
from sim.calibrated_profiles import EngineProfile, load_engine_profile
from sim.catalogue import Model, get_gpu, get_model
from sim.cost_model import StepCostModel
from sim.drafting import Strategy, build_strategy
from sim.efficiency import load_efficiency
from sim.engine.core import EngineCore
from sim.engine.drafter import StepPlan
from sim.engine.frontend import FRONTEND_FIELDS
from sim.engine.kv_cache import BlockManager, blocks_for
from sim.engine.memory import MemoryPlan, plan_memory
from sim.engine.node import ArrivalSchedule, ServingNode
from sim.engine.prefix_cache import PrefixStructure
from sim.engine.presets import SETTINGS, EnginePreset, get_preset
from sim.engine.queues import SchedulerConfig
from sim.engine.recorder import CHUNK_ROWS, STEP_COLUMNS, STEP_RECORDS, StepRecorder
from sim.engine.requests import RequestTable
from sim.engine.scheduler import Scheduler
from sim.errors import CatalogueError, ScenarioError
from sim.hf_config import resolve_model
from sim.host_costs import HostProfile, load_host_profile
from sim.linear_attention import state_reserve_bytes
from sim.metrics import summarize
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
from sim.step_stats import MemorySteps, StepFile, StepSource
from sim.workload import Workload, build_workload
from sim.workload.trace import TraceRequests

REQUEST_COLUMNS = (
    "prompt_tokens",
    "output_tokens",
    "arrival_at_s",
    "engine_arrival_at_s",
    "scheduled_at_s",
    "first_token_at_s",
    "finished_at_s",
    "num_preemptions",
    "num_decode_steps",
    "num_drafted",
    "num_accepted",
    "num_cached_tokens",
    "prefix_id",
    "session_id",
)


#: Methods whose drafter reads the target's hidden states (vLLM's SpeculativeConfig.use_eagle():
#: eagle, eagle3, mtp in vllm/config/speculative.py; EAGLE-2 trees run as eagle there).
HIDDEN_STATE_DRAFTERS = ("eagle", "eagle2", "eagle3", "mtp")


def resolve_engine(scenario: Scenario, base_dir: Path | None = None) -> EnginePreset:
    """The engine settings in force: the scenario's keys over the calibrated profile's overheads
    (if ``engine.profile`` is set) over the preset's defaults.

    Raise ScenarioError if ``engine.profile`` cannot be loaded or was fitted for another GPU,
    model or TP degree.
    """
    e = scenario.engine
    preset = get_preset(e.preset)
    host = load_host_profile(preset.name)
    # The per-sequence overhead fitted under load (sim/data/host_costs.yaml) is the engine's.
    preset = replace(preset, per_sequence_overhead_s=host.costs.per_sequence_overhead_s)
    if scenario.speculation.method != "none":
        # What the engine itself changes for this method (e.g. SGLang's smaller batch cap).
        _, imposed, _ = host.for_method(scenario.speculation.method)
        if "max_num_seqs" in imposed:
            preset = replace(preset, max_num_seqs=int(imposed["max_num_seqs"]))
        if "chunked_prefill" in imposed:
            preset = replace(preset, chunked_prefill=bool(imposed["chunked_prefill"]))
    if e.profile is not None:
        profile = load_engine_profile(e.profile, base_dir or Path.cwd())
        _check_profile_target(scenario, profile)
        preset = replace(
            preset,
            step_overhead_s=profile.step_overhead_s,
            per_sequence_overhead_s=profile.per_sequence_overhead_s,
        )
    written = {key: getattr(e, key) for key in SETTINGS if getattr(e, key) is not None}
    frontend = {
        key: getattr(e.frontend, key)
        for key in ("enabled", *FRONTEND_FIELDS)
        if getattr(e.frontend, key) is not None
    }
    return replace(preset, frontend=replace(preset.frontend, **frontend), **written)


@dataclass(frozen=True)
class Batching:
    """How the engine forms batches (``SchedulerConfig.mixed_batches``, ``max_prefills_per_step``):
    the engine's own rule for the method, unless the scenario sets it."""

    mixed_batches: bool
    max_prefills_per_step: int


def batching_of(scenario: Scenario, host: HostProfile) -> Batching:
    """The batching in force for ``scenario`` on the engine described by ``host``."""
    mixed = host.mixed_batches
    limit = 0
    if scenario.speculation.method != "none":
        limit = int(host.for_method(scenario.speculation.method)[1].get("max_prefills_per_step", 0))
    e = scenario.engine
    return Batching(
        mixed_batches=mixed if e.mixed_batches is None else e.mixed_batches,
        max_prefills_per_step=limit if e.max_prefills_per_step is None else e.max_prefills_per_step,
    )


def _check_profile_target(scenario: Scenario, profile: EngineProfile) -> None:
    model = scenario.model if isinstance(scenario.model, str) else None
    mismatches = [
        f"{what} {fitted!r} (scenario: {actual!r})"
        for what, fitted, actual in (
            ("GPU", profile.gpu, scenario.hardware.gpu),
            ("model", profile.model, model),
            ("TP", profile.tensor_parallel_size, scenario.hardware.num_gpus),
        )
        if fitted is not None and actual is not None and fitted != actual
    ]
    if mismatches:
        raise ScenarioError(
            f"engine.profile: {profile.name} was fitted for another node: {', '.join(mismatches)}"
        )


def resolved_document(scenario: Scenario, engine: EnginePreset) -> dict[str, Any]:
    """The scenario with every default written out, as saved beside the results."""
    document = scenario.model_dump(mode="json")
    document["engine"].update({key: getattr(engine, key) for key in SETTINGS})
    document["engine"]["preset"] = engine.name  # an alias written out as the preset it meant
    document["engine"]["frontend"] = {
        key: getattr(engine.frontend, key) for key in ("enabled", *FRONTEND_FIELDS)
    }
    return document


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


@dataclass
class ScenarioResult:
    """A finished run: summary, flat records, the resolved scenario and how it was produced."""

    summary: dict[str, Any]
    requests: dict[str, np.ndarray]
    steps: dict[str, np.ndarray]
    resolved_scenario: dict[str, Any]
    memory: MemoryPlan
    #: Inter-token gaps spanning more than one step, and when each ended (ITL's other samples).
    irregular_itl: tuple[np.ndarray, np.ndarray] = field(
        default_factory=lambda: (np.zeros(0), np.zeros(0))
    )
    #: Where the step records were written as the run went (then ``steps`` is empty).
    steps_file: Path | None = None

    def step_source(self) -> StepSource:
        """The step records, from memory or from the file they were streamed to."""
        return StepFile(self.steps_file) if self.steps_file is not None else MemorySteps(self.steps)


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
    try:
        compute_dtype(precision.weights, gpu)
    except CatalogueError as exc:
        raise ScenarioError(str(exc)) from None
    model = get_model(resolve_model(scenario.model, base_dir)).with_precision(
        precision.weights, precision.kv_cache
    )
    hw = scenario.hardware
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
    cost_terms: dict[str, Any] = dict(
        host=host,
        speculative=method != "none",
        layout=layout,
        # A profile's fitted efficiency is the user's own hardware: it prices the linear layers.
        measured_linear=fitted is None,
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
    memory = plan_memory(
        memory_model,
        gpu,
        tp,
        engine.gpu_memory_utilization,
        engine.block_size,
        engine.max_num_batched_tokens,
        engine.max_num_seqs,
        engine.reserved_memory_bytes
        + window_kv_reserve_bytes(memory_model, layout, engine.max_num_seqs)
        + state_reserve_bytes(memory_model, tp, layout.dp, engine.max_num_seqs),
        extra_weight_bytes=strategy.weight_bytes_per_gpu(),
        extra_kv_bytes_per_token=strategy.extra_kv_bytes_per_token(),
        weight_bytes_per_gpu=(
            stage_weight_bytes_per_gpu(model, pp, layout)
            if pp > 1
            else None
            if layout.is_single_group
            else layout.weight_bytes_per_gpu(model)
        ),
    )
    if layout.dp > 1:
        # Each attention group keeps its own KV pool; the engine's ledger holds all of them.
        memory = replace(memory, num_blocks=memory.num_blocks * layout.dp)
    lookahead = strategy.extra_tokens_per_decode + (
        strategy.proposal.num_draft_tokens if strategy.proposal is not None else 0
    )
    _check_lengths(workload, model, memory, engine, lookahead)
    plan: StepPlan
    drafter: Strategy | AdaptiveDrafter = strategy
    if scenario.speculation.policy is None:
        plan = strategy.plan(workload.output_tokens - 1, streams.stream("acceptance"))
    else:
        drafter = _adaptive_drafter(scenario, strategy, (model, gpu, cost_model, engine, base_dir))
        plan = _adaptive_plan(scenario, strategy, drafter, cost_model, workload, streams)
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
            engine.max_num_seqs,
            engine.max_num_batched_tokens,
            engine.chunked_prefill,
            engine.kv_rollback,
            strategy.extra_tokens_per_decode,
            drop_last_cached_block=engine.name in ("vllm-v1", "vllm-v1-async")
            and scenario.speculation.method in HIDDEN_STATE_DRAFTERS,
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
    )
    return Simulation(scenario, engine, model, workload, strategy, memory, plan, core, arrivals)


def _adaptive_drafter(
    scenario: Scenario, strategy: Strategy, node: tuple[Model, Any, StepCostModel, Any, Path]
) -> AdaptiveDrafter:
    """The drafting cost of every k up to ``num_speculative_tokens``, each by the strategy
    built for a chain of that k (a policy may choose any of them)."""
    model, gpu, cost_model, engine, base_dir = node
    k_max = scenario.speculation.num_speculative_tokens
    by_k: dict[int, Strategy] = {k_max: strategy}
    for k in range(1, k_max):
        spec = scenario.speculation.model_copy(update={"num_speculative_tokens": k})
        chain_k = scenario.model_copy(update={"speculation": spec})
        by_k[k] = build_strategy(
            chain_k, model, gpu, cost_model, engine.name, base_dir, enforce_support=False
        )
    return AdaptiveDrafter(strategy, by_k)


def _adaptive_plan(
    scenario: Scenario,
    strategy: Strategy,
    drafter: AdaptiveDrafter,
    cost_model: StepCostModel,
    workload: Workload,
    streams: RandomStreams,
) -> AdaptivePlan:
    """The plan through which ``speculation.policy`` chooses k per step (its acceptance drawn
    per output position from the ``acceptance`` stream, as the fixed plan draws from it).
    Raise ScenarioError naming the key if the method, proposal or engine rules the policy out."""
    spec = scenario.speculation
    assert spec.policy is not None
    if spec.method not in ADAPTIVE_METHODS or strategy.proposal is None:
        raise ScenarioError(
            f"speculation.policy: adaptive k needs a chain method ({', '.join(ADAPTIVE_METHODS)}),"
            f" got {spec.method!r}"
        )
    if strategy.proposal.is_tree or strategy.proposal.tree_widths is not None:
        raise ScenarioError("speculation.policy: adaptive k covers chains; drop speculation.tree")
    if not spec.allow_unsupported:
        preset = get_preset(scenario.engine.preset)
        check_policy_support(spec.policy.name, preset.draft_support_from, preset.display_name)
    assert strategy.acceptance is not None
    k_max = strategy.proposal.num_draft_tokens
    needed = workload.output_tokens.astype(np.int64) - 1
    acceptance = PositionAcceptance.from_model(
        strategy.acceptance, needed, k_max, streams.stream("acceptance")
    )
    policy = build_policy(
        spec.policy.name,
        spec.policy.params,
        k_max,
        len(needed),
        cost_model_step_time(cost_model, drafter, strategy.extra_tokens_per_decode),
    )
    return AdaptivePlan(acceptance, policy, k_max)


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


def execute(
    simulation: Simulation,
    progress: Callable[[int], None] | None = None,
    *,
    steps_to: Path | None = None,
    chunk_rows: int = CHUNK_ROWS,
    node: ServingNode | None = None,
) -> ScenarioResult:
    """Run a built simulation to completion and summarise it.

    ``node``: the simulation's node, already started and paused by its caller
    (``node.env.run(until=t)``); the run continues it, and ends as one run from the start would.

    ``steps_to``: a folder to write the step records into as the run goes (``steps.parquet``,
    or ``steps.csv`` without pyarrow), ``chunk_rows`` steps at a time, instead of holding them;
    the file appears under its name only when the run ends, and a failed or interrupted run
    leaves none (:class:`sim.results.StepStreamWriter`). The summary is then read from the file,
    and is the one the run held in memory would give. Raise ValueError if ``steps_to`` is given
    for a simulation built to keep only the summary's step columns, or with ``node``.
    """
    if steps_to is not None and node is not None:
        raise ValueError("steps_to: a continued run's earlier steps were not streamed")
    if steps_to is not None and len(simulation.core.recorder.column_names) != len(STEP_COLUMNS):
        raise ValueError("steps_to: the simulation keeps only some step columns (step_records)")
    started = time.perf_counter()
    if node is None:
        node = ServingNode(simpy.Environment(), simulation.core, simulation.arrivals, progress)
    env = node.env
    core = simulation.core
    steps_file = None
    if steps_to is None:
        env.run(until=node.process)
    else:
        from sim.results import StepStreamWriter, steps_file_name

        with StepStreamWriter(steps_to / steps_file_name()) as writer:
            core.recorder.stream_to(writer, chunk_rows)
            env.run(until=node.process)
            core.recorder.flush()
        steps_file = writer.path
    wall = time.perf_counter() - started
    requests = {name: getattr(core.requests, name) for name in REQUEST_COLUMNS}
    egress_s = simulation.engine.frontend.egress_s
    if egress_s > 0:
        # The client sees every streamed chunk egress_s after the engine emits it.
        for name in ("first_token_at_s", "finished_at_s"):
            requests[name] = requests[name] + egress_s
    steps = {} if steps_file is not None else core.recorder.columns()
    source = StepFile(steps_file) if steps_file is not None else MemorySteps(steps)
    irregular, irregular_at = core.recorder.irregular_itl()
    scenario = simulation.scenario
    summary = {
        "scenario": scenario.name,
        "method": scenario.speculation.method,
        "seed": scenario.seed,
        **summarize(
            requests,
            source,
            irregular,
            irregular_at,
            scenario.measurement.warmup_requests,
            simulation.memory.num_blocks,
            scenario.speculation.method != "none",
            simulation.engine.enable_prefix_caching,
            trim_fractions=scenario.measurement.trim_fractions,
            goodput_ms=scenario.measurement.goodput,
        ),
        "wall_time_s": wall,
        "specsim_version": __version__,
    }
    resolved = resolved_document(scenario, simulation.engine)
    memory = simulation.memory
    resolved["derived"] = {
        "strategy": simulation.strategy.describe(),
        "kv_cache": {
            "num_blocks": memory.num_blocks,
            "block_size": memory.block_size,
            "num_tokens": memory.num_kv_tokens,
            "kv_bytes_per_token_per_gpu": memory.kv_bytes_per_token,
            "weight_bytes_per_gpu": memory.weight_bytes,
            "activation_bytes_per_gpu": memory.activation_bytes,
        },
    }
    return ScenarioResult(
        summary, requests, steps, resolved, memory, (irregular, irregular_at), steps_file
    )


def run_scenario(
    scenario: Scenario,
    base_dir: Path,
    progress: Callable[[int], None] | None = None,
    *,
    steps_to: Path | None = None,
    **build: Any,
) -> ScenarioResult:
    """Build and run ``scenario`` (a fleet when it has a ``fleet`` section: see
    :func:`sim.fleet.runner.run_fleet`); see :func:`build_simulation` for the errors and
    :func:`execute` for ``steps_to`` (a fleet holds its replicas' steps and ignores it)."""
    if scenario.fleet is not None:
        from sim.fleet.runner import run_fleet

        return run_fleet(scenario, base_dir, progress, **build)
    return execute(build_simulation(scenario, base_dir, **build), progress, steps_to=steps_to)
