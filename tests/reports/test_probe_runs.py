"""A seed's runs at one rate as stages of one paused simulation: the longest stage is the run
a fresh start gives, and a shorter stage reads what the whole run says of its requests."""

from __future__ import annotations

from typing import Any

import pytest

import sim.engine.compiled_loop as compiled_loop
from reports.probe_runs import run_probe
from reports.probes import PROBE_TRIM_FRACTIONS, ProbeRan, probe_document
from reports.slo import parse_slo
from reports.stability import judge_run
from reports.worker_pool import Slot
from sim.run import run_scenario
from sim.scenario import validate_document
from tests.reports.conftest import ROOT, small_document

TARGETS = parse_slo("ttft_p99_ms<=300,tpot_p50_ms<=15")
#: Near the chat scenario's eagle3 capacity, so the queue is busy and requests wait.
RATE_PER_S = 20.0


@pytest.fixture(autouse=True, params=["compiled loop", "python path"])
def _path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways a run steps: the compiled loop (many steps as one event, so it must stop where
    a staged run pauses) and the Python path."""
    if request.param == "compiled loop":
        monkeypatch.setattr(compiled_loop, "MIN_REQUESTS", 0)
        monkeypatch.setattr(compiled_loop, "MIN_REQUESTS_SPECULATIVE", 0)
    else:
        monkeypatch.setattr(compiled_loop, "for_node", lambda *args: None)


def _document(num_requests: int) -> dict[str, Any]:
    return probe_document(small_document(), RATE_PER_S, 3, num_requests)


def _probe(num_requests: int, slot: Slot | None, longest: int) -> ProbeRan:
    outcome = run_probe(_document(num_requests), str(ROOT), "test", TARGETS,
                        max_requests=longest, slot=slot)  # fmt: skip
    assert isinstance(outcome, ProbeRan)
    return outcome


def test_the_longest_stage_is_the_run_a_fresh_start_gives() -> None:
    slot = Slot()
    stages = [_probe(n, slot, 1200) for n in (300, 1200)]
    assert slot.value is None  # the run ended: nothing is kept
    fresh = _probe(1200, None, 1200)
    assert stages[-1].judgement == fresh.judgement
    assert {k: v for k, v in stages[-1].summary.items() if k != "wall_time_s"} == {
        k: v for k, v in fresh.summary.items() if k != "wall_time_s"
    }
    # The second stage simulated only the requests after the first.
    assert [s.simulated_requests for s in stages] == [300, 900]
    assert fresh.simulated_requests == 1200


def test_a_stage_reads_what_the_whole_run_says_of_its_first_requests() -> None:
    # Requests finished in the past do not change, and a request arriving after the window's
    # end cannot enter it: the stage's verdict is the one the whole run gives its first 400
    # requests (an open loop numbers requests in order of arrival).
    stage = _probe(400, Slot(), 1200)
    whole = run_scenario(validate_document(_document(1200), "test"), ROOT)
    first = {name: column[:400] for name, column in whole.requests.items()}
    assert stage.judgement == judge_run(first, whole.steps, TARGETS, PROBE_TRIM_FRACTIONS)
    # Its window ends where a 400-request run's would: at the arrival of its 361st request.
    assert stage.judgement["window_s"][1] == first["arrival_at_s"][400 - round(0.1 * 400)]
