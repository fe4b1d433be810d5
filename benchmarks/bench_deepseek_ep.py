"""DeepSeek-V3 on 16 H200 with expert parallelism: the simulator's own speed, printed as figures.

The case: DeepSeek-V3 (FP8 weights, MLA, 256 experts) on two nodes of 8 H200, attention TP 8 in
each node (two DP-attention groups), EP 16 across both nodes, SGLang 0.5 preset, with and without
its MTP module (k = 1), 10,000 requests with lognormal prompt/output lengths (means 1024/512) at
Poisson 40 requests/s. Each case runs in a fresh Python process, so the wall time and peak resident
memory are the whole process's (interpreter start-up, imports and scenario loading included).

Target: 10,000 requests in ≤ 30 s on a 2-core machine. The CPU time is printed beside the wall
time: on a shared machine the two differ.

Run: ``python benchmarks/bench_deepseek_ep.py`` (``--requests N`` for another count).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

CHILD = """
import json, resource, sys
from pathlib import Path
from sim.run import run_scenario
from sim.scenario import validate_document
document = json.loads(sys.argv[1])
summary = run_scenario(validate_document(document, "bench"), Path(".")).summary.to_dict()
figures = {k: summary[k] for k in ("num_steps", "num_completed", "wall_time_s")}
figures["tpot_mean_ms"] = summary["tpot_ms"]["mean"]
figures["output_tok_s"] = summary["output_throughput_tok_s"]
usage = resource.getrusage(resource.RUSAGE_SELF)
figures["peak_rss_mb"] = usage.ru_maxrss / 1024.0
figures["cpu_s"] = usage.ru_utime + usage.ru_stime
print(json.dumps(figures))
"""


def scenario(num_requests: int, method: str) -> dict[str, object]:
    """The benchmark's scenario document."""
    return {
        "name": f"bench-deepseek-v3-16xh200-ep16-{method}",
        "model": "deepseek-v3",
        "precision": {"weights": "fp8", "kv_cache": "bf16"},
        "hardware": {
            "gpu": "h200",
            "num_gpus": 8,
            "num_nodes": 2,
            "tensor_parallel": 8,
            "expert_parallel": 16,
        },
        "engine": {"preset": "sglang-0.5", "max_num_seqs": 512},
        "speculation": {"method": method, "num_speculative_tokens": 1},
        "workload": {
            "num_requests": num_requests,
            "arrival": {"process": "poisson", "rate_per_s": 40.0},
            "prompt_tokens": {"distribution": "lognormal", "mean": 1024, "sigma": 0.6},
            "output_tokens": {"distribution": "lognormal", "mean": 512, "sigma": 0.6},
            "max_prompt_tokens": 8192,
            "max_output_tokens": 4096,
        },
    }


def run_case(document: dict[str, object]) -> dict[str, float]:
    """Run one case in a fresh process; return its figures with the process's wall time."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(document)],
        check=True,
        capture_output=True,
        text=True,
    )
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    figures["process_wall_s"] = time.perf_counter() - started
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    args = parser.parse_args()
    print(f"DeepSeek-V3 FP8, 2 x 8 H200, TP 8 x DP 2 attention, EP 16; {args.requests} requests")
    print(
        f"{'method':<8} {'process s':>10} {'cpu s':>7} {'sim s':>7} {'steps':>8} "
        f"{'done':>7} {'TPOT ms':>8} {'out tok/s':>10} {'RSS MB':>7} {'<= 30 s':>8}"
    )
    for method in ("none", "mtp"):
        f = run_case(scenario(args.requests, method))
        print(
            f"{method:<8} {f['process_wall_s']:>10.1f} {f['cpu_s']:>7.1f} {f['wall_time_s']:>7.1f} "
            f"{f['num_steps']:>8.0f} {f['num_completed']:>7.0f} {f['tpot_mean_ms']:>8.2f} "
            f"{f['output_tok_s']:>10.0f} {f['peak_rss_mb']:>7.0f} "
            f"{'yes' if f['process_wall_s'] <= 30.0 else 'NO':>8}"
        )


if __name__ == "__main__":
    main()
