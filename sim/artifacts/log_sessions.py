"""Server sessions of a vLLM log: one file may hold several starts of the server, one after another.

A session starts at the API server's version line (``vLLM API server version 0.8.5``,
``vllm/entrypoints/openai/api_server.py``) or, when the log has no such line, at the engine's
initialisation line (``Initializing a V1 LLM engine (v0.10.1.1) with config: model='…', …``,
``vllm/v1/engine/core.py`` / ``vllm/engine/llm_engine.py``); the engine line right after a version
line belongs to that version line's session. Lines before the first start form a session of their
own. Each session's version, model and speculative settings are read from its start lines (and a
``non-default args`` line, 0.10+), so that metrics of different models or numbers of speculative
tokens ``k`` are never pooled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VERSION = re.compile(r"vLLM API server version (\S+)")
_ENGINE_INIT = re.compile(r"Initializing an? (?:V1 )?LLM engine \(v?([^)\s]+)\) with config:")
_MODEL = re.compile(r"\bmodel='([^']+)'|'model': '([^']+)'")
_K = re.compile(r"num_spec(?:ulative)?_tokens['\"]?\s*[=:]\s*(\d+)")
_METHOD = re.compile(r"\bmethod['\"]?\s*[=:]\s*['\"]([\w.-]+)['\"]")
_SPEC_SETTINGS = ("speculative_config", "SpeculativeConfig")


@dataclass
class Session:
    """Lines ``first_line``..``last_line`` (1-based, inclusive) of one server run, with what its
    start lines state (None when unstated)."""

    first_line: int
    last_line: int
    started: bool
    version: str | None = None
    model: str | None = None
    method: str | None = None
    num_speculative_tokens: int | None = None
    has_engine_line: bool = False


def split_sessions(lines: list[str]) -> list[Session]:
    """The sessions of a log's lines, in file order; one session when the log never starts."""
    sessions = [Session(1, len(lines), started=False)]
    for number, line in enumerate(lines, start=1):
        version = _VERSION.search(line)
        engine = _ENGINE_INIT.search(line)
        current = sessions[-1]
        if version is not None:
            current = _start(sessions, number)
            current.version = version.group(1)
        elif engine is not None:
            if not (current.started and current.version and not current.has_engine_line):
                current = _start(sessions, number)
            current.has_engine_line = True
            current.version = current.version or engine.group(1)
        if version is not None or engine is not None or "non-default args" in line:
            _read_settings(current, line)
    sessions[-1].last_line = len(lines)
    return sessions


def _start(sessions: list[Session], number: int) -> Session:
    previous = sessions[-1]
    previous.last_line = number - 1
    if not previous.started and previous.first_line > previous.last_line:
        sessions.pop()
    session = Session(number, number, started=True)
    sessions.append(session)
    return session


def _read_settings(session: Session, line: str) -> None:
    model = _MODEL.search(line)
    if model is not None and session.model is None:
        session.model = model.group(1) or model.group(2)
    if any(marker in line for marker in _SPEC_SETTINGS):
        spec = line[min(line.find(m) for m in _SPEC_SETTINGS if m in line) :]
        k = _K.search(spec)
        method = _METHOD.search(spec)
        if k is not None and session.num_speculative_tokens is None:
            session.num_speculative_tokens = int(k.group(1))
        if method is not None and session.method is None:
            session.method = method.group(1)
