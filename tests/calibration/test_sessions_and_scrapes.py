"""Before/after Prometheus scrapes are differenced (a counter that goes down is refused), and a vLLM
log is split at each server start, each session fitted on its own and never pooled across k."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calibration.aggregate import aggregate_experiment
from calibration.calibrate import calibrate
from sim.artifacts import parse_prometheus_scrapes, parse_runs
from sim.artifacts.log_sessions import split_sessions
from sim.errors import CalibrationError


def _scrape(drafts: float, draft_tokens: float, accepted: float, per_pos: list[float]) -> str:
    lines = [
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}',
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {draft_tokens}',
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}',
    ]
    for position, count in enumerate(per_pos):
        lines.append(
            "vllm:spec_decode_num_accepted_tokens_per_pos_total"
            f'{{engine="0",model_name="m",position="{position}"}} {count}'
        )
    return "\n".join(lines) + "\n"


def test_two_scrapes_are_differenced_into_the_run_between_them(tmp_path: Path) -> None:
    before = tmp_path / "before.prom"
    after = tmp_path / "after.prom"
    before.write_text(_scrape(100, 300, 150, [80, 50, 20]))
    after.write_text(_scrape(300, 900, 350, [230, 90, 30]))
    (run,) = parse_prometheus_scrapes([before, after], strict=True)
    assert run.spec_decode is not None
    assert run.spec_decode.num_drafts == 200 and run.spec_decode.num_accepted_tokens == 200
    # Per-position rates of the difference: (150, 40, 10) accepted over 200 drafts.
    assert run.spec_decode.per_position_acceptance_rate == pytest.approx((0.75, 0.2, 0.05))
    result = calibrate([before, after])
    (record,) = result.document["provenance"]["inputs"]
    assert record["file"] == f"{before} -> {after}"
    entry = next(iter(result.document["acceptance"].values()))
    assert entry["mean_acceptance_length"] == pytest.approx(2.0)


def test_a_counter_that_goes_down_between_scrapes_is_refused_naming_file_and_metric(
    tmp_path: Path,
) -> None:
    before = tmp_path / "before.prom"
    after = tmp_path / "after.prom"
    before.write_text(_scrape(300, 900, 350, [230, 90, 30]))
    after.write_text(_scrape(100, 300, 150, [80, 50, 20]))
    with pytest.raises(CalibrationError) as info:
        parse_prometheus_scrapes([before, after], strict=True)
    message = str(info.value)
    assert str(after) in message and "vllm:spec_decode_num_drafts_total" in message
    with pytest.raises(CalibrationError, match="restarted"):
        calibrate([before, after])


def _spec(k: int, accepted: int, stamp: str = "10:00:10") -> str:
    rates = ", ".join(["0.500"] * k)
    return (
        f"INFO 05-01 {stamp} [metrics.py:9] SpecDecoding metrics: Mean acceptance length: "
        f"{1 + 0.5 * k:.2f}, Accepted throughput: 2.00 tokens/s, Drafted throughput: 6.00 "
        f"tokens/s, Accepted: {accepted} tokens, Drafted: {accepted * 2} tokens, Per-position "
        f"acceptance rate: {rates}, Avg Draft acceptance rate: 50.0%\n"
    )


def _start(version: str, k: int, model: str = "meta-llama/Llama-3.1-8B-Instruct") -> str:
    return (
        f"INFO 05-01 10:00:00 [api_server.py:1] vLLM API server version {version}\n"
        f"INFO 05-01 10:00:01 [core.py:2] Initializing a V1 LLM engine (v{version}) with config: "
        f"model='{model}', speculative_config=SpeculativeConfig(method='eagle3', "
        f"model='yuhuili/EAGLE3', num_spec_tokens={k}), seed=0\n"
    )


def _two_session_log() -> str:
    return (
        "some banner before any start\n"
        + _start("0.10.1.1", 3)
        + _spec(3, 30)
        + _start("0.11.0", 5)
        + _spec(5, 50)
        + _spec(5, 40, "10:00:20")
    )


def test_a_log_is_split_at_each_server_start_with_its_version_and_k(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text(_two_session_log())
    sessions = split_sessions(path.read_text().splitlines())
    assert [(s.first_line, s.version, s.num_speculative_tokens) for s in sessions] == [
        (1, None, None),
        (2, "0.10.1.1", 3),
        (5, "0.11.0", 5),
    ]
    runs = parse_runs(path)
    assert [r.metadata.num_speculative_tokens for r in runs] == [3, 5]
    assert [r.metadata.engine_version for r in runs] == ["0.10.1.1", "0.11.0"]
    assert runs[1].spec_decode is not None and runs[1].spec_decode.num_accepted_tokens == 90
    result = calibrate([path])
    entries = result.document["acceptance"]
    assert sorted(e["num_speculative_tokens"] for e in entries.values()) == [3, 5]
    runs_recorded = [i["run"] for i in result.document["provenance"]["inputs"]]
    assert runs_recorded == ["server session, lines 2-4", "server session, lines 5-8"]


def test_a_session_whose_lines_contradict_its_stated_k_is_refused_naming_the_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "server.log"
    path.write_text(_start("0.11.0", 3) + _spec(5, 50))
    with pytest.raises(CalibrationError, match=r"server.log:1\b|line 1\b") as info:
        parse_runs(path)
    assert "k = 3" in str(info.value)


def test_several_k_without_a_start_between_them_are_not_pooled(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text(_spec(3, 30) + _spec(5, 50, "10:00:20"))
    with pytest.raises(CalibrationError, match="split per server session") as info:
        calibrate([path])
    assert str(path) in str(info.value)


_AGGREGATE = (
    '{"date": "20260101-000000", "backend": "vllm", "model_id": "m", "num_prompts": 40, '
    '"request_rate": 4.0, "burstiness": 1.0, "max_concurrency": null, "duration": 10.5, '
    '"completed": 40, "total_input_tokens": 8000, "total_output_tokens": 2400, '
    '"request_throughput": 3.8, "output_throughput": 228.0, "mean_ttft_ms": 30.0, '
    '"median_ttft_ms": 28.0, "p99_ttft_ms": 60.0, "mean_tpot_ms": 9.0, "median_tpot_ms": 8.9, '
    '"p99_tpot_ms": 11.0, "mean_itl_ms": 9.0, "median_itl_ms": 8.8, "p99_itl_ms": 14.0}\n'
)
_ALPHABET = st.sampled_from([*'{}[]",:.0123456789-eE \nabcINfnt_', "\x00"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_aggregate_results_rebuild_or_fail_cleanly(data: st.DataObject) -> None:
    text = _AGGREGATE
    for _ in range(data.draw(st.integers(1, 5))):
        at = data.draw(st.integers(0, len(text)))
        piece = data.draw(st.text(alphabet=_ALPHABET, max_size=4))
        text = text[:at] + piece + text[at + data.draw(st.integers(0, 3)) :]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "result.json"
        path.write_text(text, encoding="utf-8")
        with contextlib.suppress(CalibrationError):
            for run in parse_runs(path):
                experiment = aggregate_experiment(run, str(path), "h100-sxm", "llama-3.1-8b", 1)
                assert experiment.measured and experiment.document["workload"]["num_requests"] >= 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_multi_session_logs_parse_or_fail_cleanly(data: st.DataObject) -> None:
    text = _two_session_log()
    for _ in range(data.draw(st.integers(1, 5))):
        at = data.draw(st.integers(0, len(text)))
        piece = data.draw(st.text(alphabet=_ALPHABET, max_size=4))
        text = text[:at] + piece + text[at + data.draw(st.integers(0, 3)) :]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "server.log"
        path.write_text(text, encoding="utf-8")
        with contextlib.suppress(CalibrationError):
            runs = parse_runs(path, "vllm_log")
            assert runs


_CONSOLE = """Traffic request rate: inf
Burstiness factor: 1.0 (Poisson process)
Maximum request concurrency: 4
============ Serving Benchmark Result ============
Successful requests:                     16
Maximum request concurrency:             4
Total input tokens:                      3200
Total generated tokens:                  960
Mean TPOT (ms):                          9.10
==================================================
Traffic request rate: 2.0 RPS.
Burstiness factor: 0.5 (Gamma distribution)
Maximum request concurrency: None
============ Serving Benchmark Result ============
Successful requests:                     16
Total input tokens:                      3200
Total generated tokens:                  960
Mean TTFT (ms):                          20.66
==================================================
"""


def test_the_console_prelude_says_how_to_rebuild_each_reports_arrivals(tmp_path: Path) -> None:
    path = tmp_path / "stdout.txt"
    path.write_text(_CONSOLE, encoding="utf-8")
    closed, gamma = (
        aggregate_experiment(run, str(path), "h100-sxm", "llama-3.1-8b", 1).document["workload"]
        for run in parse_runs(path)
    )
    assert closed["arrival"] == {"process": "closed_loop", "concurrency": 4}
    assert gamma["arrival"] == pytest.approx({"process": "gamma", "rate_per_s": 2.0, "cv": 2**0.5})
    assert closed["prompt_tokens"] == {"distribution": "fixed", "value": 200}
    assert closed["output_tokens"] == {"distribution": "fixed", "value": 60}
