"""What a step costs on the host: CPU work, kernel launches, and how much of it the GPU hides.

A serving engine's step is a GPU forward surrounded by CPU work: scheduling, input preparation
(block tables, positions, sampling metadata) and output processing (appending tokens, stop checks,
detokenisation hand-off, speculative bookkeeping). These engine mechanisms decide how much of it
shows in the step time:

* **CUDA graphs.** A captured graph replays every kernel of a forward with one launch. Engines
  capture a list of step sizes and pad a step up to the next captured size (vLLM
  ``CompilationConfig.cudagraph_capture_sizes``: 1, 2, 4, then multiples of 8 to 256, then of 16 up
  to the largest, 512 by default; SGLang ``cuda_graph_bs``: 1, 2, 4, multiples of 8 up to
  ``cuda_graph_max_bs``). A step above the largest size, or one that mixes in a prefill where only
  decode steps are captured, launches its kernels one by one from Python. The GPU then waits on the
  host whenever launching is slower than executing: the forward takes
  ``max(T_gpu, L · t_launch)`` for ``L`` layers at ``t_launch`` per layer (measured: vLLM 0.28 on
  an H100, Qwen3-1.7B, 8 requests above the capture limit: a flat ~8.2–8.5 ms from 32 to 512 tokens
  against ~2.0 ms replayed from a graph, adixg/vllm-specdecode-cost-model ``results/h100_e1.json``).
  SGLang 0.4 turned padding off for EAGLE (``disable_cuda_graph_padding``), so a speculative batch
  whose size is not a captured size runs eagerly (sgl-project/sglang ``server_args.py``, v0.4.2).
* **Fixed time per layer.** Besides its GEMMs, every decoder layer runs a handful of small kernels
  (norms, rotary embedding, attention, activation, residual adds, KV-cache writes) whose launch
  gaps and tails do not shrink with the batch or with tensor parallelism: ``L · t_layer`` per
  forward. This is why a 64-layer model at TP8 is far slower than its weight read suggests.
* **Per-step CPU work that grows with the batch.** ``T_cpu = s + b·B + c·N (+ b_spec·B when the step
  verifies drafts)``: a fixed part and parts per scheduled sequence and per token (the growth of
  each scheduler phase with batch size is the shape Vidur measured for a vLLM-derived engine,
  microsoft/vidur ``data/profiling/*/cpu_overheads.csv``).
* **Overlap.** An overlapping scheduler prepares step i+1 while the GPU runs step i (SGLang's
  overlap scheduler; vLLM's async scheduling). The growing part of the CPU work then shows only
  where it exceeds the forward: ``s + max(0, T_cpu_var − T_forward)``; without overlap it adds in
  full. Engines turn overlap off for some speculative methods (SGLang 0.4 for EAGLE; SGLang 0.5.6
  for EAGLE-3 and draft models until its "spec v2"), which is one reason speculation loses its edge
  under load: the baseline hides its CPU work and the speculative arm pays it.

``sim/data/host_costs.yaml`` gives each engine preset its values (fitted under load by
``calibration/host_cost_fit.py`` or carried over, each stated), whether it mixes prefill and
decode in one step, and the rules it applies when a speculative method drafts (overlap and graph
padding off, a batch cap, one prefill per step, batch-expansion scoring), each with its source.

Nothing here knows about queues or time; every function takes numpy arrays (one entry per step).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sim.errors import CatalogueError
from sim.package_data import packaged_yaml

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class HostCosts:
    """An engine's host-side step costs and the mechanisms that hide them.

    ``step_overhead_s``: CPU and launch time of every step that the GPU never hides (calibrated at
    batch 1); ``per_layer_overhead_s``: fixed time per decoder layer of every forward (small
    kernels' launch gaps and tails); ``per_sequence_overhead_s``, ``per_token_overhead_s``: CPU work
    per scheduled sequence and per token in the step; ``spec_per_sequence_overhead_s``: extra CPU
    work per sequence of a step that verifies drafts (proposal lists, rejection bookkeeping);
    ``cuda_graph_max_tokens``: the largest captured step (0: no CUDA graphs), counted in tokens or,
    with ``cuda_graph_counts_sequences``, in sequences (SGLang captures batch sizes: a verify step
    of B sequences is captured as B); ``cuda_graph_mixed_steps``: whether steps that carry a prefill
    chunk are captured too (vLLM's piecewise graphs) or only decode steps (SGLang);
    ``cuda_graph_padding``: whether a step is padded up to the next captured size (False: only steps
    of exactly a captured size replay a graph); ``eager_launch_s_per_layer``: host time to launch
    one layer's kernels outside a graph; ``cpu_overlap``: whether the per-sequence and per-token CPU
    work of the next step overlaps this step's forward; ``verify_batch_expansion``: the engine
    scores drafts by expanding each sequence into one single-token sequence per verified position
    (vLLM before its MQA scorer, PR #8839 in v0.6.3), so each reads its whole context: the step's
    KV reads are ``Σ t_i·n_i`` instead of ``Σ n_i``; ``expanded_sequence_overhead_s``: with batch
    expansion, the CPU work (input preparation and sampler bookkeeping) of each extra single-token
    sequence the expansion adds to a verify step, ``t_i − 1`` per sequence (optional in the file,
    0 when absent). Raise ValueError if a time is negative.
    """

    step_overhead_s: float = 0.0
    per_layer_overhead_s: float = 0.0
    per_sequence_overhead_s: float = 0.0
    per_token_overhead_s: float = 0.0
    spec_per_sequence_overhead_s: float = 0.0
    cuda_graph_max_tokens: int = 0
    cuda_graph_counts_sequences: bool = False
    cuda_graph_mixed_steps: bool = True
    cuda_graph_padding: bool = True
    eager_launch_s_per_layer: float = 0.0
    cpu_overlap: bool = False
    verify_batch_expansion: bool = False
    expanded_sequence_overhead_s: float = 0.0

    def __post_init__(self) -> None:
        for name in (
            "step_overhead_s",
            "per_layer_overhead_s",
            "per_sequence_overhead_s",
            "per_token_overhead_s",
            "spec_per_sequence_overhead_s",
            "eager_launch_s_per_layer",
            "expanded_sequence_overhead_s",
        ):
            value = getattr(self, name)
            if not value >= 0 or not np.isfinite(value):
                raise ValueError(f"host cost {name} must be a finite number >= 0, got {value}")
        if self.cuda_graph_max_tokens < 0:
            raise ValueError(
                f"cuda_graph_max_tokens must be >= 0, got {self.cuda_graph_max_tokens}"
            )


def capture_sizes(max_tokens: int) -> NDArray[np.int64]:
    """The step sizes an engine captures as CUDA graphs, up to ``max_tokens``.

    1, 2, 4, then every multiple of 8 up to 256, then every multiple of 16 (vLLM
    ``vllm/config/compilation.py`` default capture list; SGLang's batch list is the same below 256).
    """
    if max_tokens <= 0:
        return np.zeros(0, dtype=np.int64)
    sizes = [1, 2, 4, *range(8, 257, 8), *range(272, max(max_tokens, 272) + 1, 16)]
    out = np.array(sorted({s for s in sizes if s <= max_tokens} | {max_tokens}), dtype=np.int64)
    return out


class HostCostModel:
    """Prices the host side of steps for one engine and model depth.

    ``num_layers``: decoder layers of the verifier (launch cost scales with them).
    """

    def __init__(self, costs: HostCosts, num_layers: int) -> None:
        self.costs = costs
        self.num_layers = num_layers
        self._sizes = capture_sizes(costs.cuda_graph_max_tokens)
        self._eager_launch_s = costs.eager_launch_s_per_layer * num_layers

    def graphed(
        self, num_seqs: ArrayLike, num_tokens: ArrayLike, decode_only: ArrayLike
    ) -> NDArray[np.bool_]:
        """Whether each step replays a CUDA graph: a captured kind of step (decode-only,
        verification included, or any step with piecewise graphs) within the captured sizes;
        without padding, only at exactly a captured size."""
        c = self.costs
        size = np.asarray(num_seqs if c.cuda_graph_counts_sequences else num_tokens, np.int64)
        if len(self._sizes) == 0:
            return np.zeros(size.shape, dtype=bool)
        kind = np.asarray(decode_only, dtype=bool) | c.cuda_graph_mixed_steps
        inside = (size <= c.cuda_graph_max_tokens) & kind
        if c.cuda_graph_padding:
            return inside
        index = np.minimum(np.searchsorted(self._sizes, size), len(self._sizes) - 1)
        return inside & (self._sizes[index] == size)

    def padded_tokens(
        self, num_seqs: ArrayLike, num_tokens: ArrayLike, graphed: ArrayLike
    ) -> FloatArray:
        """Tokens the GEMMs compute: a graphed step runs at its captured size (padding rows; a
        graph captured by sequences pads the sequences, each with the step's tokens per
        sequence)."""
        n = np.asarray(num_tokens, dtype=np.float64)
        if len(self._sizes) == 0:
            return n
        graphed = np.asarray(graphed, dtype=bool)
        if self.costs.cuda_graph_counts_sequences:
            b = np.asarray(num_seqs, dtype=np.float64)
            index = np.minimum(np.searchsorted(self._sizes, b), len(self._sizes) - 1)
            per_seq = np.divide(n, b, out=np.ones_like(n), where=b > 0)
            return np.where(graphed, self._sizes[index] * per_seq, n)
        index = np.minimum(np.searchsorted(self._sizes, n), len(self._sizes) - 1)
        return np.where(graphed, self._sizes[index], n)

    def launch_stall_s(
        self, forward_s: ArrayLike, graphed: ArrayLike, num_layers: int | None = None
    ) -> FloatArray:
        """Time the GPU waits on eager kernel launches: ``max(0, L·t_launch − T_forward)``
        (``num_layers``: a draft network's layers instead of the verifier's).

        The launches hide behind the GPU's work because they are asynchronous: in vLLM V1 a step
        above the largest captured size finds no graph key (``CudagraphDispatcher.dispatch``
        returns ``CUDAGraphMode.NONE``, vllm/v1/cudagraph_dispatcher.py; the EAGLE proposer
        applies the same ``max_cudagraph_capture_size`` test, vllm/v1/spec_decode/eagle.py), so
        the torch.compile'd pieces run without a graph, each kernel launched from Python onto the
        stream while earlier kernels still run; with asynchronous scheduling the host prepares
        and launches step i+1 while step i executes. The GPU waits only where launching a
        forward takes longer than running it."""
        forward = np.asarray(forward_s, dtype=np.float64)
        launch = (
            self._eager_launch_s
            if num_layers is None
            else self.costs.eager_launch_s_per_layer * num_layers
        )
        stall = np.maximum(launch - forward, 0.0)
        return np.where(np.asarray(graphed, dtype=bool), 0.0, stall)

    def cpu_s(
        self,
        num_seqs: ArrayLike,
        num_tokens: ArrayLike,
        forward_s: ArrayLike,
        speculative: bool,
        overlap: bool,
        expanded: ArrayLike = 0.0,
    ) -> FloatArray:
        """CPU time the step shows: the fixed part, plus the batch-dependent part where it is not
        hidden behind the forward (``overlap``) or in full. ``expanded``: the extra single-token
        sequences batch expansion adds to the step (0 where there is none)."""
        c = self.costs
        b = np.asarray(num_seqs, dtype=np.float64)
        per_seq = c.per_sequence_overhead_s + (c.spec_per_sequence_overhead_s if speculative else 0)
        variable = per_seq * b + c.per_token_overhead_s * np.asarray(num_tokens, dtype=np.float64)
        added = np.asarray(expanded, dtype=np.float64)
        variable = variable + c.expanded_sequence_overhead_s * added
        if overlap:
            variable = np.maximum(variable - np.asarray(forward_s, dtype=np.float64), 0.0)
        return c.step_overhead_s + self.num_layers * c.per_layer_overhead_s + variable


# --- per-engine values ----------------------------------------------------------------------
#: The packaged file, relative to the ``sim`` package.
HOST_COSTS_FILE = "data/host_costs.yaml"
#: Scheduling settings a speculative rule may change (the engine's own defaults for that method).
RULE_SETTINGS = ("max_num_seqs", "chunked_prefill", "max_prefills_per_step")
#: Host-cost fields a speculative rule may change.
RULE_COSTS = ("cpu_overlap", "cuda_graph_padding", "verify_batch_expansion")
#: Host-cost fields a preset may leave out (their default, 0, is then in force).
OPTIONAL_COSTS = frozenset({"expanded_sequence_overhead_s"})


@dataclass(frozen=True)
class SpeculativeRule:
    """What an engine changes when one of ``methods`` drafts: host mechanisms (``costs``) and
    scheduling defaults (``settings``, applied unless the scenario sets them), with the source."""

    methods: tuple[str, ...]
    costs: dict[str, bool]
    settings: dict[str, int | bool]
    source: str


@dataclass(frozen=True)
class HostProfile:
    """An engine preset's host costs and its speculative rules."""

    preset: str
    costs: HostCosts
    rules: tuple[SpeculativeRule, ...]
    #: Whether a step may mix prefill chunks with decodes (see ``SchedulerConfig``).
    mixed_batches: bool = True

    def for_method(self, method: str) -> tuple[HostCosts, dict[str, int | bool], list[str]]:
        """The host costs in force when ``method`` drafts, the scheduling defaults the engine
        imposes for it, and the sources of the rules that applied."""
        costs, settings, sources = self.costs, {}, []
        for rule in self.rules:
            if method in rule.methods:
                costs = replace(costs, **rule.costs)
                settings.update(rule.settings)
                sources.append(rule.source)
        return costs, settings, sources


def _rule(preset: str, index: int, entry: Any) -> SpeculativeRule:
    where = f"sim/{HOST_COSTS_FILE}: {preset}.speculative[{index}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("methods"), list):
        raise CatalogueError(f"{where}: expected a mapping with a list of methods")
    unknown = set(entry) - {"methods", "source", *RULE_SETTINGS, *RULE_COSTS}
    if unknown:
        raise CatalogueError(f"{where}: unknown keys {sorted(unknown)}")
    if not isinstance(entry.get("source"), str):
        raise CatalogueError(f"{where}: every rule names its source")
    return SpeculativeRule(
        methods=tuple(str(m) for m in entry["methods"]),
        costs={k: bool(entry[k]) for k in RULE_COSTS if k in entry},
        settings={k: entry[k] for k in RULE_SETTINGS if k in entry},
        source=entry["source"],
    )


def _document() -> dict[str, Any]:
    return packaged_yaml(HOST_COSTS_FILE, section="presets", error=CatalogueError)


def host_costs_document() -> dict[str, Any]:
    """The whole parsed host-costs file (values, fits and sources)."""
    return _document()


def load_host_profile(preset: str) -> HostProfile:
    """The host costs of the engine ``preset``.

    Raise CatalogueError naming the key path if the preset has no entry or a value is invalid.
    """
    presets = _document()["presets"]
    entry = presets.get(preset)
    if not isinstance(entry, dict):
        raise CatalogueError(
            f"sim/{HOST_COSTS_FILE}: no entry for engine preset {preset!r}; "
            f"known: {', '.join(sorted(presets))}"
        )
    fields = {f.name for f in dataclasses.fields(HostCosts)} - {"step_overhead_s"}
    values = {k: entry[k] for k in fields if k in entry}
    missing = fields - set(values) - OPTIONAL_COSTS
    if missing:
        raise CatalogueError(f"sim/{HOST_COSTS_FILE}: {preset} lacks {sorted(missing)}")
    try:
        costs = HostCosts(**values)
    except (TypeError, ValueError) as exc:
        raise CatalogueError(f"sim/{HOST_COSTS_FILE}: {preset}: {exc}") from None
    rules = tuple(_rule(preset, i, r) for i, r in enumerate(entry.get("speculative") or []))
    mixed = entry.get("mixed_batches")
    if not isinstance(mixed, bool):
        raise CatalogueError(f"sim/{HOST_COSTS_FILE}: {preset}.mixed_batches must be true or false")
    return HostProfile(preset=preset, costs=costs, rules=rules, mixed_batches=mixed)


def engine_overheads_s(preset: str, step_overhead_s: float) -> dict[str, float]:
    """The per-step, per-layer, per-sequence and per-token overheads in force for the engine
    ``preset`` (whose calibrated per-step value is ``step_overhead_s``).

    Raise CatalogueError as :func:`load_host_profile`.
    """
    costs = load_host_profile(preset).costs
    return {
        "step_overhead_s": step_overhead_s,
        "per_layer_overhead_s": costs.per_layer_overhead_s,
        "per_sequence_overhead_s": costs.per_sequence_overhead_s,
        "per_token_overhead_s": costs.per_token_overhead_s,
    }
