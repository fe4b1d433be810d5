"""Why the golden summaries are right: the laws their numbers must obey, checked on every golden.

``tests/test_golden_scenarios.py`` only says that a summary did not change. These tests say why
the stored numbers are correct, from definitions and closed forms that hold whatever the cost
model or the acceptance data:

* every run drains, and the request throughput is the completed requests over the measurement
  window (docs/metrics.md: the window runs from the first measured arrival to the last finish);
* tokens are conserved: with fixed lengths the throughputs times the window give back exactly
  ``num_requests`` times the prompt and output lengths;
* ``draft_acceptance_rate = Σ accepted / Σ drafted`` and ``mean_acceptance_length = 1 + Σ accepted
  / Σ verify steps`` (docs/metrics.md), so ``rate · k = length − 1`` when every verify step drafts
  k tokens, and ``rate · k >= length − 1`` for a chain that may draft fewer;
* with i.i.d. acceptance at probability ``a`` and k drafts, a verify step yields
  ``E[tokens] = (1 − a^(k+1)) / (1 − a)`` (Leviathan, Kalman, Matias, ICML 2023,
  arXiv:2211.17192, Section 3; docs/acceptance-analysis.md);
* at batch 1 a decode step reads every weight once, so its time is ``weight bytes / (η · HBM
  bandwidth)`` plus terms that do not depend on the weights: two weight precisions differ by
  exactly their weight bytes over the achieved bandwidth (on GPUs priced by the roofline).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
GOLDEN_DIR = ROOT / "tests" / "golden"
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))


def _load(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    scenario = yaml.safe_load(path.read_text(encoding="utf-8"))
    golden = json.loads((GOLDEN_DIR / f"{path.stem}.json").read_text(encoding="utf-8"))
    return scenario, golden


def _window_s(golden: dict[str, Any]) -> float:
    start, end = golden["measurement_window_s"]
    return float(end - start)


CASES = [pytest.param(*_load(path), id=path.stem) for path in SCENARIOS]


def _speculation(case: Any) -> dict[str, Any]:
    return dict(case.values[0].get("speculation") or {})


def _fixed_lengths(case: Any) -> bool:
    workload = case.values[0]["workload"]
    return all(
        (workload.get(key) or {}).get("distribution") == "fixed"
        for key in ("prompt_tokens", "output_tokens")
    )


FIXED_LENGTH_CASES = [case for case in CASES if _fixed_lengths(case)]
#: Chains only: a tree drafts more tokens than its accepted path can hold.
CHAIN_CASES = [case for case in CASES if _speculation(case).get("tree") is None]
ALPHA_CASES = [
    case
    for case in CHAIN_CASES
    if "alpha" in (_speculation(case).get("acceptance") or {})
    and _speculation(case).get("policy") is None
]


@pytest.mark.parametrize(("scenario", "golden"), CASES)
def test_every_run_drains_and_its_request_rate_is_requests_over_the_window(
    scenario: dict[str, Any], golden: dict[str, Any]
) -> None:
    # No golden scenario sets a warm-up or a steady window: every request is measured.
    assert not (scenario.get("measurement") or {})
    assert golden["num_completed"] == golden["num_requests"]
    assert golden["num_requests"] == scenario["workload"]["num_requests"]
    completed = golden["request_throughput_req_s"] * _window_s(golden)
    assert completed == pytest.approx(golden["num_completed"], rel=1e-9)


@pytest.mark.parametrize(("scenario", "golden"), FIXED_LENGTH_CASES)
def test_fixed_lengths_conserve_tokens(scenario: dict[str, Any], golden: dict[str, Any]) -> None:
    prompt, output = scenario["workload"]["prompt_tokens"], scenario["workload"]["output_tokens"]
    num, window = golden["num_requests"], _window_s(golden)
    assert golden["output_throughput_tok_s"] * window == pytest.approx(num * output["value"])
    total = num * (prompt["value"] + output["value"])
    assert golden["total_token_throughput_tok_s"] * window == pytest.approx(total)


@pytest.mark.parametrize(("scenario", "golden"), CHAIN_CASES)
def test_acceptance_rate_and_length_count_the_same_accepted_tokens(
    scenario: dict[str, Any], golden: dict[str, Any]
) -> None:
    speculation = scenario.get("speculation") or {}
    rate, length = golden["draft_acceptance_rate"], golden["mean_acceptance_length"]
    if speculation.get("method", "none") == "none":
        assert rate is None and length == 1.0  # one token per step, nothing drafted
        return
    k = speculation.get("num_speculative_tokens", 3)
    every_step_drafts_k = speculation["method"] != "ngram" and speculation.get("policy") is None
    if every_step_drafts_k:
        assert rate * k == pytest.approx(length - 1, rel=1e-12)
    else:
        # n-gram lookup drafts fewer tokens when the context holds no match; a policy lowers k.
        assert rate * k >= length - 1 - 1e-12


@pytest.mark.parametrize(("scenario", "golden"), ALPHA_CASES)
def test_constant_alpha_runs_follow_the_acceptance_law(
    scenario: dict[str, Any], golden: dict[str, Any]
) -> None:
    speculation = scenario["speculation"]
    alpha, k = speculation["acceptance"]["alpha"], speculation.get("num_speculative_tokens", 3)
    law = (1 - alpha ** (k + 1)) / (1 - alpha)
    # Tokens per verify step: a truncated geometric on 1..k+1 whose variance is closed-form.
    probabilities = [alpha**j * (1 - alpha) for j in range(k)] + [alpha**k]
    second_moment = sum((j + 1) ** 2 * p for j, p in enumerate(probabilities))
    variance = second_moment - law**2
    length = golden["mean_acceptance_length"]
    num_tokens = golden["output_throughput_tok_s"] * _window_s(golden)
    num_steps = num_tokens / length  # sequence-steps: each yields `length` tokens on average
    standard_error = math.sqrt(variance / num_steps)
    # A request's last step is cut to the tokens it still needs: at most k tokens lost per
    # request, which can only lower the mean.
    truncation = golden["num_requests"] * k / num_steps
    assert law - truncation - 4 * standard_error <= length <= law + 4 * standard_error


# GPUs whose linear layers are priced by the roofline (no measured GEMM grid: the H100 SXM and
# the H200 have one, sim/gemm_grid.py).
@pytest.mark.parametrize("gpu", ["l40s", "h100-pcie"])
def test_batch_one_decode_time_is_weight_bytes_over_bandwidth_plus_a_fixed_part(gpu: str) -> None:
    from sim.catalogue import get_gpu, get_model
    from sim.efficiency import load_efficiency
    from sim.run import run_scenario
    from sim.scenario import validate_document

    def tpot_ms(weights: str) -> float:
        document = {
            "hardware": {"gpu": gpu},
            "precision": {"weights": weights},
            "engine": {"frontend": {"enabled": False}},
            "workload": {
                "num_requests": 4,
                "arrival": {"process": "closed_loop", "concurrency": 1},
                "prompt_tokens": {"distribution": "fixed", "value": 16},
                "output_tokens": {"distribution": "fixed", "value": 65},
            },
        }
        summary = run_scenario(validate_document(document, "batch 1"), ROOT).summary
        assert summary.mean_batch_size == 1.0
        return float(summary.tpot_ms.mean)

    model, device = get_model("llama-3.1-8b"), get_gpu(gpu)
    achieved_bytes_per_s = load_efficiency(device.name).bandwidth * device.hbm_bandwidth_bytes_per_s
    saved_bytes = (
        model.with_precision("bf16", "bf16").weight_bytes
        - model.with_precision("fp8", "bf16").weight_bytes
    )
    # Host work, KV reads of the same context and sampling are the same at both precisions; the
    # roofline's smooth corner at one token adds well under 0.1 % of the difference.
    expected_ms = saved_bytes / achieved_bytes_per_s * 1e3
    assert tpot_ms("bf16") - tpot_ms("fp8") == pytest.approx(expected_ms, rel=1e-3)


def test_the_laws_reach_the_goldens_they_are_about() -> None:
    # A law whose filter matched nothing would pass without checking anything.
    assert [case.id for case in FIXED_LENGTH_CASES] == ["static-batch-llama31-8b"]
    trees = sorted(case.id for case in CASES if case not in CHAIN_CASES)
    assert trees == [
        "lib-adaptive-eagle2-dynamic-tree",
        "spec-eagle2-tree-222",
        "spec-medusa-static-tree",
    ]
    assert len(ALPHA_CASES) >= 3
