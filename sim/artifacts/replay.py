"""Requests of a real benchmark run, ready to be replayed by the workload generator.

A run is replayed with its own prompt and output lengths and, when the artifact recorded them, its
own arrival times: ``start_times`` of a ``vllm bench serve --save-detailed`` result (0.15+), or
``arrival_time`` of a request-timing record. Failed requests and requests that produced no token are
left out, since their wanted output length is unknown; arrivals are sorted and rebased to 0 after.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.artifacts import detect_kind, parse_artifact
from sim.errors import CalibrationError

_REPLAYABLE_KINDS = ("vllm_bench_json", "sglang_bench_jsonl", "vllm_request_timings")


@dataclass(frozen=True, eq=False)
class ReplayRequests:
    """Per-request lengths (and arrivals) of one real run, sorted by arrival when known.

    ``arrival_at_s`` is float64 starting at 0 and non-decreasing, or None when the artifact kept no
    send times (the generator then draws arrivals at ``request_rate_per_s``). ``prompt_tokens`` and
    ``output_tokens`` are int64; every output length is at least 1. ``request_rate_per_s`` is None
    for an unlimited (``inf``) or unrecorded rate. ``source`` is the file read.
    """

    arrival_at_s: np.ndarray | None
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    request_rate_per_s: float | None
    source: str

    @property
    def num_requests(self) -> int:
        """Number of requests to replay."""
        return len(self.prompt_tokens)


def read_replay_requests(path: Path) -> ReplayRequests:
    """Read the requests of a benchmark result JSON or a request-timing ``requests.jsonl``.

    Raise CalibrationError naming the file if it is neither, holds several runs, has no per-request
    ``input_lens``/``output_lens``, or has no successful request.
    """
    path = Path(path)
    kind = detect_kind(path)
    if kind not in _REPLAYABLE_KINDS:
        raise CalibrationError(
            f"{path}: expected a benchmark result JSON or a requests.jsonl to replay, found {kind}"
        )
    artifact = parse_artifact(path, kind)
    requests = artifact.requests
    if requests is None or requests.prompt_tokens is None or requests.output_tokens is None:
        raise CalibrationError(
            f"{path}: expected per-request lengths (input_lens and output_lens); the file has none "
            "(vllm bench serve drops them unless run with --save-detailed)"
        )
    keep = requests.succeeded & (requests.output_tokens >= 1)
    if not keep.any():
        raise CalibrationError(f"{path}: expected at least one successful request; found none")
    prompt = requests.prompt_tokens[keep].astype(np.int64)
    output = requests.output_tokens[keep].astype(np.int64)
    arrival = None
    if requests.arrival_at_s is not None and np.all(np.isfinite(requests.arrival_at_s[keep])):
        kept_arrival = requests.arrival_at_s[keep].astype(np.float64)
        order = np.argsort(kept_arrival, kind="stable")
        arrival = kept_arrival[order] - kept_arrival[order][0]
        prompt, output = prompt[order], output[order]
    return ReplayRequests(
        arrival_at_s=arrival,
        prompt_tokens=prompt,
        output_tokens=output,
        request_rate_per_s=artifact.metadata.request_rate_per_s,
        source=str(path),
    )
