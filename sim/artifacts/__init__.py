"""Parsers of real vLLM and SGLang serving artifacts, each returning the normalised schema.

:func:`parse_artifact` recognises a file by its content (or takes ``kind`` from :data:`KINDS`) and
returns one :class:`~sim.artifacts.schema.ParsedArtifact`; :func:`parse_runs` returns every run of a
file that holds several (appended benchmark results, SGLang JSON Lines, a Prometheus file with
several models). The individual parsers are exported too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sim.artifacts.acceptance_traces import (
    emitted_tokens_per_step,
    mean_acceptance_length,
    parse_acceptance_traces,
)
from sim.artifacts.bench_console import parse_bench_console
from sim.artifacts.bench_serving import parse_bench_serving_json
from sim.artifacts.detect import detect_kind
from sim.artifacts.nightly_benchmark import parse_nightly_results
from sim.artifacts.per_request_spec_metrics import parse_per_request_spec_metrics
from sim.artifacts.physics import check_artifact
from sim.artifacts.prometheus import parse_prometheus, parse_prometheus_scrapes
from sim.artifacts.request_timings import parse_request_timings
from sim.artifacts.schema import ParsedArtifact
from sim.artifacts.sglang_bench_serving import (
    parse_sglang_bench_serving,
    parse_specforge_results,
)
from sim.artifacts.sglang_log import parse_sglang_log
from sim.artifacts.vllm_log import parse_vllm_log, parse_vllm_log_sessions
from sim.errors import CalibrationError

__all__ = [
    "KINDS",
    "detect_kind",
    "emitted_tokens_per_step",
    "mean_acceptance_length",
    "parse_acceptance_traces",
    "parse_artifact",
    "parse_bench_console",
    "parse_bench_serving_json",
    "parse_nightly_results",
    "parse_per_request_spec_metrics",
    "parse_prometheus",
    "parse_prometheus_scrapes",
    "parse_request_timings",
    "parse_runs",
    "parse_sglang_bench_serving",
    "parse_sglang_log",
    "parse_specforge_results",
    "parse_vllm_log",
    "parse_vllm_log_sessions",
]


def _one(parser: Callable[[Path], ParsedArtifact]) -> Callable[[Path], tuple[ParsedArtifact, ...]]:
    return lambda path: (parser(path),)


# The one table from kind name to parser; every parser returns all runs of the file.
_PARSERS: dict[str, Callable[[Path], tuple[ParsedArtifact, ...]]] = {
    "vllm_bench_json": parse_bench_serving_json,
    "vllm_bench_stdout": parse_bench_console,
    "vllm_nightly_aggregate": parse_nightly_results,
    "vllm_log": parse_vllm_log_sessions,
    "prometheus": parse_prometheus,
    "vllm_per_request_spec_metrics": _one(parse_per_request_spec_metrics),
    "vllm_request_timings": _one(parse_request_timings),
    "sglang_log": _one(parse_sglang_log),
    "sglang_bench_jsonl": parse_sglang_bench_serving,
    "specforge_jsonl": parse_specforge_results,
    "acceptance_traces": _one(parse_acceptance_traces),
}
KINDS: tuple[str, ...] = tuple(_PARSERS)
"""The artifact kinds understood, as accepted by ``kind=``."""


def parse_runs(path: Path, kind: str | None = None) -> tuple[ParsedArtifact, ...]:
    """Parse every run in ``path``; ``kind`` (one of KINDS) skips content detection.

    Raise CalibrationError if the kind is unknown, cannot be detected, or the file is malformed.
    """
    path = Path(path)
    if kind is None:
        kind = detect_kind(path)
    elif kind not in _PARSERS:
        raise CalibrationError(f"{path}: unknown artifact kind {kind!r}; known: {', '.join(KINDS)}")
    # Every run is checked for values no real run can produce (sim/artifacts/physics.py).
    runs = tuple(check_artifact(run) for run in _PARSERS[kind](path))
    if not runs:
        raise CalibrationError(f"{path}: expected at least one run of kind {kind}; found none")
    return runs


def parse_artifact(path: Path, kind: str | None = None) -> ParsedArtifact:
    """Parse the single run in ``path``; ``kind`` (one of KINDS) skips content detection.

    Raise CalibrationError if the file is malformed, of unknown kind, or holds several runs (use
    :func:`parse_runs` for those).
    """
    runs = parse_runs(path, kind)
    if len(runs) > 1:
        raise CalibrationError(
            f"{path}: expected one run, found {len(runs)} ({runs[0].kind}); "
            "read them with sim.artifacts.parse_runs"
        )
    return runs[0]
