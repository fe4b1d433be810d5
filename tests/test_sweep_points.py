"""The concurrency sweep with both arms measured (vLLM, Qwen3-32B with an EAGLE-3 head, and the
kept Llama-3.3-70B and draft-model rows): what is expressible, how it runs, and the acceptance the
rows use, checked against the source's own measured acceptance lengths."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.acceptance.config import build_acceptance_model
from sim.acceptance.plan import Proposal
from sim.validation import speedup_checks
from sim.validation.checks import CONCURRENCY_SWEEP
from sim.validation.points import load_points
from sim.validation.runner import ValidationResult
from sim.validation.scenarios import inexpressible_reason, regime_of, scenario_document

GROUP = "vllm-sweep-tomasruizt"
#: The range of the source's mean acceptance length over its nine concurrencies, for k = 1..6
#: (its logs' "Acceptance length" lines, printed to 0.01; results/logs-2026-01-23 of
#: tomasruizt/vllm-scripts @ d94d714).
MEASURED_TAU = {
    "instructcoder": {
        1: (1.64, 1.64),
        2: (1.98, 2.02),
        3: (2.17, 2.19),
        4: (2.25, 2.29),
        5: (2.28, 2.32),
        6: (2.30, 2.35),
    },
    "mt-bench": {
        1: (1.67, 1.68),
        2: (2.06, 2.08),
        3: (2.28, 2.30),
        4: (2.38, 2.42),
        5: (2.43, 2.47),
        6: (2.46, 2.50),
    },
}


def _sweep() -> list:
    return [p for p in load_points() if p.source_group == GROUP]


def test_only_the_qwen_eagle3_rows_below_the_kv_bound_are_expressible() -> None:
    points = _sweep()
    expressible = {p.point_id for p in points if not inexpressible_reason(p)}
    # EAGLE-3 at k = 1..6: InstructCoder at concurrency 1..64 (6 x 7 rows), MT-bench at 1..80
    # (6 x 8 rows).
    assert len(expressible) == 42 + 48
    assert all(
        p.startswith(("tomasruizt-qwen3-32b-eagle3-", "tomasruizt-qwen3-32b-mtbench-eagle3-"))
        for p in expressible
    )
    kept = [p for p in points if p.point_id not in expressible]
    # Every kept row says why: draft models outside the catalogue, the 94 GB GPU's KV pool
    # binding at 128-256 clients, the unnamed GPUs without peer-to-peer of the 70B runs.
    assert kept and all(inexpressible_reason(p) for p in kept)
    assert all(regime_of(p) == "speculation" for p in points)


def test_a_sweep_point_runs_as_the_sources_harness_sent_it() -> None:
    point = next(p for p in _sweep() if p.point_id == f"{CONCURRENCY_SWEEP}16")
    document = scenario_document(point)
    assert document["workload"]["arrival"] == {"process": "closed_loop", "concurrency": 16}
    # NUM_PROMPTS of the source's loop: ten per client, at least 50.
    assert document["workload"]["num_requests"] == 160
    assert document["workload"]["dataset"] == "instructcoder"
    assert document["engine"]["preset"] == "vllm-v1-async"
    assert document["speculation"] == {"method": "eagle3", "num_speculative_tokens": 3}
    baseline = scenario_document(point, method="none")
    assert baseline["speculation"] == {"method": "none"}
    assert baseline["workload"] == document["workload"]


@pytest.mark.parametrize(
    ("dataset", "k"), [(dataset, k) for dataset, by_k in MEASURED_TAU.items() for k in by_k]
)
def test_the_shipped_acceptance_reproduces_the_measured_length_at_every_k(
    dataset: str, k: int
) -> None:
    """The per-position rates are taken from the k = 6 run at one client only; the k = 1..5
    runs are separate servers, so their measured lengths check the conditional-rate reading out
    of sample: each lands in the range the source measured at that k, widened by 0.04. The
    widening is the source's own server-to-server spread: the first position's acceptance, the
    same quantity in every run, spans 64.6-67.8 % over its MT-bench servers and 61.7-65.0 %
    over its InstructCoder ones, which alone moves the length by 0.03-0.04."""
    model = build_acceptance_model(None, "eagle3", "qwen3-32b", dataset, 0.0, Path.cwd())
    tau = model.expected_acceptance_length(Proposal.chain(k))
    low, high = MEASURED_TAU[dataset][k]
    assert low - 0.04 <= tau <= high + 0.04


def _result(clients: int, measured: float, predicted: float) -> ValidationResult:
    return ValidationResult(
        point_id=f"{CONCURRENCY_SWEEP}{clients}",
        regime="speculation",
        setup="a setup",
        quantity="speedup",
        statistic="ratio",
        unit="x",
        measured=measured,
        predicted=predicted,
        source_group=GROUP,
        source="a source",
        fitted_by="",
        reason="",
    )


def _concurrency_check(predicted: dict[int, float]) -> bool | None:
    measured = {1: 1.95, 16: 1.80, 64: 1.52}
    results = [_result(c, measured[c], value) for c, value in predicted.items()]
    return next(c for c in speedup_checks(results) if "concurrency" in c.name).passed


def test_the_concurrency_check_wants_a_falling_speedup_that_stays_above_one() -> None:
    assert _concurrency_check({1: 1.8, 16: 1.7, 64: 1.5}) is True
    assert _concurrency_check({1: 1.5, 16: 1.7, 64: 1.8}) is False  # rises with concurrency
    assert _concurrency_check({1: 1.8, 16: 1.2, 64: 0.9}) is False  # below 1x where measured > 1x
    assert _concurrency_check({}) is None
