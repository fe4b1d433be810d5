"""Calibrated profiles read back, acceptance conversions and the per-step fit (no shared data)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from calibration.fit_acceptance import (
    conditional_from_taus,
    non_increasing,
    tau_from_conditional_rates,
)
from calibration.fit_step_cost import fit_steps, model_time_s
from sim.acceptance.config import AcceptanceConfig, build_acceptance_model
from sim.acceptance.models import PositionalAcceptanceModel
from sim.acceptance.plan import Proposal
from sim.artifacts.schema import StepTable
from sim.calibrated_profiles import (
    load_acceptance_profile,
    load_engine_profile,
    shipped_profile_names,
)
from sim.errors import ScenarioError

ENGINE = "vllm-0.19-llama-3.1-8b-rtx-pro-6000"
TRACES = "llama-3.1-8b-gsm8k-h100-traces"


def test_shipped_profiles_are_listed_and_the_engine_values_sit_in_their_intervals() -> None:
    assert {ENGINE, TRACES} <= set(shipped_profile_names())
    profile = load_engine_profile(ENGINE, Path.cwd())
    assert profile.gpu == "rtx-pro-6000" and profile.model == "llama-3.1-8b"
    document = yaml.safe_load(Path(__file__).resolve().parents[2].joinpath(
        "sim", "data", "profiles", f"{ENGINE}.yaml").read_text("utf-8"))  # fmt: skip
    for key in ("step_overhead_s", "per_sequence_overhead_s"):
        low, high = document["engine"]["ci95"][key]
        assert low <= getattr(profile, key) <= high
    inputs = profile.provenance["inputs"]
    assert len(inputs[0]["sha256"]) == 64 and inputs[0]["engine_version"] == "0.19.0"


def test_an_acceptance_profile_by_name_gives_the_fitted_rates_to_a_scenario() -> None:
    model = build_acceptance_model(
        AcceptanceConfig(profile=TRACES), "eagle3", "llama-3.1-8b", "gsm8k", 0.0, Path.cwd()
    )
    assert isinstance(model, PositionalAcceptanceModel)
    ngram = load_acceptance_profile(TRACES, Path.cwd(), "ngram")
    # n-gram accepts far less than EAGLE-3 on the same requests (GSM8K: tau 1.16 against 2.38).
    chain = Proposal.chain(3)
    assert ngram.expected_acceptance_length(chain) < model.expected_acceptance_length(chain) - 1


def test_profile_paths_resolve_against_the_scenario_folder(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({
        "provenance": {"inputs": []},
        "engine": {"step_overhead_s": 0.002, "per_sequence_overhead_s": 1e-5,
                   "efficiency": {"bandwidth": 0.8, "flops": 0.7}},
        "acceptance": {"any": {"mean_acceptance_length": 2.5}},
    }))  # fmt: skip
    profile = load_engine_profile("p.yaml", tmp_path)
    assert (profile.step_overhead_s, profile.efficiency and profile.efficiency.bandwidth) == (
        0.002,
        0.8,
    )
    tau = load_acceptance_profile("p.yaml", tmp_path, "eagle3").expected_acceptance_length(
        Proposal.chain(4)
    )
    assert tau == pytest.approx(2.5)


@pytest.mark.parametrize(
    ("reference", "match"),
    [
        ("no-such-profile", r"engine\.profile: unknown profile 'no-such-profile'"),
        ("missing.yaml", r"engine\.profile: profile file 'missing.yaml' not found"),
        (TRACES, r"engine\.profile: .* has no engine section"),
    ],
)
def test_engine_profile_errors_name_the_key(reference: str, match: str) -> None:
    with pytest.raises(ScenarioError, match=match):
        load_engine_profile(reference, Path.cwd())


def test_an_engine_only_profile_has_no_acceptance_for_a_scenario() -> None:
    with pytest.raises(ScenarioError, match=r"speculation\.acceptance\.profile: .* no acceptance"):
        load_acceptance_profile(ENGINE, Path.cwd(), "eagle3")


@given(st.lists(st.floats(-0.5, 1.5), min_size=1, max_size=12))
def test_non_increasing_projection_is_monotone_bounded_and_idempotent(values: list[float]) -> None:
    out = non_increasing(np.array(values))
    assert np.all(np.diff(out) <= 1e-12) and np.all((out >= 0) & (out <= 1))
    np.testing.assert_allclose(non_increasing(out), out)
    # The projection keeps the total where no clipping was needed (pooling preserves sums).
    if all(0 <= v <= 1 for v in values):
        assert out.sum() == pytest.approx(sum(values))


@given(st.lists(st.floats(0.05, 0.99), min_size=1, max_size=8))
@example(rates=[0.125, 0.125, 0.125, 0.0625, 0.0625, 0.0625, 0.05])  # off by 3.7e-9, relative
def test_taus_of_conditional_rates_convert_back_to_the_rates(rates: list[float]) -> None:
    taus = np.array([tau_from_conditional_rates(np.array(rates), k) for k in range(1, 9)])
    recovered = conditional_from_taus(taus)[: len(rates)]
    # The round trip takes differences of sums near tau (about 1 to 9): each sum of k terms is
    # off by at most k ulps of tau, so the product P_k = a_1...a_k comes back with a relative
    # error up to about 2 k eps tau / P_k, and a_k = P_k / P_{k-1} with the sum of its two
    # products' errors. Tiny products (rates near 0.05 for several positions) lose digits to
    # that cancellation; nothing else may.
    products = np.cumprod(rates)
    previous = np.concatenate([[1.0], products[:-1]])
    k = np.arange(1, len(rates) + 1)
    bound = 2 * (k + 1) * np.finfo(float).eps * taus.max() * (1 / products + 1 / previous)
    assert np.all(np.abs(recovered - rates) <= np.maximum(bound, 1e-12) * np.array(rates))


@settings(max_examples=5, deadline=None)
@given(st.floats(0.5, 5.0), st.floats(0.0, 0.05), st.integers(0, 2**31))
def test_per_step_fit_recovers_known_overheads(
    step_ms: float, per_seq_ms: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    n = 400
    ctx_req = rng.integers(0, 3, n)
    gen_req = rng.integers(1, 128, n)
    steps = StepTable(
        at_s=np.arange(n, dtype=float), iteration=np.arange(n),
        num_context_requests=ctx_req, num_context_tokens=ctx_req * rng.integers(16, 512, n),
        num_generation_requests=gen_req, num_generation_tokens=gen_req,
        elapsed_s=np.zeros(n), kv_cache_usage=np.zeros(n), is_dummy=np.zeros(n, dtype=bool),
    )  # fmt: skip
    base = model_time_s(steps, "h100-sxm", "llama-3.1-8b", 1)
    noise = rng.normal(0, 2e-5, n)
    elapsed = base + 1e-3 * (step_ms + per_seq_ms * (ctx_req + gen_req)) + noise
    fit = fit_steps(steps.__class__(**{**steps.__dict__, "elapsed_s": elapsed}), "h100-sxm",
                    "llama-3.1-8b", 1)  # fmt: skip
    assert fit.values["step_overhead_s"] == pytest.approx(step_ms * 1e-3, abs=2e-5)
    assert fit.values["per_sequence_overhead_s"] == pytest.approx(per_seq_ms * 1e-3, abs=5e-7)
    low, high = fit.ci95["step_overhead_s"]
    assert low <= fit.values["step_overhead_s"] <= high
