"""vLLM server logs: spec-decode metric lines, ``Engine …`` stats lines and ``Iteration(…)`` lines.

Lines are recognised by their message wherever the prefix puts it, so every prefix vLLM has used
parses: ``INFO 10-16 19:05:47 metrics.py:367]`` (≤0.7), ``INFO 05-01 14:24:50 [metrics.py:101]``
(0.8+), an optional ``(APIServer pid=N)`` decoration, ANSI colour codes, or no prefix at all (then
the line has no time: NaN). The timestamp has no year; times are seconds since the first stamped
line.

One interval row is made per stats record. V1 prints the ``SpecDecoding metrics`` line right after
the ``Engine NNN`` line of the same interval, so a spec line with the same timestamp joins that row;
``Engine`` lines of several data-parallel engines at one timestamp are added up (KV usage averaged).
V0 spec counters are cumulative and are differenced between consecutive lines; a counter that goes
down marks a server restart, after which the line's values count from zero again. The output of
``examples/offline_inference/spec_decode.py`` (``num_drafts: …``, ``acceptance at token i: …``) is
read too, one row per block.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from sim.artifacts import spec_decoding_metrics as spec_lines
from sim.artifacts.log_sessions import split_sessions
from sim.artifacts.reading import Source, failure, read_source
from sim.artifacts.schema import ParsedArtifact, RunMetadata, StepTable
from sim.artifacts.tables import IntervalRow, interval_table, spec_summary_from_intervals

KIND = "vllm_log"

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STAMP = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")
_SPEC_V1 = re.compile(r"SpecDecoding metrics:(?= [A-Z][\w -]*: )(.*)$")
_SPEC_V0 = re.compile(r"Speculative metrics:(?= Draft acceptance rate: )(.*)$")
_ITERATION = re.compile(r"Engine (\d+): Iteration\((\d+)\):(.*)$")
_ENGINE = re.compile(r"(?:Engine (\d+): )?(Avg prompt throughput:.*)$")
_ITERATION_BODY = re.compile(
    r"\s*(\d+) context requests, (\d+) context tokens, (\d+) generation requests, "
    r"(\d+) generation tokens, iteration elapsed time: (\d+(?:\.\d*)?) ms( \(dummy\))?"
    r"(?:, [^,]*?KV cache usage: (\d+(?:\.\d*)?)%)?"
)
_OFFLINE = re.compile(
    r"^(total_num_output_tokens|num_drafts|num_draft_tokens|num_accepted_tokens|"
    r"mean acceptance length|acceptance at token (\d+)): ([0-9.]+)\s*$"
)
_ERAS = {
    "vllm-log-v0": "vllm V0 engine (<=0.9.2)",
    "vllm-log-v1-dev": "vllm V1 development build (2025-03)",
    "vllm-log-0.8.3": "vllm 0.8.3-0.8.4",
    "vllm-log-0.8.5": "vllm 0.8.5",
    "vllm-log-0.9.0": "vllm 0.9.0-0.10.1",
    "vllm-log-pr24127-premerge": "vllm 0.10.2 pre-release build",
    "vllm-log-0.10.2": "vllm>=0.10.2",
    "vllm-offline-example": "vllm offline spec_decode.py example",
}


def parse_vllm_log(path: Path) -> ParsedArtifact:
    """Parse a vLLM server log (or the offline spec-decode example's output) into intervals and
    steps.

    Raise CalibrationError if a recognised line is malformed (naming the line) or no line is
    recognised at all.
    """
    source = read_source(path)
    reader = _LogReader(source)
    for number, raw in enumerate(source.text.splitlines(), start=1):
        reader.feed(number, _ANSI.sub("", raw))
    if not reader.rows and not reader.steps:
        raise failure(
            source,
            "vLLM log lines ('SpecDecoding metrics:', 'Speculative metrics:', 'Engine NNN: Avg "
            "prompt throughput', 'Iteration(') or spec_decode.py output; found none",
        )
    return reader.result()


class _LogReader:
    """Accumulates rows while one file is read; lives only for one call of parse_vllm_log."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.rows: list[IntervalRow] = []
        self.steps: list[tuple[float, ...]] = []
        self.layouts: list[str] = []
        self.notes: list[str] = []
        self.first_stamp_s: float | None = None
        self.v0_previous: spec_lines.SpecLineRecord | None = None
        self.offline: IntervalRow | None = None
        self.offline_rates: list[float] = []
        self.num_spec_tokens: set[int] = set()

    def _time(self, line: str, number: int) -> float:
        match = _STAMP.search(line)
        if match is None:
            return float("nan")
        month, day, hour, minute, second = (int(g) for g in match.groups())
        try:  # 2000 is a leap year, so 02-29 is a valid stamp; only differences are used.
            stamp = datetime(2000, month, day, hour, minute, second, tzinfo=UTC).timestamp()
        except ValueError:
            raise failure(self.source, "a valid MM-DD HH:MM:SS timestamp", number) from None
        if self.first_stamp_s is None:
            self.first_stamp_s = stamp
        return stamp - self.first_stamp_s

    def feed(self, number: int, line: str) -> None:
        if (match := _SPEC_V1.search(line)) is not None:
            record = spec_lines.parse_specdecoding_body(match.group(1), self.source, number)
            self._add_spec(self._time(line, number), record)
        elif (match := _SPEC_V0.search(line)) is not None:
            record = spec_lines.parse_speculative_metrics_body(match.group(1), self.source, number)
            self._add_spec(self._time(line, number), record)
        elif (match := _ITERATION.search(line)) is not None:
            self._add_step(self._time(line, number), int(match.group(2)), match.group(3), number)
        elif (match := _ENGINE.search(line)) is not None:
            self._add_engine(self._time(line, number), match.group(1), match.group(2), number)
        elif (match := _OFFLINE.match(line.strip())) is not None:
            self._add_offline(match, number)

    def _add_spec(self, at_s: float, record: spec_lines.SpecLineRecord) -> None:
        self.layouts.append(record.layout)
        if not record.cumulative and record.num_drafts is not None:
            self.notes.append("V1 num_drafts derived as Accepted / sum(per-position rates)")
        if record.num_speculative_tokens is not None:
            self.num_spec_tokens.add(record.num_speculative_tokens)
        drafts, draft_tokens = record.num_drafts, float(record.num_draft_tokens)
        accepted = float(record.num_accepted_tokens)
        mean_length = record.mean_acceptance_length
        if record.cumulative:
            previous, self.v0_previous = self.v0_previous, record
            if previous is not None and _continues(previous, record):
                drafts = (record.num_drafts or 0.0) - (previous.num_drafts or 0.0)
                draft_tokens -= previous.num_draft_tokens
                accepted -= previous.num_accepted_tokens
                emitted = (record.num_emitted_tokens or 0) - (previous.num_emitted_tokens or 0)
                mean_length = emitted / drafts if drafts else None
            elif previous is not None:
                self.notes.append("V0 counters went down: server restart, counting from zero")
        spec: IntervalRow = {
            "num_drafts": None if drafts is None else round(drafts),
            "num_draft_tokens": draft_tokens,
            "num_accepted_tokens": accepted,
            "mean_acceptance_length": mean_length,
            "rates": record.per_position_rates,
        }
        last = self.rows[-1] if self.rows else None
        same_time = last is not None and _same_time(last.get("at_s"), at_s)
        if last is not None and same_time and "spec" not in last and "engine" in last:
            last.update(spec)
            last["spec"] = True
        else:
            self.rows.append({"at_s": at_s, "spec": True, **spec})

    def _add_engine(self, at_s: float, engine: str | None, body: str, number: int) -> None:
        fields = spec_lines.split_fields(body)
        number_of = spec_lines.number
        kv_keys = [k for k in fields if k.endswith("KV cache usage") and not k.startswith("CPU")]
        values: IntervalRow = {
            "prompt_throughput_tok_s": number_of(
                fields, "Avg prompt throughput", self.source, number
            ),
            "generation_throughput_tok_s": number_of(
                fields, "Avg generation throughput", self.source, number
            ),
            "num_running": number_of(fields, "Running", self.source, number),
            "num_waiting": number_of(
                fields, "Waiting" if "Waiting" in fields else "Pending", self.source, number
            ),
        }
        kv = number_of(fields, kv_keys[0], self.source, number) / 100.0 if kv_keys else None
        last = self.rows[-1] if self.rows else None
        engines = last.get("engine") if last is not None else None
        if (
            last is not None
            and isinstance(engines, set)
            and engine is not None
            and engine not in engines
            and "spec" not in last
            and _same_time(last.get("at_s"), at_s)
        ):
            # Another data-parallel engine's line for the same interval: add its load.
            for key, value in values.items():
                last[key] = float(last.get(key) or 0.0) + float(value)  # type: ignore[arg-type]
            kvs = last.get("kv_list")
            if kv is not None and isinstance(kvs, list):
                kvs.append(kv)
                last["kv_cache_usage"] = sum(kvs) / len(kvs)
            engines.add(engine)
            return
        row: IntervalRow = {"at_s": at_s, "engine": {engine}, **values, "kv_cache_usage": kv}
        row["kv_list"] = [] if kv is None else [kv]
        self.rows.append(row)

    def _add_step(self, at_s: float, iteration: int, body: str, number: int) -> None:
        match = _ITERATION_BODY.match(body)
        if match is None:
            raise failure(
                self.source,
                "'N context requests, N context tokens, N generation requests, N generation "
                "tokens, iteration elapsed time: X ms' after 'Iteration(N):'",
                number,
            )
        ctx_req, ctx_tok, gen_req, gen_tok, elapsed_ms, dummy, kv = match.groups()
        if max(len(ctx_req), len(ctx_tok), len(gen_req), len(gen_tok), len(str(iteration))) > 15:
            raise failure(self.source, "request and token counts below 10**15", number)
        self.steps.append(
            (
                at_s,
                float(iteration),
                float(ctx_req),
                float(ctx_tok),
                float(gen_req),
                float(gen_tok),
                float(elapsed_ms) / 1000.0,
                float(kv) / 100.0 if kv is not None else float("nan"),
                1.0 if dummy else 0.0,
            )
        )

    def _add_offline(self, match: re.Match[str], number: int) -> None:
        key, position, text = match.groups()
        try:
            value = float(text)
        except ValueError:
            raise failure(self.source, f"a number after '{key}:'", number) from None
        if key == "total_num_output_tokens" or self.offline is None:
            self.offline_rates = []
            self.offline = {"at_s": None, "offline": True, "rates": self.offline_rates}
            self.rows.append(self.offline)
            self.layouts.append("vllm-offline-example")
        if position is not None:
            if int(position) != len(self.offline_rates):
                expected = f"'acceptance at token {len(self.offline_rates)}' next"
                raise failure(self.source, expected, number)
            self.offline_rates.append(value)
        elif key != "total_num_output_tokens":
            name = "mean_acceptance_length" if key == "mean acceptance length" else key
            self.offline[name] = value

    def result(self) -> ParsedArtifact:
        for row in self.rows:
            if row.get("offline") and row.get("rates"):
                self.num_spec_tokens.add(len(row["rates"]))  # type: ignore[arg-type]
        table = interval_table(self.rows)
        layouts = sorted(set(self.layouts))
        if len(self.num_spec_tokens) > 1:
            self.notes.append(f"several k in one file: {sorted(self.num_spec_tokens)}")
        if "vllm-log-0.8.5" in layouts:
            self.notes.append("0.8.5 mean acceptance length printed without the bonus token; +1")
        steps = np.array(self.steps, dtype=np.float64).reshape(-1, 9)
        metadata = RunMetadata(
            source_path=str(self.source.path),
            source_sha256=self.source.sha256,
            engine="vllm",
            engine_era="; ".join(_ERAS[layout] for layout in layouts) or None,
            num_speculative_tokens=next(iter(self.num_spec_tokens))
            if len(self.num_spec_tokens) == 1
            else None,
        )
        return ParsedArtifact(
            kind=KIND,
            metadata=metadata,
            intervals=table,
            steps=_step_table(steps) if len(steps) else None,
            spec_decode=spec_summary_from_intervals(table, "+".join(layouts)) if layouts else None,
            notes=tuple(dict.fromkeys(self.notes)),
        )


def _continues(previous: spec_lines.SpecLineRecord, record: spec_lines.SpecLineRecord) -> bool:
    return (
        record.num_speculative_tokens == previous.num_speculative_tokens
        and record.num_draft_tokens >= previous.num_draft_tokens
        and record.num_accepted_tokens >= previous.num_accepted_tokens
        and (record.num_emitted_tokens or 0) >= (previous.num_emitted_tokens or 0)
    )


def _same_time(a: object, b: float) -> bool:
    if a is None:
        return False
    a = float(a)  # type: ignore[arg-type]
    return a == b or (np.isnan(a) and np.isnan(b))


def _step_table(steps: np.ndarray) -> StepTable:
    counts = steps[:, 1:6].astype(np.int64)
    return StepTable(
        at_s=steps[:, 0],
        iteration=counts[:, 0],
        num_context_requests=counts[:, 1],
        num_context_tokens=counts[:, 2],
        num_generation_requests=counts[:, 3],
        num_generation_tokens=counts[:, 4],
        elapsed_s=steps[:, 6],
        kv_cache_usage=steps[:, 7],
        is_dummy=steps[:, 8].astype(bool),
    )


def parse_vllm_log_sessions(path: Path) -> tuple[ParsedArtifact, ...]:
    """Parse a vLLM log into one ParsedArtifact per server session (see
    :mod:`sim.artifacts.log_sessions`), each carrying the version, model and k its start
    lines state. Sessions without metric lines are left out.

    Raise CalibrationError if no session has a recognised line, a recognised line is malformed,
    or a session's metric lines show a k other than the one its start lines state (naming the
    line).
    """
    source = read_source(path)
    lines = [_ANSI.sub("", raw) for raw in source.text.splitlines()]
    sessions = split_sessions(lines)
    runs: list[ParsedArtifact] = []
    for index, session in enumerate(sessions, start=1):
        reader = _LogReader(source)
        for number in range(session.first_line, session.last_line + 1):
            reader.feed(number, lines[number - 1])
        if not reader.rows and not reader.steps:
            continue
        seen = sorted(reader.num_spec_tokens)
        stated = session.num_speculative_tokens
        if stated is not None and seen and seen != [stated]:
            raise failure(
                source,
                f"spec-decode lines with k = {stated} as the session's start states; lines "
                f"{session.first_line}-{session.last_line} show k = {seen}",
                session.first_line,
            )
        artifact = reader.result()
        meta = artifact.metadata
        settings = dict(meta.settings)
        if len(sessions) > 1:
            settings.update(
                session=index,
                session_lines=f"{session.first_line}-{session.last_line}",
            )
        metadata = replace(
            meta,
            engine_version=session.version or meta.engine_version,
            model=session.model or meta.model,
            method=session.method or meta.method,
            num_speculative_tokens=stated if stated is not None else meta.num_speculative_tokens,
            settings=settings,
        )
        runs.append(replace(artifact, metadata=metadata))
    if not runs:
        raise failure(
            source,
            "vLLM log lines ('SpecDecoding metrics:', 'Speculative metrics:', 'Engine NNN: Avg "
            "prompt throughput', 'Iteration(') or spec_decode.py output; found none",
        )
    return tuple(runs)
