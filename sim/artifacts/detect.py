"""Recognising an artifact's kind from its content, not its name.

JSON artifacts are told apart by their keys (looked up in the first 256 KiB); text artifacts by
counting the lines each format would claim: the kind with most wins. A folder is a request-timing
run when it holds ``requests.jsonl``.
"""

from __future__ import annotations

import re
from pathlib import Path

from sim.errors import CalibrationError

_HEAD_BYTES = 256 * 1024
_LOG_STAMP = re.compile(r"^\[\d{4}-\d\d-\d\d[ T]")
_NUMBER = r"[-+]?(?:\d[\d.]*(?:[eE][-+]?\d+)?|\.\d+|[Ii]nf|NaN)"
_JSON_SIGNATURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vllm_per_request_spec_metrics", ('"speculative_decoding"',)),
    ("acceptance_traces", ('"acc_len"',)),
    ("vllm_request_timings", ('"input_toks"', '"first_token_ts"')),
    ("specforge_jsonl", ('"acc_length"',)),
    (
        "sglang_bench_jsonl",
        (
            '"total_output_tokens_retokenized"',
            '"sharegpt_output_len"',
            '"random_input_len"',
            '"mean_e2e_latency_ms"',
            '"accept_length"',
        ),
    ),
    ("vllm_bench_json", ('"model_id"', '"request_throughput"', '"completed"')),
    ("vllm_nightly_aggregate", ('"Test name"',)),
)
_TEXT_SIGNATURES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("vllm_bench_stdout", re.compile(r"Serving Benchmark Result")),
    ("sglang_log", re.compile(r"(?:Decode|Prefill) batch[.,] ")),
    (
        "vllm_log",
        re.compile(
            r"SpecDecoding metrics: [A-Z]|Speculative metrics: Draft|Avg prompt throughput:"
            r"|Iteration\(\d+\):|^(?:num_drafts|num_accepted_tokens|acceptance at token \d+): "
        ),
    ),
    (
        "prometheus",
        re.compile(rf"^(?:# TYPE |[a-zA-Z_:][\w:]*(?:\{{[^}}]*\}})?\s+(?:\|\s*)?{_NUMBER}$)"),
    ),
)


def detect_kind(path: Path) -> str:
    """Return the kind of the artifact at ``path`` (one of ``sim.artifacts.KINDS``).

    Raise CalibrationError naming the file when it cannot be read or matches no known format.
    """
    path = Path(path)
    if path.is_dir():
        if (path / "requests.jsonl").exists():
            return "vllm_request_timings"
        raise CalibrationError(f"{path}: expected a file, or a folder holding requests.jsonl")
    if path.name in ("meta.json", "timeseries.csv") and (path.parent / "requests.jsonl").exists():
        return "vllm_request_timings"
    try:
        with path.open("rb") as handle:
            head = handle.read(_HEAD_BYTES).decode("utf-8", errors="replace")
    except OSError as exc:
        raise CalibrationError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    lines = [line.strip() for line in head.splitlines()]
    first = next((line for line in lines if line and not line.startswith("#")), "")
    if first.startswith("{") or (first.startswith("[") and not _LOG_STAMP.match(first)):
        for kind, signatures in _JSON_SIGNATURES:
            if any(signature in head for signature in signatures):
                return kind
        raise CalibrationError(
            f"{path}: expected a known JSON artifact (vLLM/SGLang benchmark result, acceptance "
            "traces, request timings, per-request spec metrics); no known keys found"
        )
    scores = {
        kind: sum(1 for line in lines if pattern.search(line)) for kind, pattern in _TEXT_SIGNATURES
    }
    best = max(scores, key=lambda kind: scores[kind])
    if scores[best] == 0:
        raise CalibrationError(
            f"{path}: expected a vLLM/SGLang log, a Prometheus scrape, a benchmark console report "
            "or a JSON artifact; recognised none"
        )
    return best
