"""The results table of vLLM's nightly serving benchmark scripts (``benchmark_results.json``).

A JSON list with one row per test, keyed by the column titles of the nightly report: ``Test name``
(e.g. ``tp8_pp1_qps_04``), ``GPU``, ``# of req.``, ``Tput (req/s)``, ``Output Tput (tok/s)``,
``Total Tput (tok/s)`` and ``Mean|Median|P99 TTFT|TPOT|ITL (ms)``. Each row becomes one run whose
aggregates use the result-JSON key names; tensor-parallel size and request rate are read from the
test name when it follows the ``tp<N>_…_qps_<rate>`` pattern.
"""

from __future__ import annotations

import re
from pathlib import Path

from sim.artifacts.bench_console import percentile_key
from sim.artifacts.reading import as_float, failure, json_documents, rate_per_s, read_source
from sim.artifacts.schema import ParsedArtifact, RunMetadata

KIND = "vllm_nightly_aggregate"

_COLUMNS = {
    "# of req.": "num_prompts",
    "Tput (req/s)": "request_throughput",
    "Output Tput (tok/s)": "output_throughput",
    "Total Tput (tok/s)": "total_token_throughput",
}
_TP = re.compile(r"(?:^|_)tp(\d+)(?:_|$)")
_QPS = re.compile(r"qps_(\d+(?:\.\d+)?|inf)(?:_|$)")


def parse_nightly_results(path: Path) -> tuple[ParsedArtifact, ...]:
    """Parse a nightly-benchmark results table into one ParsedArtifact per test row.

    Raise CalibrationError if the file is not a JSON list of objects with a ``Test name``.
    """
    source = read_source(path)
    documents = json_documents(source)
    line, table = documents[0]
    if len(documents) != 1 or not isinstance(table, list) or not table:
        raise failure(source, "one JSON list of nightly-benchmark rows", line)
    runs = []
    for index, row in enumerate(table):
        if not isinstance(row, dict) or not isinstance(row.get("Test name"), str):
            raise failure(source, f"row {index} to be an object with a 'Test name'", line)
        name = row["Test name"]
        aggregates: dict[str, float] = {}
        for column, value in row.items():
            key = _COLUMNS.get(column) or percentile_key(column)
            if key is not None:
                aggregates[key] = as_float(value, source, f"row {index} '{column}'", line)
        tp, qps = _TP.search(name), _QPS.search(name)
        gpu = row.get("GPU")
        runs.append(
            ParsedArtifact(
                kind=KIND,
                metadata=RunMetadata(
                    source_path=str(source.path),
                    source_sha256=source.sha256,
                    engine="vllm",
                    engine_era="vllm nightly benchmark table",
                    tensor_parallel_size=int(tp.group(1)) if tp else None,
                    gpu=gpu if isinstance(gpu, str) else None,
                    request_rate_per_s=rate_per_s(qps.group(1), source, "qps", line)
                    if qps
                    else None,
                    settings={"test_name": name},
                ),
                aggregates=aggregates,
            )
        )
    return tuple(runs)
