"""Peak memory, wall time and output size of ``specsim run`` at growing request counts.

Each size runs as its own ``python -m specsim run`` process (default scenario, default outputs,
stderr to a file so progress comes as lines), and ``os.wait4`` gives that process's own peak
resident set.
Printed per size: the pre-run estimate (steps, GB, time), the steps the run took, wall time, peak
RSS, and the bytes of each file written.

    python3 -m benchmarks.bench_scale 10000 100000 1000000

Issue 15's target: 1,000,000 requests with default outputs in <= 1 GB peak, records written as they
go. Timings are inflated when the machine is shared.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from sim.scale import WALL_S_PER_REQUEST, WALL_S_PER_STEP, estimate_run
from sim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]


def measure(num_requests: int, folder: Path) -> dict[str, object]:
    """Run the default scenario with ``num_requests`` requests in a child process."""
    scenario, base_dir = load_scenario(None, [f"workload.num_requests={num_requests}"])
    estimate = estimate_run(scenario, base_dir)
    out = folder / f"run-{num_requests}"
    log = folder / f"stderr-{num_requests}.txt"
    command = [
        sys.executable, "-m", "specsim", "run", "--yes", "--out", str(out),
        "--set", f"workload.num_requests={num_requests}",
    ]  # fmt: skip
    started = time.perf_counter()
    with log.open("w") as stderr:
        child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr)
        _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    if status != 0:
        raise SystemExit(f"{num_requests} requests: exit status {status}; see {log}")
    sizes = {path.name: path.stat().st_size for path in sorted(out.iterdir())}
    steps_file = out / "steps.parquet"
    steps = len(pd.read_parquet(steps_file, columns=["step"])) if steps_file.is_file() else None
    return {
        "requests": num_requests,
        "est_steps": estimate.num_steps,
        "steps": steps,
        "est_GB": round(estimate.record_bytes / 1e9, 3),
        "est_wall_s": None if estimate.wall_s is None else round(estimate.wall_s, 1),
        "wall_s": round(wall, 1),
        "peak_rss_GB": round(usage.ru_maxrss * 1024 / 1e9, 3),  # ru_maxrss is in KiB on Linux
        "output_MB": {name: round(size / 1e6, 1) for name, size in sizes.items()},
        "progress_lines": sum(1 for line in log.read_text().splitlines() if "simulating:" in line),
    }


def main() -> None:
    sizes = [int(arg) for arg in sys.argv[1:]] or [10_000, 100_000]
    with tempfile.TemporaryDirectory() as folder:
        rows = [measure(n, Path(folder)) for n in sizes]
    frame = pd.DataFrame(rows).set_index("requests")
    with pd.option_context("display.width", 200, "display.max_colwidth", 120):
        print(frame.to_string())
    measured = [r for r in rows if r["steps"]]
    if measured:
        per_step = [
            (float(r["wall_s"]) - int(r["requests"]) * WALL_S_PER_REQUEST) / int(r["steps"])
            for r in measured
        ]
        print(f"wall time per step: {', '.join(f'{v * 1e6:.1f} us' for v in per_step)} "
              f"(sim.scale.WALL_S_PER_STEP = {WALL_S_PER_STEP * 1e6:.1f} us)")  # fmt: skip


if __name__ == "__main__":
    main()
