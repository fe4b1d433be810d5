"""Pipeline parallelism: the model's layers in ``p`` stages on successive nodes.

A deployment of ``num_nodes`` nodes with ``pipeline_parallel = p`` splits the decoder's layers
into ``p`` contiguous stages, each on ``num_nodes / p`` whole nodes split by
:class:`sim.parallel.Layout` as before (TP within a node, DP attention and EP across the stage's
nodes). The last stage holds the lm_head and samples; a drafter (EAGLE head, MTP module) runs
there too, as vLLM and SGLang place them on the last pipeline rank.

The engine keeps up to ``p`` micro-batches in flight (vLLM V1 ``max_concurrent_batches =
pipeline_parallel_size``; GPipe, Huang et al. arXiv:1811.06965): the running batch of ``B``
sequences is cut into ``m = min(p, B)`` micro-batches of ``B/m`` sequences each, so an engine
step (every running sequence advancing one round) lasts

``T = max( (p−1)·(t_mid(b) + t_send(b)) + t_last(b),   m·t_last(b) )``

where ``t_mid``/``t_last`` are one stage's step time for a micro-batch ``b`` (its share of the
step's tokens, logits, context and pairs) without and with the lm_head and sampling, each with
its own host time (every stage's worker prepares its inputs and launches its own layers; the
scheduler's per-step part is so counted once per stage, an over-count of ``(p−1)`` scheduler
passes), and ``t_send`` the activation transfer to the next stage. The first term is one
micro-batch's round trip through every stage; the second is the busiest stage working through
all ``m`` micro-batches back to back. With ``m < p`` the first term wins and ``(p − m)/p`` of
every stage's time is bubble. PP therefore does not shorten a token's latency: it lets a model
whose weights need more than one node run, and it fills the pipeline when the batch has at
least ``p`` sequences.

``t_send(b) = α + 2·N_b·H·2 bytes / BW``: the hidden state and the residual stream of the
micro-batch's ``N_b`` tokens in bf16 (vLLM's ``IntermediateTensors`` ``hidden_states`` and
``residual``), each GPU of a stage sending its replica over its own NIC (the catalogue's
inter-node bandwidth and latency per GPU; stages are whole nodes, so the next is always remote).

The engine adds a drafter's time after the step (``draft_s``), not overlapped with the other
stages: for a speculative pipeline that is a bound from above on the drafting's share.

Each stage is priced with ``ceil(L/p)`` layers (and the same proportion of dense, MoE and
sliding-window layers); when ``p`` does not divide ``L`` the stages are priced as the largest.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sim.catalogue import BF16_BYTES, GPU, Model
from sim.cost_model import BREAKDOWN_KEYS, StepCostModel, StepShape, total_of
from sim.errors import ScenarioError
from sim.parallel import Layout

FloatArray = Any

#: Activation tensors sent between stages per token: the hidden state and the residual stream
#: (vLLM model files, ``make_empty_intermediate_tensors_factory(["hidden_states", "residual"])``).
ACTIVATION_TENSORS = 2


def check_pipeline(pipeline_parallel: int, num_nodes: int, model: Model) -> None:
    """Refuse a pipeline split the deployment or model cannot take, naming the scenario key.

    Raise ScenarioError if ``pipeline_parallel`` does not divide the nodes (a stage is a whole
    number of nodes) or exceeds the model's layers.
    """
    if num_nodes % pipeline_parallel != 0:
        raise ScenarioError(
            f"hardware.pipeline_parallel: {pipeline_parallel} must divide hardware.num_nodes "
            f"({num_nodes}): each pipeline stage is a whole number of nodes"
        )
    if pipeline_parallel > model.spec.num_layers:
        raise ScenarioError(
            f"hardware.pipeline_parallel: {pipeline_parallel} stages for {model.name}'s "
            f"{model.spec.num_layers} layers; a stage needs at least one layer"
        )


def stage_model(model: Model, pipeline_parallel: int, *, with_head: bool = True) -> Model:
    """One stage of ``model``: ``ceil(L/p)`` layers with the same mix of layer kinds; with the
    lm_head (the last stage) or without it (``with_head=False``: a vocabulary of one row)."""
    spec = model.spec
    p = pipeline_parallel
    layers = math.ceil(spec.num_layers / p)
    window = min(math.ceil(spec.num_sliding_window_layers / p), layers - 1)
    dense = math.ceil(spec.num_dense_layers / p) if spec.num_experts > 1 else 0
    update: dict[str, Any] = {
        "num_layers": layers,
        "num_sliding_window_layers": window,
        "num_dense_layers": min(dense, layers - 1) if spec.num_experts > 1 else 0,
    }
    if not with_head:
        update["vocab_size"] = 1
    stage_spec = spec.model_copy(update=update)
    stage = Model.from_spec(stage_spec, f"{model.name}/stage-of-{p}")
    return stage.with_precision(model.weight_precision, model.kv_cache_precision)


def stage_weight_bytes_per_gpu(model: Model, pipeline_parallel: int, layout: Layout) -> float:
    """Weights one GPU of the heaviest stage holds: the last stage's layers and lm_head (the
    first stage's embedding table is the same size when untied, and the last stage keeps it too
    when tied)."""
    last = stage_model(model, pipeline_parallel)
    if layout.is_single_group:
        weights = last.weight_bytes / layout.attention_tp
    else:
        weights = layout.weight_bytes_per_gpu(last)
    # The stage model counts both the embedding and the lm_head; one stage holds one of them
    # (the tied table counts once already).
    if not last.spec.tied_embeddings:
        weights -= last.embedding_params * BF16_BYTES / layout.attention_tp
    return weights


class PipelineStepCostModel(StepCostModel):
    """:class:`StepCostModel` of a ``pipeline_parallel``-stage deployment (module docstring).

    Built on the last stage (the parent class's terms, lm_head included) with a twin for the
    stages without it. ``link_bandwidth_bytes_per_s`` and ``link_latency_s`` are those of one
    GPU's path to the next stage. Raise ValueError if ``pipeline_parallel`` < 2.
    """

    def __init__(
        self,
        model: Model,
        pipeline_parallel: int,
        gpu: GPU,
        tp: int,
        *args: Any,
        link_bandwidth_bytes_per_s: float,
        link_latency_s: float,
        **kwargs: Any,
    ) -> None:
        if pipeline_parallel < 2:
            raise ValueError(f"a pipeline needs >= 2 stages, got {pipeline_parallel}")
        super().__init__(stage_model(model, pipeline_parallel), gpu, tp, *args, **kwargs)
        headless = stage_model(model, pipeline_parallel, with_head=False)
        self._mid = StepCostModel(headless, gpu, tp, *args, **kwargs)
        self.full_model = model
        self.pipeline_parallel = pipeline_parallel
        per_token = ACTIVATION_TENSORS * model.spec.hidden_size * BF16_BYTES
        self._send_s_per_token = per_token / link_bandwidth_bytes_per_s
        self._send_latency_s = link_latency_s

    def micro_batches(self, num_seqs: Any) -> FloatArray:
        """Micro-batches in flight: ``min(p, B)``, at least one."""
        b = np.asarray(num_seqs, dtype=np.float64)
        return np.maximum(np.minimum(float(self.pipeline_parallel), b), 1.0)

    def breakdown(self, shape: StepShape) -> dict[str, FloatArray]:
        """Each operator class's time along the step's critical path (module docstring): the
        stages' parts summed over one round trip, the sends counted as communication
        (``allreduce_s``), all stretched in proportion when the busiest stage is the bound."""
        p = float(self.pipeline_parallel)
        m = self.micro_batches(shape.num_seqs)
        micro = StepShape(
            num_seqs=np.asarray(shape.num_seqs, dtype=np.float64) / m,
            num_tokens=np.asarray(shape.num_tokens, dtype=np.float64) / m,
            num_logit_tokens=np.asarray(shape.num_logit_tokens, dtype=np.float64) / m,
            kv_read_tokens=np.asarray(shape.kv_read_tokens, dtype=np.float64) / m,
            attention_pairs=np.asarray(shape.attention_pairs, dtype=np.float64) / m,
        )
        last = super().breakdown(micro)
        mid = self._mid.breakdown(micro)
        send = self._send_latency_s + self._send_s_per_token * np.asarray(micro.num_tokens)
        path = {key: (p - 1.0) * mid[key] + last[key] for key in BREAKDOWN_KEYS}
        path["allreduce_s"] = path["allreduce_s"] + (p - 1.0) * send
        round_trip = total_of(path)
        total = np.maximum(round_trip, m * total_of(last))
        # Stretch the parts where the busiest stage bounds the step, keeping their sum.
        stretch = total / np.maximum(round_trip, 1e-300)
        return {key: np.asarray(path[key] * stretch, dtype=np.float64) for key in BREAKDOWN_KEYS}
