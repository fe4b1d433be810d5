"""Decompose the simulated engine step of the vLLM concurrency sweep's Qwen3-32B rows.

The sweep (source group ``vllm-sweep-tomasruizt``, docs/validation.md) over-predicts output
throughput from 128 clients on, in both arms. This prints, for each client count and arm (no
speculation, EAGLE-3 at k = 1, 3, 5), the simulated output throughput against the logged one and
the mean step split into the cost model's terms, with the step's shape: sequences and tokens
per step, prefill tokens, steps above vLLM's largest captured size (512 tokens: these launch
eagerly), preemptions and the prefill tokens recomputed after them; and the sequences running
and the share of the KV pool in use beside what the server logged (``LOGGED_RUNNING_KV``). Two
unpriced candidates are sized beside the miss, neither applied to the model:

* ``eager``: the target's eager launch time (``eager_launch_s_per_layer`` x layers) on every
  step above the captured size, as if the launch were not hidden behind the forward;
* ``cpu``: the per-sequence CPU work (``per_sequence_overhead_s`` x sequences) that asynchronous
  scheduling hides in the model, as if it showed in full;
* ``non-GEMM``: the decoder's elementwise operators (RMSNorms, rotary embedding, SiLU-and-mul,
  residual add) that the cost model prices only as a fixed time per layer: their bytes per token
  at the bandwidth Vidur measured them at on an H100 SXM (``VIDUR_NON_GEMM``), scaled to the
  GPU's peak, above the preset's fixed per-layer time (:func:`non_gemm_s`).

``--eager-launch added`` reruns the rows with the first candidate applied (a what-if, not the
model: every step above the captured size pays the launch time in full instead of
``max(0, launch - forward)``, :meth:`sim.host_costs.HostCostModel.launch_stall_s`).

``--non-gemm added`` reruns the rows with the third candidate added to the target's linear
layers (a what-if, not the model).

``--capture-sizes spec-rounded`` reruns the speculative arms with vLLM's capture list for
speculative decoding (a what-if; the cost model keeps the plain list): every size rounded up to a
multiple of k + 1 and kept if still within the largest, which becomes the new largest
(``CompilationConfig.adjust_cudagraph_sizes_for_spec_decode``, vllm/config/compilation.py,
v0.14.0, called by gpu_model_runner.py with ``uniform_decode_query_len`` = k + 1).

``miss/step`` is the extra time a simulated step would need for the simulated throughput to
equal the logged one with the same steps (mean step x (predicted / measured - 1)). Usage::

    python -m benchmarks.sweep_step_decomposition [--clients 64,128,256] [--k 0,1,3,5]
        [--eager-launch hidden|added] [--non-gemm hidden|added]
        [--capture-sizes default|spec-rounded]

``--k 0`` is the arm without speculation. Exit status 0: a diagnostic, not a gate.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from typing import Any

import numpy as np

from sim.catalogue import GPU, Model, get_gpu, get_model
from sim.cost_model import StepCostModel
from sim.host_costs import HostCostModel, capture_sizes, load_host_profile
from sim.run import run_scenario
from sim.validation.points import load_points
from sim.validation.scenarios import build_scenario, traces_dir
from tools.sweep_validation_points import CONCURRENCY, QWEN_BASELINE, QWEN_EAGLE3, QWEN_GPU

PRESET = "vllm-v1-async"
#: Mean TTFT and mean TPOT (ms) the same benchmark printed, per (k, clients); k = 0: no
#: speculation (tomasruizt/vllm-scripts @ d94d714, results/logs-2026-01-23/
#: vllm-throughput-InstructCoder-{nosd,sd-eagle3-Qwen3-32B-speculator.eagle3-k<k>}-t0.0-tp1/
#: 0_out.logs, "Mean TTFT (ms)" and "Mean TPOT (ms)" at each MAX_CONCURRENCY).
MEASURED_TTFT_TPOT_MS = {
    (0, 64): (306.37, 40.44),
    (0, 128): (843.76, 47.11),
    (0, 256): (2320.69, 65.43),
    (1, 64): (218.64, 28.67),
    (1, 128): (417.49, 37.46),
    (1, 256): (3053.39, 67.03),
    (3, 64): (228.12, 25.42),
    (3, 128): (419.34, 40.82),
    (3, 256): (4366.67, 70.30),
    (5, 64): (261.65, 28.56),
    (5, 128): (484.41, 52.02),
    (5, 256): (5851.31, 85.63),
}
#: What the server logged of its engine, per (k, clients): the mean of its 10 s lines'
#: ``Running: N reqs`` and ``GPU KV cache usage: P%`` over the lines of that run with at least
#: half the clients' requests in the engine (running + waiting), leaving out the ramp-down (the
#: same logs as MEASURED_TTFT_TPOT_MS). Beside them the simulation's sequences per step and
#: blocks in use over the pool, time-weighted over the steps running at least half the clients.
LOGGED_RUNNING_KV = {
    (0, 64): (61.6, 23.8),
    (0, 128): (128.0, 52.1),
    (0, 256): (224.0, 79.2),
    (1, 64): (62.3, 34.1),
    (1, 128): (124.9, 68.0),
    (1, 256): (180.9, 97.6),
    (3, 64): (63.0, 32.5),
    (3, 128): (124.2, 66.6),
    (3, 256): (178.1, 97.3),
    (5, 64): (62.3, 35.4),
    (5, 128): (125.1, 70.0),
    (5, 256): (172.2, 97.5),
}
TERMS = ("fixed_s", "linear_s", "attention_s", "sampling_s", "draft_s")
#: Vidur's H100 SXM profiles (microsoft/vidur @ 7d47513, data/profiling/compute/h100/<model>/
#: mlp.csv, MIT; one GPU): the per-layer time of the operators besides the GEMMs and attention
#: (sum of the medians of input_layernorm, attn_rope, post_attention_layernorm, mlp_act and add)
#: is flat at 0.019-0.036 ms up to ~256 tokens, then grows linearly. Per model: the slope in µs
#: per token per layer (least squares over the profile's 131 rows from 1,024 to 4,096 tokens),
#: hidden size, MLP size, query + KV heads, head size (all 128).
VIDUR_NON_GEMM = {
    "Llama-2-7b-hf": (0.10060, 4096, 11008, 32 + 32, 128),
    "internlm-20b": (0.12508, 5120, 13824, 40 + 40, 128),
    "CodeLlama-34b-Instruct-hf": (0.16841, 8192, 22016, 64 + 8, 128),
    "Llama-2-70b-hf": (0.18763, 8192, 28672, 64 + 8, 128),
    "Qwen-72B": (0.19403, 8192, 24576, 64 + 64, 128),
}
#: The GPU Vidur profiled: the catalogue's H100 SXM (HBM3).
VIDUR_GPU = "h100-sxm"


def non_gemm_bytes_per_token(
    hidden: int,
    intermediate: int,
    qk_heads: int,
    head_dim: int,
    qk_norm: bool = False,
    tp: int = 1,
) -> float:
    """bf16 bytes one token moves through one layer's elementwise operators on one GPU: two
    RMSNorms (read and write ``H``), the residual add (read ``2H``, write ``H``), rotary
    embedding in place on q and k (read and write ``(n_q + n_kv)·d``), SiLU-and-mul (read
    ``2I``, write ``I``), and Qwen3's q/k RMSNorm when present (read and write q and k again).
    Under tensor parallelism every rank normalises and adds the whole hidden state while the
    head- and MLP-wise operators are split ``tp`` ways (Megatron-LM sharding)."""
    qk = qk_heads * head_dim
    sharded = 2 * qk + 3 * intermediate + (2 * qk if qk_norm else 0)
    return 2 * (7 * hidden + sharded / tp)


def vidur_bandwidth_fractions() -> dict[str, float]:
    """Each profile's achieved bandwidth over its GPU's peak: bytes per token over the slope."""
    peak = get_gpu(VIDUR_GPU).hbm_bandwidth_bytes_per_s
    return {
        name: non_gemm_bytes_per_token(h, i, qk, d) / (slope * 1e-6) / peak
        for name, (slope, h, i, qk, d) in VIDUR_NON_GEMM.items()
    }


def non_gemm_s(
    model: Model, gpu: GPU, per_layer_s: float, num_tokens: Any, tp: int = 1
) -> np.ndarray:
    """The candidate: ``max(0, N·L·b/(f·BW) − L·t_layer)`` seconds for ``N`` tokens, with ``b``
    the model's bytes per token per layer on one GPU, ``f`` the mean achieved fraction of the
    profiles, ``BW`` the GPU's peak and ``t_layer`` the fixed per-layer time the preset already
    prices (which stands for these kernels at their floor)."""
    spec = model.spec
    qk_heads = spec.num_heads + spec.num_kv_heads
    per_token = non_gemm_bytes_per_token(
        spec.hidden_size,
        spec.intermediate_size,
        qk_heads,
        spec.head_dim,
        bool(spec.qk_norm),
        tp,
    )
    fraction = float(np.mean(list(vidur_bandwidth_fractions().values())))
    seconds = (
        np.asarray(num_tokens, dtype=np.float64)
        * per_token
        / (fraction * gpu.hbm_bandwidth_bytes_per_s)
    )
    return np.maximum(0.0, spec.num_layers * (seconds - per_layer_s))


def _row(
    clients: int, k: int, launch_s: float, per_seq_s: float, per_layer_s: float, largest: int
) -> dict[str, Any]:
    points = {p.point_id: p for p in load_points()}
    point = points[f"tomasruizt-qwen3-32b-eagle3-k{max(k, 1)}-c{clients}"]
    scenario = build_scenario(point, "none" if k == 0 else None)
    result = run_scenario(scenario, traces_dir())
    steps = {key: np.asarray(value) for key, value in result.steps.items()}
    index = CONCURRENCY.index(clients)
    measured = QWEN_BASELINE[index] if k == 0 else QWEN_EAGLE3[k][index]
    predicted = result.summary.output_throughput_tok_s
    duration = steps["duration_s"]
    tokens = steps["num_tokens"]
    fresh = (point.prompt_tokens or 0) * (point.num_requests or 0)
    eager = tokens > largest
    mean_step = float(duration.mean())
    busy = steps["num_seqs"] >= clients / 2
    weight = duration * busy
    running = float((steps["num_seqs"] * weight).sum() / weight.sum())
    kv_used = (
        float((steps["kv_blocks_used"] * weight).sum() / weight.sum()) / result.memory.num_blocks
    )
    return {
        "clients": clients,
        "k": k,
        "predicted": predicted,
        "measured": measured,
        "error": predicted / measured - 1.0,
        "ttft_ms": result.summary.ttft_ms.mean,
        "tpot_ms": result.summary.tpot_ms.mean,
        "measured_ttft_tpot": MEASURED_TTFT_TPOT_MS.get((k, clients), (float("nan"),) * 2),
        "step_ms": 1e3 * mean_step,
        **{t: 1e3 * float(steps[t].mean()) for t in TERMS},
        "seqs": float(steps["num_seqs"].mean()),
        "running": running,
        "kv_used": kv_used,
        "logged_running_kv": LOGGED_RUNNING_KV.get((k, clients), (float("nan"),) * 2),
        "tokens": float(tokens.mean()),
        "prefill": float(steps["num_prefill_tokens"].mean()),
        "eager": float(eager.mean()),
        "preemptions": result.summary.num_preemptions,
        "recomputed": int(steps["num_prefill_tokens"].sum()) - fresh,
        "miss_ms": 1e3 * mean_step * (predicted / measured - 1.0),
        "eager_ms": 1e3 * launch_s * float(eager.mean()),
        "cpu_ms": 1e3 * per_seq_s * float(steps["num_seqs"].mean()),
        "non_gemm_ms": 1e3
        * float(non_gemm_s(get_model("qwen3-32b"), get_gpu(QWEN_GPU), per_layer_s, tokens).mean()),
    }


def _launch_added(
    self: HostCostModel, forward_s: Any, graphed: Any, num_layers: int | None = None
) -> np.ndarray:
    """The what-if: an eager forward pays its whole launch time, whatever the GPU's."""
    layers = self.num_layers if num_layers is None else num_layers
    launch = self.costs.eager_launch_s_per_layer * layers
    shape = np.shape(np.asarray(forward_s, dtype=np.float64))
    return np.where(np.asarray(graphed, dtype=bool), 0.0, np.full(shape, launch))


@contextmanager
def _non_gemm_added(per_layer_s: float) -> Iterator[None]:
    """The what-if: the target's linear layers also pay the non-GEMM candidate each step."""
    original: Callable[..., None] = StepCostModel.__init__

    def init(self: StepCostModel, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if self.model.name != "qwen3-32b" or self._kernels is None:
            return
        if self._kernels.prices_linear:
            raise RuntimeError("the what-if adds to the roofline's linear_s, not a measured grid")
        linear = self.linear_s
        model, gpu = self.model, self.gpu

        def linear_s(num_tokens: Any, num_logit_tokens: Any) -> Any:
            extra = non_gemm_s(model, gpu, per_layer_s, num_tokens)
            return linear(num_tokens, num_logit_tokens) + extra

        self.linear_s = linear_s  # type: ignore[method-assign]

    StepCostModel.__init__ = init  # type: ignore[method-assign]
    try:
        yield
    finally:
        StepCostModel.__init__ = original  # type: ignore[method-assign]


def spec_rounded_sizes(sizes: Any, query_len: int, largest: int) -> list[int]:
    """vLLM's capture sizes for speculative decoding: each size rounded up to a multiple of
    ``query_len`` (k + 1), kept if still at most ``largest``; ``[query_len]`` if none is and it
    fits (``adjust_cudagraph_sizes_for_spec_decode``, vllm/config/compilation.py, v0.14.0).
    Raise ValueError if not even that fits, as vLLM does."""
    rounded = sorted({-(-int(s) // query_len) * query_len for s in sizes} - {0})
    kept = [s for s in rounded if s <= largest]
    if not kept and query_len <= largest:
        kept = [query_len]
    if not kept:
        raise ValueError(f"no capture size is a multiple of {query_len} within {largest}")
    return kept


@contextmanager
def _spec_rounded_capture(k: int) -> Iterator[None]:
    """The what-if for one arm: cost models of speculative steps capture vLLM's rounded list."""
    original: Callable[..., None] = StepCostModel.__init__

    def init(self: StepCostModel, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        host = self.host
        if not self.speculative or k == 0 or not len(host._sizes):
            return
        top = int(self.host_costs.cuda_graph_max_tokens)
        sizes = spec_rounded_sizes(host._sizes, k + 1, top)
        host._sizes = np.array(sizes, dtype=np.int64)
        self.host_costs = replace(self.host_costs, cuda_graph_max_tokens=sizes[-1])
        host.costs = self.host_costs

    StepCostModel.__init__ = init  # type: ignore[method-assign]
    try:
        yield
    finally:
        StepCostModel.__init__ = original  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="64,128,256")
    parser.add_argument("--k", default="0,1,3,5")
    parser.add_argument("--eager-launch", choices=("hidden", "added"), default="hidden")
    parser.add_argument("--non-gemm", choices=("hidden", "added"), default="hidden")
    parser.add_argument("--capture-sizes", choices=("default", "spec-rounded"), default="default")
    args = parser.parse_args()
    if args.eager_launch == "added":
        HostCostModel.launch_stall_s = _launch_added  # type: ignore[method-assign]
    costs = load_host_profile(PRESET).costs
    layers = get_model("qwen3-32b").spec.num_layers
    launch_s = costs.eager_launch_s_per_layer * layers
    per_layer_s = costs.per_layer_overhead_s
    fractions = vidur_bandwidth_fractions()
    print(
        "non-GEMM candidate: achieved fraction of peak bandwidth in Vidur's H100 profiles "
        + ", ".join(f"{name} {f:.3f}" for name, f in fractions.items())
        + f"; mean {np.mean(list(fractions.values())):.3f}"
    )
    started = time.perf_counter()
    print(
        "| clients | k | predicted tok/s | measured | error | TTFT ms (measured) | "
        "TPOT ms (measured) | step ms | fixed | linear | "
        "attention | sampling | draft | seqs/step | tokens/step | prefill tok/step | "
        "eager steps | preemptions | recomputed tok | miss/step ms | eager ms | cpu ms | "
        "non-GEMM ms | "
        "running (logged) | KV used % (logged) |"
    )
    print("|" + "---:|" * 25)
    for clients in (int(c) for c in args.clients.split(",")):
        for k in (int(v) for v in args.k.split(",")):
            largest = costs.cuda_graph_max_tokens
            with ExitStack() as stack:
                if args.capture_sizes == "spec-rounded" and k > 0:
                    largest = spec_rounded_sizes(capture_sizes(largest), k + 1, largest)[-1]
                    stack.enter_context(_spec_rounded_capture(k))
                if args.non_gemm == "added":
                    stack.enter_context(_non_gemm_added(per_layer_s))
                r = _row(clients, k, launch_s, costs.per_sequence_overhead_s, per_layer_s, largest)
            ttft, tpot = r["measured_ttft_tpot"]
            logged_running, logged_kv = r["logged_running_kv"]
            print(
                f"| {r['clients']} | {r['k']} | {r['predicted']:,.0f} | {r['measured']:,.0f} | "
                f"{100 * r['error']:+.1f}% | {r['ttft_ms']:,.0f} ({ttft:,.0f}) | "
                f"{r['tpot_ms']:.1f} ({tpot:.1f}) | {r['step_ms']:.1f} | {r['fixed_s']:.1f} | "
                f"{r['linear_s']:.1f} | {r['attention_s']:.1f} | {r['sampling_s']:.2f} | "
                f"{r['draft_s']:.1f} | {r['seqs']:.0f} | {r['tokens']:.0f} | {r['prefill']:.0f} | "
                f"{100 * r['eager']:.0f}% | {r['preemptions']} | {r['recomputed']:,} | "
                f"{r['miss_ms']:.1f} | {r['eager_ms']:.1f} | {r['cpu_ms']:.1f} | "
                f"{r['non_gemm_ms']:.1f} | "
                f"{r['running']:.0f} ({logged_running:.0f}) | "
                f"{100 * r['kv_used']:.0f} ({logged_kv:.0f}) |",
                flush=True,
            )
    print(f"wall time {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
