"""Fuzzing: truncated, mutated or random input gives a parse or a CalibrationError, never more."""

from __future__ import annotations

import contextlib
import importlib.util
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.artifacts import KINDS, parse_runs
from sim.artifacts.replay import read_replay_requests
from sim.errors import CalibrationError

# The samples live in this folder's conftest; tests import in importlib mode, so load it by path.
_spec = importlib.util.spec_from_file_location(
    "parser_samples", Path(__file__).with_name("conftest.py")
)
assert _spec is not None and _spec.loader is not None
_samples = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_samples)
SAMPLES = _samples.SAMPLES
write_artifact = _samples.write_artifact

_ALPHABET = st.sampled_from([*'{}[]",:.0123456789-eE \n#|%()=abcINfnt_', "\x00", "é"])


@st.composite
def damaged(draw: st.DrawFn, kind: str) -> str:
    """A sample of ``kind`` truncated, with characters replaced, inserted or deleted, or random."""
    sample = SAMPLES[kind]
    mode = draw(st.sampled_from(["truncate", "mutate", "random"]))
    if mode == "random":
        return draw(st.text(alphabet=_ALPHABET, max_size=300))
    if mode == "truncate":
        return sample[: draw(st.integers(0, len(sample)))]
    text = sample
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(text)))
        piece = draw(st.text(alphabet=_ALPHABET, max_size=4))
        cut = draw(st.integers(0, 3))
        text = text[:at] + piece + text[at + cut :]
    return text


def _only_clean_errors(kind: str, text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = write_artifact(Path(folder), kind, text)
        for call in (
            lambda: parse_runs(path, kind),
            lambda: parse_runs(path),
            lambda: read_replay_requests(path),
        ):
            with contextlib.suppress(CalibrationError):
                call()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_input_gives_only_clean_errors(data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(KINDS))
    _only_clean_errors(kind, data.draw(damaged(kind)))


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=30, deadline=None, database=None)
@given(data=st.data())
def test_every_kind_survives_its_own_damage(kind: str, data: st.DataObject) -> None:
    # A fixed number of damaged samples per kind, so no kind is left unfuzzed by chance.
    _only_clean_errors(kind, data.draw(damaged(kind)))
