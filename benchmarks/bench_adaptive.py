"""Adaptive speculation: what a per-step policy costs the simulator, and what it gains.

``speed``: one scenario run with a fixed k and with each adaptive policy, same seed; the CPU time
of the run (build and simulate, in this process) and the ratio to the fixed-k run. Target: an
adaptive run costs at most 1.5 times the fixed-k run. The CPU time is printed beside the wall
time: on a shared machine the two differ.

``sweep``: a scenario whose ``speculation.policy`` is set, run over a load sweep with every
fixed k (0 = no speculation, up to ``num_speculative_tokens``) and with its policy, on the same
arrivals and lengths (common random numbers); the mean TPOT of each, the best fixed k per load,
the best single fixed k over the sweep (lowest mean TPOT summed over the loads), and the
policy's gain over both.

Run: ``python benchmarks/bench_adaptive.py speed`` and
``python benchmarks/bench_adaptive.py sweep scenarios/lib-adaptive-goodput-wins.yaml``.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sim.run import run_scenario  # noqa: E402
from sim.scenario import validate_document  # noqa: E402

#: The speed case: the shipped chat scenario on SGLang at a busy load (many stretches).
SPEED_SCENARIO = "scenarios/spec-chat-eagle3.yaml"
SPEED_POLICIES: tuple[dict[str, Any], ...] = (
    {"name": "sglang-ema"},
    {"name": "oracle"},
    {"name": "goodput"},
)


def _run(document: dict[str, Any]) -> tuple[dict[str, Any], float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    summary = run_scenario(validate_document(document, "bench"), REPO).summary
    return summary, time.perf_counter() - wall, time.process_time() - cpu


def speed(num_requests: int, rate: float) -> None:
    base = yaml.safe_load((REPO / SPEED_SCENARIO).read_text())
    base["workload"]["num_requests"] = num_requests
    base["workload"]["arrival"]["rate_per_s"] = rate
    base["engine"] = {"preset": "sglang"}
    base["speculation"]["allow_unsupported"] = True  # goodput and oracle are what-if policies
    _run(copy.deepcopy(base))  # warm the caches (traces, tables) before timing
    _, fixed_wall, fixed_cpu = _run(copy.deepcopy(base))
    print(f"{SPEED_SCENARIO} on sglang, {num_requests} requests at {rate}/s")
    print(f"{'arm':<14} {'wall s':>8} {'cpu s':>8} {'cpu / fixed':>12}")
    print(f"{'fixed k=3':<14} {fixed_wall:8.2f} {fixed_cpu:8.2f} {1.0:12.2f}")
    for policy in SPEED_POLICIES:
        document = copy.deepcopy(base)
        document["speculation"]["policy"] = policy
        _, wall, cpu = _run(document)
        print(f"{policy['name']:<14} {wall:8.2f} {cpu:8.2f} {cpu / fixed_cpu:12.2f}")


def sweep(path: Path, rates: list[float], num_requests: int) -> None:
    base = yaml.safe_load(path.read_text())
    base["workload"]["num_requests"] = num_requests
    policy = base["speculation"]["policy"]
    k_max = int(base["speculation"].get("num_speculative_tokens", 3))
    ks = list(range(k_max + 1))
    table: dict[float, dict[str, float]] = {}
    for rate in rates:
        row: dict[str, float] = {}
        for k in ks:
            document = copy.deepcopy(base)
            document["workload"]["arrival"]["rate_per_s"] = rate
            spec = document["speculation"]
            spec.pop("policy")
            if k == 0:
                document["speculation"] = {"method": "none"}
            else:
                spec["num_speculative_tokens"] = k
            row[f"k={k}"] = _run(document)[0]["tpot_ms"]["mean"]
        document = copy.deepcopy(base)
        document["workload"]["arrival"]["rate_per_s"] = rate
        summary = _run(document)[0]
        row[policy["name"]] = summary["tpot_ms"]["mean"]
        row["batch"] = summary["mean_batch_size"]
        table[rate] = row
    single = min(ks, key=lambda k: sum(table[r][f"k={k}"] for r in rates))
    print(f"{path.name}: mean TPOT (ms), {num_requests} requests per point")
    header = " ".join(f"{f'k={k}':>7}" for k in ks)
    print(f"{'rate/s':>7} {'batch':>6} {header} {policy['name']:>12} {'best k':>7} "
          f"{'vs best k':>10} {f'vs k={single}':>9}")  # fmt: skip
    for rate in rates:
        row = table[rate]
        best = min(ks, key=lambda k: row[f"k={k}"])
        adaptive = row[policy["name"]]
        cells = " ".join(f"{row[f'k={k}']:7.2f}" for k in ks)
        gain_best = 100.0 * (row[f"k={best}"] - adaptive) / row[f"k={best}"]
        gain_single = 100.0 * (row[f"k={single}"] - adaptive) / row[f"k={single}"]
        print(f"{rate:7.1f} {row['batch']:6.1f} {cells} {adaptive:12.2f} {best:7d} "
              f"{gain_best:+9.1f}% {gain_single:+8.1f}%")  # fmt: skip
    print(f"best single fixed k over the sweep: k={single}; gains: TPOT saved (positive = better)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    fast = sub.add_parser("speed")
    fast.add_argument("--requests", type=int, default=3000)
    fast.add_argument("--rate", type=float, default=16.0)
    grid = sub.add_parser("sweep")
    grid.add_argument("scenario", type=Path)
    grid.add_argument("--rates", default="2,8,32,96")
    grid.add_argument("--requests", type=int, default=400)
    args = parser.parse_args()
    if args.command == "speed":
        speed(args.requests, args.rate)
    else:
        rates = [float(value) for value in args.rates.split(",")]
        sweep(args.scenario.resolve(), rates, args.requests)


if __name__ == "__main__":
    main()
