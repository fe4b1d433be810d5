"""`specsim calibrate` on real artifacts: every file handled, the replay and acceptance targets,
the shipped profiles rebuilt, and the command line."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import typer
import yaml
from typer.testing import CliRunner

from calibration.calibrate import calibrate
from calibration.fit_acceptance import fit_traces
from sim.acceptance.models import PositionalAcceptanceModel
from sim.acceptance.plan import Proposal
from sim.artifacts import mean_acceptance_length, parse_artifact
from sim.errors import CalibrationError
from specsim.calibrate_command import register
from tools.build_profiles import PROFILE_DIR, build_all

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
DATA = SHARED / "data"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="shared data not beside the checkout")
TRACE_DIR = DATA / "acceptance-traces" / "llama-3.1-8b-h100-vllm"
TIMINGS = DATA / "vllm-artifacts" / "vllm_request_timings" / "requests.jsonl"


def _artifact_files() -> list[Path]:
    if not DATA.is_dir():
        return []
    roots = (DATA / "vllm-artifacts", DATA / "acceptance-traces")
    return sorted(p for root in roots for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("path", _artifact_files(), ids=lambda p: p.name)
def test_every_artifact_is_fitted_or_rejected_with_a_reason(path: Path) -> None:
    if path.parent.name == "vllm_request_timings":
        pytest.skip("the replayed run is covered by the shipped-profile rebuild")
    gpu, model, tp = ("a100-80gb", "llama-3.3-70b", 8) if "llm-k8s" in path.name else (None,) * 3
    try:
        result = calibrate([path], gpu=gpu, model=model, tp=tp)
    except CalibrationError as exc:
        assert "nothing to fit" in str(exc) and str(path) in str(exc)
        return
    provenance = result.document["provenance"]
    used = [i for i in provenance["inputs"] if i["file"] == str(path)]
    assert used and used[0]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert result.document["engine"] or result.document["acceptance"]


@pytest.mark.parametrize("dataset", ["sharegpt", "cnn", "gsm8k", "instructcoder"])
def test_fitted_acceptance_reproduces_the_trace_tau_at_k_1_to_7(dataset: str) -> None:
    traces = parse_artifact(TRACE_DIR / f"combined_{dataset}.jsonl").acceptance
    assert traces is not None
    for method in traces.methods:
        fit = fit_traces(traces, method, num_bootstrap=20)
        assert fit.conditional_rates is not None
        model = PositionalAcceptanceModel(list(fit.conditional_rates))
        # Decode as many tokens as the traces hold, with the simulator's own sampler.
        decode = np.array([len(a) for a in traces.acc_len[method]]) * 4
        for k in range(1, 8):
            measured = mean_acceptance_length(traces, method, k)
            plan = model.plan(decode, Proposal.chain(k), np.random.default_rng(k))
            simulated = float(plan.accepted.sum() + plan.accepted.size) / plan.accepted.size
            assert simulated == pytest.approx(measured, rel=0.02), (method, k)


def test_shipped_profiles_rebuild_identically_and_meet_the_replay_target() -> None:
    texts = build_all(SHARED)
    for name, text in texts.items():
        assert (PROFILE_DIR / f"{name}.yaml").read_text("utf-8") == text, name
    check = yaml.safe_load(texts["vllm-0.19-llama-3.1-8b-rtx-pro-6000"])["check"]
    for section in (check["in_sample"], check["out_of_sample"]["held_out"]):
        for metric in ("ttft_ms", "tpot_ms"):
            assert abs(section[metric]["mean"]["rel_error"]) <= 0.10, (metric, section)
    assert check["out_of_sample"]["held_out"] != check["out_of_sample"]["fit_half"]


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)

    @app.callback()
    def main() -> None:
        """Group, so that calibrate is a subcommand."""

    return app


def test_the_command_writes_a_profile_and_reports_errors_with_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "gsm8k.yaml"
    ok = runner.invoke(_app(), ["calibrate", str(TRACE_DIR / "combined_gsm8k.jsonl"), "--out",
                                str(out)])  # fmt: skip
    assert ok.exit_code == 0, ok.output
    assert "acceptance eagle3" in ok.output and out.is_file()
    assert set(yaml.safe_load(out.read_text())["acceptance"]) == {"eagle3", "ngram"}
    # The profile written above is not replaced without --force, and nothing runs before that.
    kept = runner.invoke(_app(), ["calibrate", str(DATA / "README.md"), "--out", str(out)])
    assert kept.exit_code == 2 and "--force" in kept.output
    bad = runner.invoke(
        _app(), ["calibrate", str(DATA / "README.md"), "--out", str(out), "--force"]
    )
    assert bad.exit_code == 2 and "nothing to fit" in bad.output
    gpu = runner.invoke(_app(), ["calibrate", str(TIMINGS), "--out", str(out), "--gpu", "tpu"])
    assert gpu.exit_code == 2 and "--gpu: unknown GPU 'tpu'" in gpu.output


def test_named_parameters_fit_the_replay_by_simulation_with_identifiability() -> None:
    names = ["step_overhead_s", "per_sequence_overhead_s", "bandwidth"]
    result = calibrate([TIMINGS.parent], gpu="rtx-pro-6000", parameters=names)
    engine = result.document["engine"]
    table = engine["parameters"]
    assert set(table) == set(names)
    for row in table.values():
        if row["status"] == "fitted":
            assert row["ci95"][0] <= row["value"] <= row["ci95"][1]
        else:
            assert row["value"] == row["shipped"] and row["reason"]
    (comparison,) = engine["comparison"].values()
    assert abs(comparison["tpot_mean"]["rel_error"]) <= 0.05
