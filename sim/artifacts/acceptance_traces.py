"""Per-request acceptance traces (``id``, ``prompt_token_ids``, ``generated_token_ids``,
``acc_<method>``).

Each line is one request; ``acc_<method>.acc_len[pos]`` is the number of tokens a verify step that
starts at output position ``pos`` would emit with a long proposal, bonus token included (so ≥ 1).
A chain of k drafts starting at ``pos`` emits ``min(acc_len[pos], k + 1)`` tokens and the next step
starts that many positions later; :func:`emitted_tokens_per_step` walks a trace that way. The
format is the one published with "Speculative Decoding: Performance or Illusion?" (Liu et al.,
MLSys 2026).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sim.artifacts.reading import count_array, failure, json_objects, read_source
from sim.artifacts.schema import AcceptanceTraces, ParsedArtifact, RunMetadata

KIND = "acceptance_traces"

_PREFIX = "acc_"


def parse_acceptance_traces(path: Path) -> ParsedArtifact:
    """Parse an acceptance-trace JSONL file into :class:`AcceptanceTraces`.

    Raise CalibrationError naming the line of a record without ``id``, token-id lists or
    ``acc_<method>.acc_len`` lists of positive integers, or whose methods differ from the first
    record's.
    """
    source = read_source(path)
    ids: list[str] = []
    prompt: list[int] = []
    output: list[int] = []
    traces: dict[str, list[np.ndarray]] = {}
    for line, record in json_objects(source):
        methods = sorted(k[len(_PREFIX) :] for k in record if k.startswith(_PREFIX))
        if "id" not in record or not methods:
            raise failure(source, "a record with 'id' and at least one 'acc_<method>' key", line)
        if traces and methods != sorted(traces):
            raise failure(
                source, f"acc_ methods {sorted(traces)} as on line 1, got {methods}", line
            )
        for key in ("prompt_token_ids", "generated_token_ids"):
            if not isinstance(record.get(key), list):
                raise failure(source, f"'{key}' to be a list of token ids", line)
        ids.append(str(record["id"]))
        prompt.append(len(record["prompt_token_ids"]))  # type: ignore[arg-type]
        output.append(len(record["generated_token_ids"]))  # type: ignore[arg-type]
        for method in methods:
            holder = record[_PREFIX + method]
            if not isinstance(holder, dict) or "acc_len" not in holder:
                raise failure(source, f"'{_PREFIX}{method}' to be an object with 'acc_len'", line)
            acc_len = count_array(holder["acc_len"], source, f"{_PREFIX}{method}.acc_len", line)
            if np.any(acc_len < 1):
                raise failure(source, f"{_PREFIX}{method}.acc_len entries of at least 1", line)
            traces.setdefault(method, []).append(acc_len)
    acceptance = AcceptanceTraces(
        request_ids=tuple(ids),
        prompt_tokens=np.asarray(prompt, dtype=np.int64),
        output_tokens=np.asarray(output, dtype=np.int64),
        acc_len={method: tuple(arrays) for method, arrays in traces.items()},
    )
    return ParsedArtifact(
        kind=KIND,
        metadata=RunMetadata(
            source_path=str(source.path), source_sha256=source.sha256, engine="vllm"
        ),
        acceptance=acceptance,
        notes=("acc_len includes the bonus token; measured with a long proposal",),
    )


def emitted_tokens_per_step(acc_len: np.ndarray, num_speculative_tokens: int) -> np.ndarray:
    """Return the tokens each verify step emits when one request's trace is replayed with k drafts.

    The step at position ``pos`` emits ``min(acc_len[pos], k + 1, len - pos)`` tokens (the last clip
    keeps the walk inside the trace). Raise ValueError if k < 0.
    """
    if num_speculative_tokens < 0:
        raise ValueError(f"num_speculative_tokens must be >= 0, got {num_speculative_tokens}")
    limit = num_speculative_tokens + 1
    lengths = acc_len.tolist()
    total = len(lengths)
    emitted: list[int] = []
    position = 0
    while position < total:
        step = min(lengths[position], limit, total - position)
        emitted.append(step)
        position += step
    return np.asarray(emitted, dtype=np.int64)


def mean_acceptance_length(
    traces: AcceptanceTraces, method: str, num_speculative_tokens: int
) -> float:
    """Return tokens emitted per verify step over all requests (token-weighted), bonus included.

    Raise ValueError naming the traced methods if ``method`` is not one of them.
    """
    if method not in traces.acc_len:
        raise ValueError(f"no traces for method {method!r}; traced: {list(traces.methods)}")
    num_tokens = num_steps = 0
    for acc_len in traces.acc_len[method]:
        steps = emitted_tokens_per_step(acc_len, num_speculative_tokens)
        num_tokens += int(steps.sum())
        num_steps += len(steps)
    return num_tokens / num_steps if num_steps else float("nan")
