"""Time ``specsim calibrate`` on a few thousand requests and print its fit.

The real vLLM 0.19 request-timing run (300 requests, Llama-3.1-8B on one RTX PRO 6000) is repeated
back to back ``--copies`` times — each copy's arrivals and engine timestamps shifted by the run's
length plus a minute so the copies do not overlap — into a temporary folder, and calibrated with
``--gpu rtx-pro-6000``; then the four acceptance-trace files (1,410 requests) are calibrated. Both
wall times are printed with the fitted values. Usage (from the repository root, with the shared
data beside the checkout)::

    python -m benchmarks.bench_calibrate [--copies N] [--shared PATH]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from calibration.calibrate import calibrate
from calibration.hardware_efficiency import default_shared
from specsim.calibrate_command import summary_lines

TIMINGS = Path("data/vllm-artifacts/vllm_request_timings")
TRACES = Path("data/acceptance-traces/llama-3.1-8b-h100-vllm")
CLOCKS = ("queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")


def repeated_run(source: Path, copies: int, folder: Path) -> Path:
    """Write ``copies`` back-to-back repetitions of ``source/requests.jsonl`` into ``folder``."""
    records = [json.loads(line) for line in (source / "requests.jsonl").read_text().splitlines()]
    span = max(r["last_token_ts"] for r in records) - min(r["queued_ts"] for r in records) + 60.0
    lines = []
    for copy in range(copies):
        for record in records:
            shifted = dict(record, request_id=f"{record['request_id']}-{copy}")
            shifted["arrival_time"] = record["arrival_time"] + copy * span
            for key in CLOCKS:
                shifted[key] = record[key] + copy * span
            lines.append(json.dumps(shifted))
    (folder / "requests.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "meta.json").write_text((source / "meta.json").read_text())
    return folder / "requests.jsonl"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; exit status 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=10)
    parser.add_argument("--shared", type=Path, default=default_shared())
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = repeated_run(args.shared / TIMINGS, args.copies, Path(tmp))
        started = time.perf_counter()
        engine = calibrate([path], labels=["requests.jsonl"], gpu="rtx-pro-6000")
        wall = time.perf_counter() - started
    num = 300 * args.copies
    print(f"engine replay fit, {num} requests: {wall:.1f} s "
          f"({engine.document['engine']['num_simulations']} simulations)")  # fmt: skip
    print("\n".join(summary_lines(engine.document, wall)))
    files = sorted((args.shared / TRACES).glob("*.jsonl"))
    started = time.perf_counter()
    traces = calibrate(files, labels=[f.name for f in files])
    wall = time.perf_counter() - started
    print(f"\nacceptance fit, {len(files)} trace files: {wall:.1f} s")
    print("\n".join(summary_lines(traces.document, wall)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
