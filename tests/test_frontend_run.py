"""The front end inside whole runs: off it changes nothing, on it shifts TTFT and E2E by the
serving path while TPOT and ITL keep their meaning, and a saturated front end queues."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from calibration.frontend_fit import fitted_values, scenario_for, shipped_frontend
from calibration.frontend_rows import ROWS
from sim.engine.presets import preset_names
from sim.errors import ScenarioError
from sim.run import REQUEST_COLUMNS, ScenarioResult, build_simulation, execute, resolved_document
from sim.scenario import validate_document


def _run(frontend: dict[str, Any], **workload: Any) -> ScenarioResult:
    document = {
        "seed": 3,
        "engine": {"frontend": frontend},
        "speculation": {"method": "eagle3", "num_speculative_tokens": 3},
        "workload": {
            "num_requests": 60,
            "arrival": {"process": "poisson", "rate_per_s": 6.0},
            "prompt_tokens": {"distribution": "uniform", "low": 20, "high": 900},
            "output_tokens": {"distribution": "uniform", "low": 1, "high": 200},
            **workload,
        },
    }
    return execute(build_simulation(validate_document(document, "frontend"), Path(".")))


def _same_records(a: ScenarioResult, b: ScenarioResult) -> None:
    for name in REQUEST_COLUMNS:
        np.testing.assert_array_equal(a.requests[name], b.requests[name], err_msg=name)
    for name in a.steps:
        np.testing.assert_array_equal(a.steps[name], b.steps[name], err_msg=name)


ZERO = {"ingress_fixed_s": 0.0, "ingress_per_prompt_token_s": 0.0, "egress_per_chunk_s": 0.0}
CLOSED = {"arrival": {"process": "closed_loop", "concurrency": 3}}


@pytest.mark.parametrize("workload", [{}, CLOSED], ids=["open", "closed"])
def test_disabled_front_end_is_exactly_a_zero_front_end(workload: dict[str, Any]) -> None:
    off = _run({"enabled": False}, **workload)
    zero = _run({"enabled": True, **ZERO}, **workload)
    _same_records(off, zero)
    np.testing.assert_array_equal(off.requests["engine_arrival_at_s"], off.requests["arrival_at_s"])


def test_one_client_at_a_time_sees_ingress_and_egress_in_ttft_but_not_in_tpot() -> None:
    frontend = {
        "enabled": True,
        "ingress_fixed_s": 0.004,
        "ingress_per_prompt_token_s": 2e-6,
        "egress_per_chunk_s": 0.003,
    }
    lone = {"arrival": {"process": "closed_loop", "concurrency": 1}}
    on, off = _run(frontend, **lone), _run({"enabled": False}, **lone)
    prompt = on.requests["prompt_tokens"]
    service = 0.004 + 2e-6 * prompt
    ttft_on = on.requests["first_token_at_s"] - on.requests["arrival_at_s"]
    ttft_off = off.requests["first_token_at_s"] - off.requests["arrival_at_s"]
    np.testing.assert_allclose(ttft_on - ttft_off, service + 0.003, rtol=0, atol=1e-9)
    np.testing.assert_allclose(
        on.requests["engine_arrival_at_s"] - on.requests["arrival_at_s"], service, atol=1e-9
    )
    assert on.summary.tpot_ms.mean == pytest.approx(off.summary.tpot_ms.mean, rel=1e-9)
    assert on.summary.itl_ms.p50 == pytest.approx(off.summary.itl_ms.p50, rel=1e-9)
    # The client sends its next request when it has seen the last token of the previous one.
    np.testing.assert_allclose(
        on.requests["arrival_at_s"][1:], on.requests["finished_at_s"][:-1], atol=1e-9
    )


def test_a_saturated_front_end_queues_requests_before_the_engine() -> None:
    slow = {"enabled": True, **ZERO, "ingress_fixed_s": 0.25}  # 4 req/s capacity at 6 req/s
    result = _run(slow)
    engine = result.requests["engine_arrival_at_s"]
    client = result.requests["arrival_at_s"]
    assert (np.diff(engine) >= 0.25 - 1e-12).all()
    assert (engine >= client + 0.25 - 1e-12).all()
    waits = engine - client - 0.25
    assert waits[-10:].mean() > waits[:10].mean() + 1.0  # the queue grows without bound


def test_the_resolved_scenario_writes_out_the_front_end_and_the_preset_an_alias_meant() -> None:
    scenario = validate_document(
        {"engine": {"preset": "sglang", "frontend": {"egress_per_chunk_s": 0.001}}}, "t"
    )
    simulation = build_simulation(scenario, Path("."))
    document = resolved_document(scenario, simulation.engine)
    assert document["engine"]["preset"] == "sglang-0.5"
    assert document["engine"]["frontend"]["egress_per_chunk_s"] == 0.001
    assert document["engine"]["frontend"]["enabled"] is True


def test_a_negative_front_end_time_names_its_key() -> None:
    with pytest.raises(ScenarioError, match=r"engine\.frontend\.ingress_fixed_s"):
        validate_document({"engine": {"frontend": {"ingress_fixed_s": -0.001}}}, "t")
    with pytest.raises(ScenarioError, match=r"engine\.frontend\.ingres_fixed_s"):
        validate_document({"engine": {"frontend": {"ingres_fixed_s": 0.001}}}, "t")


def test_shipped_front_ends_are_the_current_calibration() -> None:
    expected = fitted_values()
    for name in preset_names():
        assert shipped_frontend(name) == expected[name], name


def test_every_ttft_row_replays_as_its_run_was_driven() -> None:
    roles = {row.role for row in ROWS}
    assert roles == {"fit", "check"}
    for row in ROWS:
        scenario = scenario_for(row, {})
        arrival = scenario.workload.arrival
        if row.concurrency:
            assert arrival.process == "closed_loop" and arrival.concurrency == row.concurrency
        else:
            assert arrival.process == "gamma" and arrival.rate_per_s == row.rate_per_s
        assert scenario.engine.preset == row.preset
        assert row.source and row.measured_ttft_s > 0
        # inference-perf's shared-prefix generator sent each inference-sim run's pool in turn
        # (the training runs' resolved configs: 100 prompts; the sim-to-real runs' workload
        # specs: system prompts x users): replayed from that pool, measured past its first pass.
        prefix = scenario.workload.prefix
        if row.source.startswith("inference-sim/"):
            assert row.preset == "vllm-v1-async"  # vLLM 0.15.1, stated for every run
            assert prefix is not None and prefix.order == "cycle"
            assert prefix.num_shared_prefixes == row.prompt_pool > 0
            assert prefix.shared_prefix_tokens == row.prompt_tokens - 1
            assert scenario.measurement.warmup_requests >= row.prompt_pool
            if row.source.startswith("inference-sim/training"):
                assert row.prompt_pool == 100
        else:
            assert prefix is None and row.prompt_pool == 0
    # Out-of-sample rows come from other repositories than every fit row.
    fit_sources = {row.source.split("@")[0] for row in ROWS if row.role == "fit"}
    other = [row for row in ROWS if row.check_kind.startswith("other source")]
    assert other and all(row.source.split("@")[0] not in fit_sources for row in other)
