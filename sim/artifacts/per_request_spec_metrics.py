"""vLLM per-request speculative-decoding metrics (``metrics.speculative_decoding``, 0.30+).

With ``--per-request-spec-decode-metrics summary|detailed`` each response (or the final streaming
usage chunk) carries ``mean_acceptance_length`` (bonus included), ``draft_acceptance_rate``,
``acceptance_histogram`` (index j = verify steps that accepted exactly j drafts, length k + 1),
``num_spec_steps``, ``num_accepted_draft_tokens``, ``num_draft_tokens`` and ``num_spec_tokens`` (k).
Every ``"speculative_decoding": {…}`` object in the file is read, so saved responses, JSON Lines of
responses and responses quoted amid other text all work; the counts are summed over them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from sim.artifacts.reading import Source, as_count, failure, read_source
from sim.artifacts.schema import ParsedArtifact, RunMetadata, SpecDecodeSummary

KIND = "vllm_per_request_spec_metrics"

_OBJECT_START = re.compile(r'"speculative_decoding"\s*:\s*\{')


def parse_per_request_spec_metrics(path: Path) -> ParsedArtifact:
    """Sum every per-request ``speculative_decoding`` object in the file into one summary.

    Raise CalibrationError if an object does not decode or lacks its counts, or there is none.
    """
    source = read_source(path)
    decoder = json.JSONDecoder()
    steps = drafted = accepted = 0
    histogram: list[int] = []
    ks: set[int] = set()
    num_objects = 0
    for match in _OBJECT_START.finditer(source.text):
        line = source.text.count("\n", 0, match.start()) + 1
        try:
            value, _ = decoder.raw_decode(source.text, match.end() - 1)
        except (ValueError, RecursionError):
            raise failure(source, "a JSON object after '\"speculative_decoding\":'", line) from None
        steps_i, drafted_i, accepted_i = _counts(value, source, line)
        steps, drafted, accepted = steps + steps_i, drafted + drafted_i, accepted + accepted_i
        bins = value.get("acceptance_histogram")
        if bins is not None:
            if not isinstance(bins, list):
                raise failure(source, "acceptance_histogram to be a list of counts", line)
            counts = [as_count(b, source, "acceptance_histogram", line) for b in bins]
            histogram.extend([0] * (len(counts) - len(histogram)))
            for index, c in enumerate(counts):
                histogram[index] += c
        if value.get("num_spec_tokens") is not None:
            ks.add(as_count(value["num_spec_tokens"], source, "num_spec_tokens", line))
        num_objects += 1
    if num_objects == 0:
        raise failure(source, "at least one '\"speculative_decoding\": {...}' object")
    spec = SpecDecodeSummary(
        layout="vllm-per-request-0.30",
        num_drafts=steps,
        num_draft_tokens=drafted,
        num_accepted_tokens=accepted,
        mean_acceptance_length=1.0 + accepted / steps if steps else None,
        draft_acceptance_rate=accepted / drafted if drafted else None,
        acceptance_histogram=tuple(histogram) if histogram else None,
        per_position_acceptance_rate=_survival(histogram, steps),
    )
    return ParsedArtifact(
        kind=KIND,
        metadata=RunMetadata(
            source_path=str(source.path),
            source_sha256=source.sha256,
            engine="vllm",
            engine_era="vllm>=0.30 (per-request spec metrics)",
            num_speculative_tokens=next(iter(ks)) if len(ks) == 1 else None,
        ),
        spec_decode=spec,
        aggregates={"num_requests": float(num_objects)},
        notes=(f"summed over {num_objects} per-request object(s)",),
    )


def _survival(histogram: list[int], steps: int) -> tuple[float, ...] | None:
    """Unconditional per-position rates from the histogram: rate[i] = P(accepted > i)."""
    if not histogram or sum(histogram) != steps or steps == 0:
        return None
    return tuple(sum(histogram[i + 1 :]) / steps for i in range(len(histogram) - 1))


def _counts(value: object, source: Source, line: int) -> tuple[int, int, int]:
    if not isinstance(value, dict):
        raise failure(source, "a JSON object after '\"speculative_decoding\":'", line)
    keys = ("num_spec_steps", "num_draft_tokens", "num_accepted_draft_tokens")
    missing = [key for key in keys if key not in value]
    if missing:
        raise failure(source, f"speculative_decoding keys {list(keys)}, missing {missing}", line)
    steps, drafted, accepted = (as_count(value[key], source, key, line) for key in keys)
    return steps, drafted, accepted
