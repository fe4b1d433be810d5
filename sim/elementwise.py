"""The decoder's elementwise operators, priced by the bytes each token moves through them.

Besides its GEMMs and attention every decoder layer runs two RMSNorms, the rotary embedding, the
SiLU-and-mul of its MLP and a residual add (and, in Qwen3, an RMSNorm over each head of q and k).
None of them is in the GEMM grid or the attention fits. Each is a bandwidth-bound pass, so a step
of ``N`` tokens spends ``N·b/(f·BW)`` per layer on them, ``b`` the bf16 bytes a token moves through
one layer on one GPU (:func:`bytes_per_token`), ``BW`` the GPU's peak HBM bandwidth and ``f`` the
fraction of it these kernels achieve. At small ``N`` their time is a floor of launches and tails,
which the engine preset's fitted fixed time per layer (``per_layer_overhead_s``,
:mod:`sim.host_costs`) already stands for, so the step pays only what the bandwidth cost adds above
it: ``L·max(0, N·b/(f·BW) − t_layer)``.

``f`` comes from Vidur's H100 SXM profiles (microsoft/vidur @ 7d47513, MIT,
``data/profiling/compute/h100/<model>/mlp.csv``, one GPU): the sum of the medians of
``input_layernorm``, ``attn_rope``, ``post_attention_layernorm``, ``mlp_act`` and ``add`` is flat at
0.019-0.036 ms a layer up to ~256 tokens, then linear; its slope (least squares over the 131 rows
from 1,024 to 4,096 tokens, :data:`VIDUR_SLOPES`) divided into the model's bytes per token gives
the achieved bandwidth. The five models' slopes differ 1.9x, their bandwidths only 0.463-0.515 of
the H100's 3.35 TB/s (:func:`profile_fractions`): the model takes their mean, 0.490, and carries
the min-max range as its interval (:data:`FRACTION_INTERVAL`).

Scope. Dense and MoE models with GQA/MHA attention at any tensor-parallel degree, on any GPU of
the catalogue (its peak bandwidth), sliding-window layers included (their operators are a full
layer's). Under tensor parallelism every rank normalises and adds the whole hidden state; the
head- and MLP-wise operators are split ``tp`` ways (Megatron-LM sharding, Shoeybi et al.,
arXiv:1909.08053). On a MoE layer the routed experts' SiLU-and-mul is left out: it is inside the
measured ``fused_experts`` call (its activation pass, ``sim.moe_kernel.moe_activation_bytes``) and
its fit; a shared expert's is a separate dense MLP and counts. MLA models count their norms, the
residual add, the latent q and KV RMSNorms (``q_lora_rank``, ``kv_lora_rank``) and the rotary
embedding of the decoupled rope dimensions (each head's query part, one shared key part). Left
out: models with linear-attention layers (their gated-delta-net layers run other elementwise
kernels, with output gates and convolutions the spec does not size pass by pass), deployments of
several attention groups or with expert parallelism (:mod:`sim.parallel_cost`, whose tokens per
GPU differ by group), and draft networks (whose fixed overheads are fitted per engine).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sim.catalogue import GPU, Model, get_gpu

FloatArray = NDArray[np.float64]

#: bf16: bytes per element of every activation these operators read or write.
BYTES_PER_ELEMENT = 2


@dataclass(frozen=True)
class VidurProfile:
    """One model's elementwise slope in Vidur's H100 profiles, with its shape.

    ``slope_us_per_token``: µs per token per layer of the five operators' summed medians above
    their floor; ``qk_heads``: query plus KV heads."""

    slope_us_per_token: float
    hidden_size: int
    intermediate_size: int
    qk_heads: int
    head_dim: int


#: Vidur's H100 SXM profiles (microsoft/vidur @ 7d47513, ``data/profiling/compute/h100/<model>/
#: mlp.csv``, MIT; one GPU, bf16): slope of the summed medians of input_layernorm, attn_rope,
#: post_attention_layernorm, mlp_act and add against tokens (least squares over the 131 rows from
#: 1,024 to 4,096 tokens), with each model's hidden size, MLP size, query + KV heads and head
#: size (the models' configs on the Hugging Face Hub).
VIDUR_SLOPES: dict[str, VidurProfile] = {
    "Llama-2-7b-hf": VidurProfile(0.10060, 4096, 11008, 32 + 32, 128),
    "internlm-20b": VidurProfile(0.12508, 5120, 13824, 40 + 40, 128),
    "CodeLlama-34b-Instruct-hf": VidurProfile(0.16841, 8192, 22016, 64 + 8, 128),
    "Llama-2-70b-hf": VidurProfile(0.18763, 8192, 28672, 64 + 8, 128),
    "Qwen-72B": VidurProfile(0.19403, 8192, 24576, 64 + 64, 128),
}
#: The GPU Vidur profiled: the catalogue's H100 SXM (HBM3, 3.35 TB/s).
VIDUR_GPU = "h100-sxm"


def bytes_per_token(
    hidden: int,
    intermediate: float,
    qk_heads: int,
    head_dim: int,
    qk_norm: bool = False,
    tp: int = 1,
) -> float:
    """bf16 bytes one token moves through one layer's elementwise operators on one GPU.

    Two RMSNorms read and write ``H`` each; the residual add reads ``2H`` and writes ``H``
    (``7H`` in all, on every rank); the rotary embedding reads and writes q and k in place
    (``2·(n_q + n_kv)·d``), Qwen3's q/k RMSNorm the same again; SiLU-and-mul reads the gate and
    up halves and writes one (``3I``). The head- and MLP-wise part is split ``tp`` ways.
    Raise ValueError if ``tp`` < 1."""
    if tp < 1:
        raise ValueError(f"tensor-parallel degree must be >= 1, got {tp}")
    qk = qk_heads * head_dim
    sharded = 2 * qk + 3 * intermediate + (2 * qk if qk_norm else 0)
    return BYTES_PER_ELEMENT * (7 * hidden + sharded / tp)


def profile_fractions() -> dict[str, float]:
    """Each Vidur profile's achieved bandwidth as a fraction of the H100 SXM's peak: its bytes
    per token per layer (:func:`bytes_per_token`, one GPU) over its slope."""
    peak = get_gpu(VIDUR_GPU).hbm_bandwidth_bytes_per_s
    return {
        name: bytes_per_token(p.hidden_size, p.intermediate_size, p.qk_heads, p.head_dim)
        / (p.slope_us_per_token * 1e-6)
        / peak
        for name, p in VIDUR_SLOPES.items()
    }


_FRACTIONS = list(profile_fractions().values())
#: The achieved fraction of peak bandwidth the model uses: the five profiles' mean (0.490).
BANDWIDTH_FRACTION = float(np.mean(_FRACTIONS))
#: Its interval: the least and greatest of the five profiles (0.463, 0.515).
FRACTION_INTERVAL = (min(_FRACTIONS), max(_FRACTIONS))


def model_bytes_per_token(model: Model, tp: int) -> float | None:
    """Mean bytes one token moves through one layer's elementwise operators on one of ``tp``
    GPUs, averaged over the model's layers; None where the module does not price the model
    (linear-attention layers). Raise ValueError if ``tp`` < 1."""
    spec = model.spec
    if spec.num_linear_attention_layers:
        return None
    hidden = spec.hidden_size
    if spec.attention == "mla":
        # Latent q and KV RMSNorms are not split; rope on each head's decoupled query part is,
        # the single shared rope key is not (DeepSeek-V2, arXiv:2405.04434, section 2.1.3).
        rope = spec.qk_rope_head_dim or 0
        latent = 2 * ((spec.q_lora_rank or 0) + (spec.kv_lora_rank or 0)) + 2 * rope
        attention = 2 * spec.num_heads * rope / tp
        base = BYTES_PER_ELEMENT * (7 * hidden + latent + attention)
    else:
        base = bytes_per_token(
            hidden, 0, spec.num_heads + spec.num_kv_heads, spec.head_dim, spec.qk_norm, tp
        )
    # SiLU-and-mul outside the fused-MoE kernel: dense MLP layers and MoE layers' shared experts.
    num_moe = model.num_moe_layers if spec.num_experts > 1 else 0
    shared_intermediate = model.counts.shared_experts / (3 * hidden) if num_moe else 0.0
    mlp_intermediate = (
        (spec.num_layers - num_moe) * spec.intermediate_size + num_moe * shared_intermediate
    ) / spec.num_layers
    return base + BYTES_PER_ELEMENT * 3 * mlp_intermediate / tp


class ElementwiseCost:
    """The elementwise operators' time for one model on one GPU type at tensor-parallel ``tp``,
    above the preset's fixed per-layer time ``per_layer_s``.

    ``fraction``: achieved fraction of peak bandwidth (default :data:`BANDWIDTH_FRACTION`).
    ``applies`` is False where the module does not price the model (see the module's scope);
    its time is then zero. Raise ValueError if ``tp`` < 1, ``per_layer_s`` < 0 or the fraction
    is outside (0, 1]."""

    def __init__(
        self,
        model: Model,
        gpu: GPU,
        tp: int,
        per_layer_s: float,
        fraction: float = BANDWIDTH_FRACTION,
    ) -> None:
        if per_layer_s < 0:
            raise ValueError(f"per-layer time must be >= 0, got {per_layer_s}")
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"bandwidth fraction must be in (0, 1], got {fraction}")
        per_token = model_bytes_per_token(model, tp)
        self.applies = per_token is not None
        self.bytes_per_token = per_token or 0.0
        self.num_layers = model.spec.num_layers
        self.per_layer_s = per_layer_s
        self._s_per_token = self.bytes_per_token / (fraction * gpu.hbm_bandwidth_bytes_per_s)

    def seconds(self, num_tokens: ArrayLike) -> FloatArray:
        """``L·max(0, N·b/(f·BW) − t_layer)`` for steps of ``num_tokens`` tokens."""
        n = np.asarray(num_tokens, dtype=np.float64)
        per_layer = np.maximum(self._s_per_token * n - self.per_layer_s, 0.0)
        return np.asarray(self.num_layers * per_layer, dtype=np.float64)

    @property
    def floor_tokens(self) -> float:
        """Tokens a step needs before the term is positive (``t_layer·f·BW/b``; inf if none)."""
        if self._s_per_token == 0:
            return float("inf")
        return self.per_layer_s / self._s_per_token
