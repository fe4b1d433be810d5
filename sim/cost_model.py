"""How long one engine step takes on the modelled node: a sum of per-operator-class rooflines.

``T_step = T_fixed + T_linear + T_attention + T_allreduce + T_sample (+ T_draft)``
(docs/cost-model.md):

* linear layers: ``max(w_bytes/(TP·η_bw·BW), 2·P·N/(TP·η_fl·F))`` — the weights are read once per
  step whatever the batch, the FLOPs grow with the tokens ``N`` in the step (per-operator rooflines,
  Yuan et al., arXiv:2402.16363); the max is rounded into a p-norm and a per-GEMM floor is added,
  both fitted to measured operator timings;
* attention over the KV cache:
  ``max(Σn·kv_tok/(min(TP, n_kv)·η_bw·BW), 4·L·n_h·d_h·pairs/(TP·η_fl·F))``;
* two all-reduces per layer under tensor parallelism (Megatron-LM, Shoeybi et al. arXiv:1909.08053),
  each ``α(TP) + 2·(TP−1)/TP · bytes / busbw`` (ring cost, Patarasuk & Yuan 2009);
* sampling: logits are written and read in fp32 a few times (softmax, top-k/p, rejection), a
  bandwidth-bound pass over ``N_logits · V`` elements;
* the elementwise operators (RMSNorms, rotary embedding, SiLU-and-mul, residual add):
  ``L·max(0, N·b/(f·BW) − t_layer)`` above the preset's fixed per-layer time, bandwidth-bound
  at the fraction Vidur's H100 profiles achieve (:mod:`sim.elementwise`); priced inside
  ``linear_s`` (:meth:`StepCostModel.elementwise_s` gives its share);
* a fixed per-step engine overhead plus a per-sequence part (CPU scheduling, input preparation and
  launch the GPU does not hide), from the engine preset.

Every function takes numpy arrays (one entry per step) as well as scalars, so many predictable
steps can be costed at once. Nothing here knows about queues or time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sim.catalogue import GPU, Model
from sim.elementwise import ElementwiseCost
from sim.host_costs import HostCostModel, HostCosts
from sim.linear_attention import state_s_per_seq
from sim.parallel import Layout
from sim.precision import compute_dtype

FloatArray = NDArray[np.float64]

#: fp32 logits: bytes moved per logit element by sampling (write, softmax read/write, sample read).
SAMPLING_BYTES_PER_LOGIT = 4 * 4

#: Breakdown keys, in the order they are reported.
BREAKDOWN_KEYS = ("fixed_s", "linear_s", "attention_s", "allreduce_s", "sampling_s", "draft_s")


@dataclass(frozen=True)
class Efficiency:
    """Achieved fractions of peak bandwidth and tensor throughput, and the roofline's corner.

    ``roofline_p``: the linear layers' time is the p-norm ``(t_bw^p + t_fl^p)^(1/p)`` of the two
    bounds instead of their sharp maximum (``inf``), because real GEMMs leave the memory-bound
    regime gradually around the ridge point; ``gemm_floor_s``: a fixed time per GEMM kernel that
    does not shrink as work is split (launch and tail). All four are fitted to measured operator
    timings (``calibration/operator_fit.py``, ``docs/cost-model.md``).
    Raise ValueError if a fraction is outside (0, 1], ``roofline_p`` < 1 or the floor is negative.
    """

    bandwidth: float
    flops: float
    roofline_p: float = float("inf")
    gemm_floor_s: float = 0.0

    def __post_init__(self) -> None:
        for name, value in (("bandwidth", self.bandwidth), ("flops", self.flops)):
            if not 0.0 < value <= 1.0:
                raise ValueError(f"efficiency.{name} must be in (0, 1], got {value}")
        if not self.roofline_p >= 1.0:
            raise ValueError(f"efficiency.roofline_p must be >= 1, got {self.roofline_p}")
        if self.gemm_floor_s < 0:
            raise ValueError(f"efficiency.gemm_floor_s must be >= 0, got {self.gemm_floor_s}")


def smooth_max(a: ArrayLike, b: ArrayLike, p: float) -> FloatArray:
    """``(a^p + b^p)^(1/p)`` for non-negative a, b; the plain maximum when p is infinite."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    high = np.maximum(a, b)
    if np.isinf(p):
        return high
    # Where both are 0 the ratio's denominator is floored, giving 0 / tiny = 0 and a result of 0.
    ratio = np.minimum(a, b) / np.maximum(high, 1e-300)
    return high * (1.0 + ratio**p) ** (1.0 / p)


def gemms_per_forward(model: Model) -> int:
    """GEMM kernels in one forward as serving engines fuse them: QKV, O, gate-up, down per layer,
    and the lm_head (MoE: gate-up and down per routed expert group count as one grouped GEMM)."""
    return 4 * model.spec.num_layers + 1


def body_peak_flops(model: Model, gpu: GPU) -> float:
    """Peak dense throughput of the decoder's GEMMs: the GPU's figure for the datatype the
    model's weight format computes in. Raise CatalogueError if the GPU cannot run the format."""
    peak = gpu.dense_flops(compute_dtype(model.weight_precision, gpu))
    assert peak is not None  # compute_dtype returns only datatypes the GPU has
    return peak


@dataclass(frozen=True)
class StepShape:
    """The aggregate shape of one or many steps, enough to cost them.

    Every field is a scalar or an array with one entry per step.
    ``num_tokens`` counts every token computed (prefill chunks, decodes, draft and tree tokens);
    ``num_logit_tokens`` the positions whose logits are computed (one per decoding sequence, k+1 per
    verified chain, the tree size for a tree, one for a prefill that completes);
    ``kv_read_tokens`` the sum over sequences of the context each attends to (Σ n_i);
    ``attention_pairs`` the number of (query, key) pairs, Σ t_i·(c_i + (t_i+1)/2) for a sequence
    with c_i cached tokens computing t_i new ones (causal within the new tokens).
    """

    num_seqs: ArrayLike
    num_tokens: ArrayLike
    num_logit_tokens: ArrayLike
    kv_read_tokens: ArrayLike
    attention_pairs: ArrayLike


class StepCostModel:
    """Maps a step shape to its duration and breakdown for one model on one node.

    ``host`` adds the engine's host-side mechanisms (:mod:`sim.host_costs`): CPU work that grows
    with the batch, CUDA-graph capture and eager launches, and overlap of CPU work with the
    forward; without it only ``step_overhead_s + per_sequence_overhead_s·B`` is added.
    ``speculative``: the steps verify drafts (adds the host's speculative per-sequence work);
    ``cpu_overlap``: whether this run overlaps CPU work with the forward (an engine may turn its
    overlap off for a speculative method; None takes ``host.cpu_overlap``);
    ``measured_linear``: whether a measured GEMM grid of the GPU prices the dense linear layers
    (False when ``efficiency`` is a calibrated profile's, which then prices them);
    ``moe_kernel``: the engine's expert kernel, ``triton`` or ``deepgemm`` (sim/moe.py);
    ``tree_mask``: the engine verifies token trees with a custom mask (sim/drafting/tree_verify.py),
    priced by the measured kernels' masked form where the GPU has it (sim/kernel_costs.py).
    Raise ValueError if ``tp`` < 1 or an overhead is negative.
    """

    def __init__(
        self,
        model: Model,
        gpu: GPU,
        tp: int,
        efficiency: Efficiency,
        step_overhead_s: float,
        per_sequence_overhead_s: float = 0.0,
        *,
        host: HostCosts | None = None,
        speculative: bool = False,
        cpu_overlap: bool | None = None,
        layout: Layout | None = None,
        measured_linear: bool = True,
        moe_kernel: str = "triton",
        tree_mask: bool = False,
    ) -> None:
        if tp < 1:
            raise ValueError(f"tensor-parallel degree must be >= 1, got {tp}")
        if step_overhead_s < 0 or per_sequence_overhead_s < 0:
            raise ValueError("engine overheads must be >= 0")
        self.model = model
        self.gpu = gpu
        self.tp = tp
        self.efficiency = efficiency
        self.step_overhead_s = step_overhead_s
        self.per_sequence_overhead_s = per_sequence_overhead_s
        base = host if host is not None else HostCosts()
        self.host_costs = replace(
            base,
            step_overhead_s=step_overhead_s,
            per_sequence_overhead_s=per_sequence_overhead_s,
        )
        self.host = HostCostModel(self.host_costs, model.spec.num_layers)
        # Measured kernel tables price what they cover on this GPU (engine steps only).
        from sim.kernel_costs import KernelCosts  # the kernel module builds on this one

        self._kernels = (
            KernelCosts(
                model,
                gpu,
                tp,
                efficiency,
                gemm_grid=measured_linear,
                moe_kernel=moe_kernel,
                tree_mask=tree_mask,
            )
            if host is not None
            else None
        )
        self.speculative = speculative
        # A deployment of several attention groups or with expert parallelism is priced per GPU
        # by sim/parallel_cost.py; the plain tensor-parallel node by the terms below.
        self.layout = layout
        self._parallel = None
        if layout is not None and not layout.is_single_group:
            from sim.parallel_cost import ParallelStepCost  # builds on this module

            self._parallel = ParallelStepCost(model, gpu, layout, efficiency, moe_kernel)
            self._kernels = None
        self.cpu_overlap = base.cpu_overlap if cpu_overlap is None else cpu_overlap
        # The decoder's elementwise operators above the preset's per-layer floor; a deployment
        # priced by sim/parallel_cost.py is left out (sim/elementwise.py, scope).
        self._elementwise = (
            ElementwiseCost(model, gpu, tp, self.host_costs.per_layer_overhead_s)
            if self._parallel is None
            else None
        )
        self._bw = tp * efficiency.bandwidth * gpu.hbm_bandwidth_bytes_per_s
        self._flops = tp * efficiency.flops * gpu.bf16_dense_flops
        # The decoder's GEMMs run at their weight format's tensor throughput (sim/precision.py;
        # the lm_head stays bf16).
        self._body_flops = tp * efficiency.flops * body_peak_flops(model, gpu)
        spec = model.spec
        self._kv_bw = (
            min(tp, spec.num_kv_heads) * efficiency.bandwidth * gpu.hbm_bandwidth_bytes_per_s
        )
        self._allreduce_latency_s = gpu.allreduce_latency_at(tp) if tp > 1 else 0.0
        self._gemm_floor_s = gemms_per_forward(model) * efficiency.gemm_floor_s
        # Per-unit coefficients of each operator class, so a step costs a handful of array ops.
        lm_head = spec.vocab_size * spec.hidden_size
        routed = model.num_moe_layers * spec.experts_per_token * model.expert_params_per_layer
        self._moe = spec.num_experts > 1
        self._dense_weight_s = model.linear_weight_bytes_read / self._bw
        self._expert_weight_s = model.num_moe_layers * model.expert_bytes_per_layer / self._bw
        self._flop_s_per_token = (
            2.0 * (model.dense_linear_params - lm_head + routed) / self._body_flops
        )
        self._flop_s_per_logit = 2.0 * lm_head / self._flops
        self._kv_s_per_token = model.kv_bytes_per_token / self._kv_bw
        self._attention_s_per_pair = model.attention_flops_per_pair / self._flops
        # Sliding-window layers read at most `window` tokens per sequence; MLA prefill
        # materialises K and V (sim/architecture.py).
        self._window_kv_s_per_token = model.window_kv_bytes_per_token / self._kv_bw
        self._window = float(spec.sliding_window or 0)
        self._prefill_s_per_pair = model.prefill_attention_flops_per_pair / self._flops
        # Linear-attention layers read and write each sequence's state (sim/linear_attention.py).
        self._state_s_per_seq = state_s_per_seq(
            model, efficiency.bandwidth * gpu.hbm_bandwidth_bytes_per_s, tp
        )
        # Two all-reduces per layer, each alpha + 2(TP-1)/TP * N*H*2 bytes / busbw (ring).
        self._allreduce_const_s = 2.0 * spec.num_layers * self._allreduce_latency_s
        self._allreduce_s_per_token = (
            2.0
            * spec.num_layers
            * 2.0
            * (tp - 1)
            / tp
            * spec.hidden_size
            * 2.0
            / gpu.interconnect_bus_bandwidth_bytes_per_s
        )
        self._sampling_s_per_logit = spec.vocab_size * SAMPLING_BYTES_PER_LOGIT / (self._bw / tp)

    # --- operator classes ------------------------------------------------------------------
    def linear_s(self, num_tokens: ArrayLike, num_logit_tokens: ArrayLike) -> FloatArray:
        """Linear layers and lm_head: weight bytes over bandwidth vs FLOPs over throughput.

        Dense weights are read once per step; MoE experts only where some token is routed. The
        lm_head multiplies only the positions whose logits are needed.
        """
        n = np.asarray(num_tokens, dtype=np.float64)
        n_logits = np.asarray(num_logit_tokens, dtype=np.float64)
        weight_s: float | FloatArray = self._dense_weight_s
        if self._moe:
            weight_s = weight_s + self._expert_weight_s * self.model.expected_experts_touched(n)
        flop_s = self._flop_s_per_token * n + self._flop_s_per_logit * n_logits
        return smooth_max(weight_s, flop_s, self.efficiency.roofline_p) + self._gemm_floor_s

    def attention_s(self, kv_read_tokens: ArrayLike, attention_pairs: ArrayLike) -> FloatArray:
        """Attention over the KV cache: KV bytes over bandwidth vs score FLOPs over throughput."""
        kv = np.asarray(kv_read_tokens, dtype=np.float64)
        pairs = np.asarray(attention_pairs, dtype=np.float64)
        return np.maximum(self._kv_s_per_token * kv, self._attention_s_per_pair * pairs)

    def _attention(
        self, num_seqs: FloatArray, kv_read: FloatArray, pairs: FloatArray, decode_only: ArrayLike
    ) -> FloatArray:
        """The attention roofline with sliding-window layers and MLA's prefill form."""
        read = self._kv_s_per_token * kv_read
        pair_s: float | FloatArray = self._attention_s_per_pair
        if self._window:
            read = read + self._window_kv_s_per_token * np.minimum(kv_read, num_seqs * self._window)
        if self._prefill_s_per_pair != self._attention_s_per_pair:
            pair_s = np.where(decode_only, self._attention_s_per_pair, self._prefill_s_per_pair)
        return np.maximum(read, pair_s * pairs)

    def allreduce_s(self, num_tokens: ArrayLike) -> FloatArray:
        """Two all-reduces per layer of ``N·H`` bf16 activations; zero without tensor parallel."""
        n = np.asarray(num_tokens, dtype=np.float64)
        if self.tp == 1:
            return np.zeros_like(n)
        return self._allreduce_const_s + self._allreduce_s_per_token * n

    def sampling_s(self, num_logit_tokens: ArrayLike) -> FloatArray:
        """Softmax, sampling and rejection over fp32 logits: a bandwidth-bound pass per row."""
        return self._sampling_s_per_logit * np.asarray(num_logit_tokens, dtype=np.float64)

    def elementwise_s(self, num_tokens: ArrayLike) -> FloatArray:
        """The elementwise operators' time above the per-layer floor for steps of
        ``num_tokens`` (padded) tokens (:mod:`sim.elementwise`); zero where it does not apply.
        ``breakdown`` reports it inside ``linear_s``."""
        n = np.asarray(num_tokens, dtype=np.float64)
        if self._elementwise is None or not self._elementwise.applies:
            return np.zeros_like(n)
        return self._elementwise.seconds(n)

    def step_linear_s(self, num_tokens: ArrayLike, num_logit_tokens: ArrayLike) -> FloatArray:
        """A step's linear term at padded ``num_tokens`` (one deployment group): the measured
        kernels where they price the linear layers, else the roofline, plus the elementwise
        operators. :meth:`breakdown` and the compiled evaluator's tables
        (:mod:`sim.engine.cost_kernel`) both read it."""
        kernels = self._kernels
        linear = (
            kernels.linear_s(num_tokens, num_logit_tokens)
            if kernels is not None and kernels.prices_linear
            else self.linear_s(num_tokens, num_logit_tokens)
        )
        return np.asarray(linear + self.elementwise_s(num_tokens), dtype=np.float64)

    def step_allreduce_s(self, num_tokens: ArrayLike, graphed: ArrayLike) -> FloatArray:
        """A step's all-reduce at padded ``num_tokens``: the measured collectives (inside or
        outside a CUDA graph) where the GPU has them, else the ring formula; read by
        :meth:`breakdown` and the compiled evaluator alike."""
        kernels = self._kernels
        if kernels is not None and kernels.prices_allreduce:
            return np.asarray(kernels.allreduce_s(num_tokens, graphed), dtype=np.float64)
        return np.asarray(self.allreduce_s(num_tokens), dtype=np.float64)

    def fixed_s(self, num_seqs: ArrayLike) -> FloatArray:
        """Engine overhead the GPU does not hide: per step plus per scheduled sequence."""
        b = np.asarray(num_seqs, dtype=np.float64)
        return self.step_overhead_s + self.per_sequence_overhead_s * b

    # --- whole step --------------------------------------------------------------------------
    def breakdown(self, shape: StepShape) -> dict[str, FloatArray]:
        """Each operator class's time for ``shape`` (``draft_s`` is zero: strategies add it).

        The engine calls this once per step or fast-forwarded segment. A decode-only step
        (verification included) within the captured sizes replays a CUDA graph at its padded
        size; any other step launches eagerly and waits where launching is slower than the GPU;
        the CPU work shows in full or, with overlap, where it exceeds the forward. ``fixed_s`` is
        the host time the GPU does not hide (:mod:`sim.host_costs`). Without ``host`` every
        mechanism is off and ``fixed_s`` is ``step_overhead_s + per_sequence_overhead_s·B``.
        """
        num_seqs = np.asarray(shape.num_seqs, dtype=np.float64)
        n_real = np.asarray(shape.num_tokens, dtype=np.float64)
        n_logits = np.asarray(shape.num_logit_tokens, dtype=np.float64)
        # Every token of a decode-only step yields logits; a prefill chunk yields at most one.
        graphed = self.host.graphed(num_seqs, n_real, n_real <= n_logits)
        n = self.host.padded_tokens(num_seqs, n_real, graphed)
        kernels = self._kernels
        kv_read = np.asarray(shape.kv_read_tokens, dtype=np.float64)
        pairs = np.asarray(shape.attention_pairs, dtype=np.float64)
        if self.host_costs.verify_batch_expansion:
            # Each verified position is its own sequence reading the whole context: Σ t_i·n_i,
            # which is the step's (query, key) pair count, for the decode-only steps.
            kv_read = np.where(n_real <= n_logits, np.maximum(kv_read, pairs), kv_read)
        decode_only = n_real <= n_logits
        if self._parallel is not None:
            linear = self._parallel.linear_s(n, n_logits)
            attention = self._parallel.attention_s(num_seqs, kv_read, pairs, decode_only)
            allreduce = self._parallel.comm_s(n)
            sampling = self._parallel.sampling_s(n_logits)
        else:
            linear = self.step_linear_s(n, n_logits)
            if kernels is not None and kernels.prices_attention:
                attention = kernels.attention_s(num_seqs, n_real, kv_read, pairs, decode_only)
            else:
                attention = self._attention(num_seqs, kv_read, pairs, decode_only)
            allreduce = self.step_allreduce_s(n, graphed)
            sampling = self._sampling_s_per_logit * n_logits
            attention = attention + self._state_s_per_seq * num_seqs
        forward = linear + attention + allreduce + sampling
        stall = self.host.launch_stall_s(forward, graphed)
        expanded = (
            np.where(decode_only, np.maximum(n_real - num_seqs, 0.0), 0.0)
            if self.host_costs.verify_batch_expansion
            else 0.0
        )
        cpu = self.host.cpu_s(
            num_seqs, n_real, forward + stall, self.speculative, self.cpu_overlap, expanded
        )
        return {
            "fixed_s": cpu + stall,
            "linear_s": linear,
            "attention_s": attention,
            "allreduce_s": allreduce,
            "sampling_s": sampling,
            "draft_s": np.zeros_like(n),
        }

    def step_time(self, shape: StepShape) -> FloatArray:
        """The total duration of ``shape`` in seconds."""
        parts = self.breakdown(shape)
        return total_of(parts)

    def forward_time(
        self,
        num_seqs: ArrayLike,
        num_tokens: ArrayLike,
        kv_read_tokens: ArrayLike,
        attention_pairs: ArrayLike,
        num_logit_tokens: ArrayLike,
    ) -> FloatArray:
        """One forward pass without the engine's fixed overhead (used for draft models), its
        sampling of the draft tokens included."""
        del num_seqs
        forward = (
            self.linear_s(num_tokens, num_logit_tokens)
            + self.attention_s(kv_read_tokens, attention_pairs)
            + self.allreduce_s(num_tokens)
            + self.sampling_s(num_logit_tokens)
        )
        if self.host_costs.eager_launch_s_per_layer == 0:
            return forward
        # Outside the captured sizes the draft model's kernels are launched one by one.
        n = np.asarray(num_tokens, dtype=np.float64)
        graphed = self.host.graphed(num_logit_tokens, n, np.ones(n.shape, dtype=bool))
        return forward + self.host.launch_stall_s(forward, graphed)


def total_of(parts: dict[str, FloatArray]) -> FloatArray:
    """Sum a breakdown in the fixed order of :data:`BREAKDOWN_KEYS` (bit-for-bit reproducible)."""
    total = np.zeros_like(parts["fixed_s"])
    for key in BREAKDOWN_KEYS:
        total = total + parts[key]
    return total
