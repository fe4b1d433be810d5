"""Decompose the simulated engine step of the vLLM concurrency sweep's Qwen3-32B rows.

The sweep (source group ``vllm-sweep-tomasruizt``, docs/validation.md) over-predicts output
throughput from 128 clients on, in both arms. This prints, for each client count and arm (no
speculation, EAGLE-3 at k = 1, 3, 5), the simulated output throughput against the logged one and
the mean step split into the cost model's terms (``elementwise``: the decoder's elementwise
operators, :mod:`sim.elementwise`, the share of ``linear`` they take at each step's tokens before
CUDA-graph padding), with the step's shape: sequences and tokens
per step, prefill tokens, steps above vLLM's largest captured size (512 tokens: these launch
eagerly), preemptions and the prefill tokens recomputed after them; and the sequences running
and the share of the KV pool in use beside what the server logged (``LOGGED_RUNNING_KV``). Two
unpriced candidates are sized beside the miss, neither applied to the model:

* ``eager``: the target's eager launch time (``eager_launch_s_per_layer`` x layers) on every
  step above the captured size, as if the launch were not hidden behind the forward;
* ``cpu``: the per-sequence CPU work (``per_sequence_overhead_s`` x sequences) that asynchronous
  scheduling hides in the model, as if it showed in full.

``--eager-launch added`` reruns the rows with the first candidate applied (a what-if, not the
model: every step above the captured size pays the launch time in full instead of
``max(0, launch - forward)``, :meth:`sim.host_costs.HostCostModel.launch_stall_s`).

``--capture-sizes spec-rounded`` reruns the speculative arms with vLLM's capture list for
speculative decoding (a what-if; the cost model keeps the plain list): every size rounded up to a
multiple of k + 1 and kept if still within the largest, which becomes the new largest
(``CompilationConfig.adjust_cudagraph_sizes_for_spec_decode``, vllm/config/compilation.py,
v0.14.0, called by gpu_model_runner.py with ``uniform_decode_query_len`` = k + 1).

``miss/step`` is the extra time a simulated step would need for the simulated throughput to
equal the logged one with the same steps (mean step x (predicted / measured - 1)). Usage::

    python -m benchmarks.sweep_step_decomposition [--clients 64,128,256] [--k 0,1,3,5]
        [--eager-launch hidden|added]
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

from sim.catalogue import get_gpu, get_model
from sim.cost_model import StepCostModel
from sim.elementwise import BANDWIDTH_FRACTION, FRACTION_INTERVAL, ElementwiseCost
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
        "elementwise_ms": 1e3
        * float(
            ElementwiseCost(get_model("qwen3-32b"), get_gpu(QWEN_GPU), 1, per_layer_s)
            .seconds(tokens)
            .mean()
        ),
    }


def _launch_added(
    self: HostCostModel, forward_s: Any, graphed: Any, num_layers: int | None = None
) -> np.ndarray:
    """The what-if: an eager forward pays its whole launch time, whatever the GPU's."""
    layers = self.num_layers if num_layers is None else num_layers
    launch = self.costs.eager_launch_s_per_layer * layers
    shape = np.shape(np.asarray(forward_s, dtype=np.float64))
    return np.where(np.asarray(graphed, dtype=bool), 0.0, np.full(shape, launch))


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
    parser.add_argument("--capture-sizes", choices=("default", "spec-rounded"), default="default")
    args = parser.parse_args()
    if args.eager_launch == "added":
        HostCostModel.launch_stall_s = _launch_added  # type: ignore[method-assign]
    costs = load_host_profile(PRESET).costs
    layers = get_model("qwen3-32b").spec.num_layers
    launch_s = costs.eager_launch_s_per_layer * layers
    per_layer_s = costs.per_layer_overhead_s
    low, high = FRACTION_INTERVAL
    print(
        "elementwise operators: achieved fraction of peak bandwidth "
        f"{BANDWIDTH_FRACTION:.3f} ({low:.3f}-{high:.3f} over Vidur's five H100 profiles)"
    )
    started = time.perf_counter()
    print(
        "| clients | k | predicted tok/s | measured | error | TTFT ms (measured) | "
        "TPOT ms (measured) | step ms | fixed | linear | "
        "attention | sampling | draft | seqs/step | tokens/step | prefill tok/step | "
        "eager steps | preemptions | recomputed tok | miss/step ms | eager ms | cpu ms | "
        "elementwise ms | "
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
                f"{r['elementwise_ms']:.1f} | "
                f"{r['running']:.0f} ({logged_running:.0f}) | "
                f"{100 * r['kv_used']:.0f} ({logged_kv:.0f}) |",
                flush=True,
            )
    print(f"wall time {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
