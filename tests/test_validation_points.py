"""The shipped measured points: every one parses, has a source and the unit of its quantity, and
matches the public data it was transcribed from."""

from __future__ import annotations

import csv
import importlib.util
import io
from pathlib import Path

import pytest

from sim.errors import CalibrationError
from sim.validation.points import QUANTITY_UNITS, default_points_path, load_points
from sim.validation.scenarios import (
    REGIMES,
    inexpressible_reason,
    regime_of,
    scenario_document,
    traces_dir,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT / ".." / "shared" / "data"


def test_every_point_has_a_source_a_unit_and_a_positive_value() -> None:
    points = load_points()
    assert len(points) >= 200
    for point in points:
        assert point.source.strip(), point.point_id
        assert point.unit == QUANTITY_UNITS[point.quantity], point.point_id
        assert point.measured > 0, point.point_id
        assert point.source_group, point.point_id


def test_every_regime_but_batch1_has_points() -> None:
    regimes = {regime_of(p) for p in load_points()}
    assert regimes == set(REGIMES) - {"batch-1"}


def test_closed_loop_silicon_points_run_as_the_sources_harness_did() -> None:
    # ai-dynamo/aiconfigurator's benchmark template (bench_run.sh.j2 @ 095f58a51c) runs aiperf at
    # concurrency c with --num-requests c*20 after --warmup-request-count c*2, which aiperf leaves
    # out of its statistics; a point that carries a warm-up must say where it comes from.
    silicon = [p for p in load_points() if p.source_group == "aiconfigurator-silicon"]
    assert silicon
    for point in silicon:
        assert point.arrival == "closed_loop", point.point_id
        assert point.concurrency is not None
        assert point.num_requests == 20 * point.concurrency, point.point_id
        assert point.warmup_requests == 2 * point.concurrency, point.point_id
        assert "bench_run.sh.j2" in point.notes, point.point_id
    for point in load_points():
        if point.warmup_requests:
            assert "warm-up" in point.notes, point.point_id


def test_pooled_points_replay_their_pool_in_turn_past_its_first_pass() -> None:
    # inference-perf's shared-prefix generator sends its prompts in turn: inference-sim/training's
    # resolved configs read 10 groups x 10 prompts, the sim-to-real runs' workload specs
    # num_unique_system_prompts x num_users_per_system_prompt. Each distinct prompt is one shared
    # prefix of all its tokens but the last, the prefixes come in order, and the pool's first
    # pass is run before the measured requests and left out. Both studies ran vLLM 0.15.1 with
    # prefix caching on, so every such row runs on the async-scheduling preset.
    pooled = [p for p in load_points() if p.prompt_pool]
    assert {p.source_group for p in pooled} == {"blis-training", "blis-sim-to-real"}
    assert len([p for p in pooled if p.source_group == "blis-training"]) == sum(
        1 for p in load_points() if p.source_group == "blis-training"
    )
    for point in pooled:
        assert point.preset == "vllm-v1-async" and point.engine == "vLLM 0.15.1", point.point_id
        pool = point.prompt_pool
        assert pool is not None
        assert f"{pool} distinct prompts" in point.notes, point.point_id
        if point.source_group == "blis-training":
            assert pool == 100
        if inexpressible_reason(point):
            continue
        document = scenario_document(point)
        workload, measurement = document["workload"], document["measurement"]
        assert point.prompt_tokens is not None and point.num_requests is not None
        assert workload["prefix"] == {
            "num_shared_prefixes": pool,
            "shared_prefix_tokens": point.prompt_tokens - 1,
            "order": "cycle",
        }
        assert workload["prompt_tokens"] == {"distribution": "fixed", "value": 1}
        assert workload["num_requests"] == point.num_requests + pool
        assert measurement["warmup_requests"] == pool


@pytest.mark.skipif(
    not SHARED_DATA.is_dir(), reason="the public measurements are not beside the checkout"
)
def test_sim_to_real_pools_are_their_workload_specs() -> None:
    # Every per-stage sim-to-real row's pool is its experiment's spec: system prompts x users.
    path = SHARED_DATA / "under-load" / "blis_h100_vllm_serving" / "sim_to_real_ground_truth.csv"
    spec = {}
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            if row["question_len"] and int(row["stage_index"]) >= 0:
                spec[row["experiment"]] = int(float(row["num_unique_system_prompts"])) * int(
                    float(row["num_users_per_system_prompt"])
                )
    stages = [
        p
        for p in load_points()
        if p.source_group == "blis-sim-to-real"
        and not p.point_id.endswith(("-all-tpot", "-all-ttft"))
    ]
    assert stages
    for point in stages:
        experiment = next(e for e in spec if point.point_id.startswith(f"s2r-{e}-"))
        assert point.prompt_pool == spec[experiment], point.point_id


def test_trace_points_name_a_shipped_trace() -> None:
    for point in load_points():
        if point.arrival == "trace":
            assert (traces_dir() / point.trace).is_file(), point.point_id


def _rewrite(tmp_path: Path, change: dict[str, str], line: int = 0) -> Path:
    rows = list(csv.DictReader(default_points_path().read_text().splitlines()))
    rows[line].update(change)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path = tmp_path / "points.csv"
    path.write_text(buffer.getvalue())
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"source": ""}, "column source is empty"),
        ({"unit": ""}, "column unit is empty"),
        ({"unit": "s"}, "got unit 's'"),
        ({"measured": "fast"}, "column measured must be a number"),
        ({"measured": "-3"}, "column measured must be > 0"),
        ({"num_gpus": "1.5"}, "column num_gpus must be a whole number"),
        ({"quantity": "latency"}, "quantity must be one of"),
        ({"arrival": "burst"}, "arrival must be one of"),
    ],
)
def test_a_bad_row_names_the_file_and_line(
    tmp_path: Path, change: dict[str, str], message: str
) -> None:
    path = _rewrite(tmp_path, change, line=3)
    with pytest.raises(CalibrationError, match=rf"points\.csv, line 5: .*{message}"):
        load_points(path)


def test_a_repeated_point_id_is_refused(tmp_path: Path) -> None:
    first = load_points()[0].point_id
    path = _rewrite(tmp_path, {"point_id": first}, line=1)
    with pytest.raises(CalibrationError, match=r"line 3: point_id .* repeats line 2"):
        load_points(path)


def test_a_missing_file_is_one_message(tmp_path: Path) -> None:
    with pytest.raises(CalibrationError, match="cannot read the points file"):
        load_points(tmp_path / "absent.csv")


def test_shipped_points_are_the_transcription_of_the_public_data() -> None:
    """Rebuilding the file from the public data gives the shipped file, value for value."""
    if not (SHARED_DATA / "under-load").is_dir():
        pytest.skip("the public-data folder is not beside the repository")
    spec = importlib.util.spec_from_file_location(
        "build_validation_points", REPO_ROOT / "tools" / "build_validation_points.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rebuilt = module.build(SHARED_DATA)
    shipped = list(csv.DictReader(default_points_path().read_text().splitlines()))
    assert [r["point_id"] for r in rebuilt] == [r["point_id"] for r in shipped]
    for fresh, kept in zip(rebuilt, shipped, strict=True):
        assert float(fresh["measured"]) == pytest.approx(float(kept["measured"]), rel=1e-6)
        assert str(fresh["source"]) == kept["source"]


def test_mt_bench_points_replay_two_turn_conversations_as_their_harness_ran_them() -> None:
    # SpecForge's MT-Bench benchmark runs each of the 80 questions as one two-turn program on
    # batch-size threads; throughput is every answer's tokens over the whole batch's wall time.
    multi = [p for p in load_points() if p.num_turns]
    assert multi and all(p.point_id.startswith("moe-specdrift-") for p in multi)
    for point in multi:
        assert point.num_turns == 2 and point.num_requests == 160, point.point_id
        workload = scenario_document(point)["workload"]
        assert workload["sessions"] == {"num_turns": 2, "think_time_s": 0.0}
        assert workload["num_requests"] == 160
        assert workload["arrival"] == {"process": "closed_loop", "concurrency": point.concurrency}
        # The cards' acceptance lengths were measured at T = 0.7: the rows run at it, so a
        # speculative row takes that acceptance, not another head's greedy one.
        assert workload["temperature"] == 0.7
