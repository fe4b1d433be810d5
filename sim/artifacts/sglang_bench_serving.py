"""SGLang benchmark results: ``sglang.bench_serving`` JSON Lines and SpecForge's sweep summaries.

``python -m sglang.bench_serving --output-file`` appends one JSON object per run. Its key names
differ from vLLM's (``*_e2e_latency_ms`` for ``*_e2el_ms``, ``total_throughput`` for
``total_token_throughput``, ``accept_length`` for the acceptance length); the vLLM names are added
to the aggregates so both engines' results read alike. ``accept_length`` is SGLang's server-side
average since the last cache flush (``avg_spec_accept_length``), bonus token included.
``request_rate`` may be ``"trace"`` (a replayed trace: no single rate). ``--output-details`` adds
the same per-request arrays vLLM writes.

SpecForge's ``dev_result.jsonl`` holds one object per SGLang EAGLE-3 run: ``steps`` (draft depth),
``topk``, ``num_draft_tokens`` (tree size), ``acc_length``, ``duration``, ``throughput`` and
``completion_tokens``.
"""

from __future__ import annotations

from pathlib import Path

from sim.artifacts.bench_serving import request_table_from_arrays
from sim.artifacts.reading import (
    Source,
    as_count,
    as_float,
    failure,
    json_objects,
    rate_per_s,
    read_source,
)
from sim.artifacts.schema import ParsedArtifact, RunMetadata, SettingValue, SpecDecodeSummary

KIND = "sglang_bench_jsonl"
SPECFORGE_KIND = "specforge_jsonl"

_VLLM_NAMES = {"total_throughput": "total_token_throughput"}
_SPECFORGE_KEYS = ("steps", "topk", "num_draft_tokens", "acc_length")


def parse_sglang_bench_serving(path: Path) -> tuple[ParsedArtifact, ...]:
    """Parse an SGLang ``bench_serving`` output file into one ParsedArtifact per JSON line.

    Raise CalibrationError if a line is not a JSON object with SGLang's result keys.
    """
    source = read_source(path)
    return tuple(_bench_run(source, line, result) for line, result in json_objects(source))


def _optional_count(result: dict[str, object], key: str, source: Source, line: int) -> int | None:
    value = result.get(key)
    return None if value is None else as_count(value, source, key, line)


def _bench_run(source: Source, line: int, result: dict[str, object]) -> ParsedArtifact:
    if "completed" not in result or "duration" not in result:
        raise failure(
            source, "an SGLang bench_serving result with 'completed' and 'duration'", line
        )
    notes: list[str] = []
    aggregates: dict[str, float] = {}
    for key, value in result.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            aggregates[key] = float(value)
            vllm_key = _VLLM_NAMES.get(key, key.replace("_e2e_latency_ms", "_e2el_ms"))
            aggregates.setdefault(vllm_key, float(value))
    rate = result.get("request_rate")
    if rate == "trace":
        notes.append("request_rate 'trace': arrivals followed a trace, no single rate")
        rate = None
    accept = result.get("accept_length")
    server_info = result.get("server_info")
    info = server_info if isinstance(server_info, dict) else {}
    steps = info.get("speculative_num_steps")
    tp = info.get("tp_size")
    settings: dict[str, SettingValue] = {k: v for k, v in result.items() if isinstance(v, str)}
    settings.update(
        {
            f"server_info.{k}": v
            for k, v in info.items()
            if k.startswith("speculative_") and isinstance(v, str | int | float | bool)
        }
    )
    metadata = RunMetadata(
        source_path=str(source.path),
        source_sha256=source.sha256,
        engine="sglang",
        engine_version=str(info["version"]) if isinstance(info.get("version"), str) else None,
        engine_era="sglang>=0.5.23 (server_info)" if info else "sglang bench_serving",
        method=str(info["speculative_algorithm"]).lower()
        if isinstance(info.get("speculative_algorithm"), str)
        else None,
        num_speculative_tokens=None if steps is None else as_count(steps, source, "steps", line),
        model=str(info["model_path"]) if isinstance(info.get("model_path"), str) else None,
        tensor_parallel_size=None if tp is None else as_count(tp, source, "tp_size", line),
        request_rate_per_s=rate_per_s(rate, source, "request_rate", line),
        max_concurrency=_optional_count(result, "max_concurrency", source, line),
        settings=settings,
    )
    spec = (
        None
        if accept is None
        else SpecDecodeSummary(
            layout="sglang-bench-serving",
            mean_acceptance_length=as_float(accept, source, "accept_length", line),
        )
    )
    return ParsedArtifact(
        kind=KIND,
        metadata=metadata,
        requests=request_table_from_arrays(result, source, line, notes),
        spec_decode=spec,
        aggregates=aggregates,
        notes=tuple(notes),
    )


def parse_specforge_results(path: Path) -> tuple[ParsedArtifact, ...]:
    """Parse SpecForge's JSONL acceptance sweep into one ParsedArtifact per configuration.

    Raise CalibrationError if a line lacks ``steps``, ``topk``, ``num_draft_tokens`` or
    ``acc_length``.
    """
    source = read_source(path)
    runs = []
    for line, result in json_objects(source):
        missing = [key for key in _SPECFORGE_KEYS if key not in result]
        if missing:
            raise failure(
                source, f"SpecForge result keys {list(_SPECFORGE_KEYS)}, missing {missing}", line
            )
        settings = {
            key: as_count(result[key], source, key, line)
            for key in ("topk", "num_draft_tokens", "batch_size")
            if result.get(key) is not None
        }
        benchmark = result.get("benchmark")
        aggregates = {
            name: as_float(result[key], source, key, line)
            for key, name in (
                ("duration", "duration"),
                ("throughput", "output_throughput"),
                ("completion_tokens", "total_output_tokens"),
            )
            if result.get(key) is not None
        }
        metadata = RunMetadata(
            source_path=str(source.path),
            source_sha256=source.sha256,
            engine="sglang",
            engine_era="SpecForge benchmark on SGLang",
            num_speculative_tokens=as_count(result["steps"], source, "steps", line),
            max_concurrency=settings.get("batch_size"),
            settings={**settings, "benchmark": str(benchmark) if benchmark is not None else None},
        )
        spec = SpecDecodeSummary(
            layout="specforge-jsonl",
            mean_acceptance_length=as_float(result["acc_length"], source, "acc_length", line),
        )
        runs.append(
            ParsedArtifact(
                kind=SPECFORGE_KIND,
                metadata=metadata,
                spec_decode=spec,
                aggregates=aggregates,
                notes=("steps is the draft depth; num_draft_tokens the verified tree size",),
            )
        )
    return tuple(runs)
