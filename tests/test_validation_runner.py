"""Each expressible point becomes a valid scenario of its setup; the rest say why not; the
fitted/out-of-sample split follows ``fitted_by`` and nothing else."""

from __future__ import annotations

import dataclasses

import pytest

from sim.errors import SpecsimError
from sim.model_names import resolve_model_name
from sim.run import run_scenario
from sim.validation import (
    build_scenario,
    inexpressible_reason,
    load_points,
    resolve_regimes,
    run_points,
)
from sim.validation.scenarios import (
    CONSTANT_RATE_CV,
    EXPRESSIBLE_PRECISIONS,
    RATE_DRIVEN,
    traces_dir,
)


def test_every_expressible_point_builds_a_scenario_of_its_setup() -> None:
    built = 0
    for point in load_points():
        if inexpressible_reason(point):
            continue
        scenario = build_scenario(point)
        built += 1
        assert scenario.hardware.num_gpus == point.num_gpus
        assert scenario.hardware.gpu == point.gpu
        # A row names its model as the source did (a catalogue name, a Hugging Face id or a
        # quantized checkpoint's id); the scenario holds the catalogue entry it resolves to.
        assert scenario.model == resolve_model_name(point.model)
        assert scenario.speculation.method == point.method
        assert scenario.precision.kv_cache == (point.kv_cache or "bf16"), point.point_id
        # The harness's warm-up runs first and stays out of the statistics, as the source's did;
        # so does a prompt pool's first pass.
        warmup = (point.warmup_requests or 0) + (point.prompt_pool or 0)
        assert scenario.workload.num_requests == (point.num_requests or 0) + warmup
        assert scenario.measurement.warmup_requests == warmup
        arrival = scenario.workload.arrival
        if point.arrival == "closed_loop":
            assert arrival.concurrency == point.concurrency  # type: ignore[union-attr]
        elif point.arrival == "constant":
            assert arrival.rate_per_s == point.rate_per_s  # type: ignore[union-attr]
            assert arrival.cv == CONSTANT_RATE_CV  # type: ignore[union-attr]
        steady = scenario.measurement.window == "steady"
        assert steady == (point.arrival in RATE_DRIVEN), point.point_id
        # Multi-turn harnesses (MT-Bench's two questions) run as sessions, every turn counted.
        sessions = scenario.workload.sessions
        turns = sessions.num_turns if sessions is not None else 1
        assert turns == (point.num_turns or 1), point.point_id
        if point.quantity == "speedup":
            assert build_scenario(point, method="none").speculation.method == "none"
    assert built >= 150


def test_an_underloaded_constant_rate_point_serves_its_offered_load() -> None:
    """In a stable open system the long-run output rate is the offered one, rate x output tokens
    (Little's law applied to tokens): the steady window measures that, where the full window of
    a short run loses the drain (12.6% here, a 5 s request in a 35 s run)."""
    point = next(
        p
        for p in load_points()
        if p.point_id == "blis-llama-2-70b-hf-tp4-codegen-stage_0-throughput"
    )
    assert point.rate_per_s is not None and point.output_tokens is not None
    offered = point.rate_per_s * point.output_tokens
    steady = run_scenario(build_scenario(point), traces_dir()).summary
    assert steady.output_throughput_tok_s == pytest.approx(offered, rel=0.03)
    # The drain's weight in a 30 s run, measured on the same stage without its prompt pool's
    # first pass (which would lengthen the run).
    scenario = build_scenario(dataclasses.replace(point, prompt_pool=None))
    full = type(scenario).model_validate(
        {**scenario.model_dump(exclude={"measurement"}), "name": "full-window"}
    )
    drained = run_scenario(full, traces_dir()).summary.output_throughput_tok_s
    assert drained < 0.9 * offered


def test_inexpressible_points_give_their_reason() -> None:
    for point in load_points():
        reason = inexpressible_reason(point)
        if point.precision not in EXPRESSIBLE_PRECISIONS:
            assert reason
        if resolve_model_name(point.model) is None:
            assert reason
        if reason:
            with pytest.raises(ValueError, match="not expressible"):
                build_scenario(point)


def test_an_fp8_kv_cache_halves_the_kv_reads_of_a_point() -> None:
    """A point whose engine ran an FP8 KV cache reads one byte per element where bf16 reads two:
    at 128 clients with 4,000-token prompts and 2,000 output tokens the decode steps are bound by
    the KV read, so TPOT drops by a large part of that half; a KV format the cost model does not
    price is a reason, not a silent bf16."""
    point = next(
        p
        for p in load_points()
        if p.point_id == "aic-llama-3.1-8b-vllm-4000x2000-c128-tp1-h200-tpot"
    )
    assert point.kv_cache == "fp8"
    small = dataclasses.replace(point, num_requests=128, warmup_requests=None)
    fp8 = run_scenario(build_scenario(small), traces_dir()).summary.tpot_ms.mean
    bf16_point = dataclasses.replace(small, kv_cache="")
    bf16 = run_scenario(build_scenario(bf16_point), traces_dir()).summary.tpot_ms.mean
    assert fp8 < 0.85 * bf16
    assert "KV cache 'int4'" in inexpressible_reason(dataclasses.replace(point, kv_cache="int4"))


def test_fitted_split_is_exactly_the_fitted_by_column() -> None:
    points = [p for p in load_points() if p.source_group == "llmservingsim-ispass"]
    marked = {points[0].point_id}
    points = [
        dataclasses.replace(p, fitted_by="a test fit") if p.point_id in marked else p
        for p in points
    ]
    results = run_points(points)
    assert {r.point_id for r in results if r.is_fitted} == marked
    assert all(r.predicted is not None for r in results)
    assert {r.point_id for r in results} == {p.point_id for p in points}


def test_a_group_runs_alone_and_batch1_only_when_asked() -> None:
    results = run_points(regimes=["moe"])
    assert results and {r.regime for r in results} == {"moe"}
    assert resolve_regimes(["under-load"]) == ("batch", "tp", "moe", "serving", "speculation")
    with pytest.raises(SpecsimError, match="unknown regime 'fast'"):
        resolve_regimes(["fast"])


def test_identical_runs_give_identical_predictions() -> None:
    ids = [p.point_id for p in load_points() if p.source_group == "llmservingsim-ispass"]
    first = run_points(point_ids=ids)
    second = run_points(point_ids=ids)
    assert [r.predicted for r in first] == [r.predicted for r in second]
