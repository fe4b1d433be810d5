"""Decompose SGLang's speculative speedup rows into their two arms.

A speedup row (``moe-serving``: the gpt-oss EAGLE-3 rows of the SpecDrift model cards, SGLang
2026 spec v2, one H100; the DeepSeek-V3 MTP rows SGLang's documentation quotes, SGLang of
February 2025 on H200 TP 8) is the ratio of two runs. This prints, for each row and arm (no
speculation, then the row's method), the simulated output throughput against the measured one
where the source gives the arm, the mean decode step (steps without a prefill chunk) split into
the cost model's terms, the expert reads of that step (distinct experts per layer under the
uniform-routing law of :meth:`sim.model_spec.Model.expected_experts_touched`), and the mean
acceptance length the run drew against the one the source states.

Where a row's arms are measured:

* the SpecDrift cards print both arms' output tok/s: the baseline is its own validation row
  (``...-baseline-bs<B>``), the speculative arm is the baseline times the row's ratio;
* for DeepSeek-V3 MTP only batch 1 has arms, from the pull request the documentation's figure
  comes from (:data:`MTP_PR_BS1`); batch 32 has the ratio alone;
* a row without speculation (the plain DeepSeek-V3 decode of SGLang v0.4.1.post2, one fixed
  batch of 1, 8 or 32) is its own measured arm, printed alone.

``step implied`` is the mean decode step that would give the measured throughput with the same
steps (mean step x predicted / measured): the harness (prompts, turns, drain) is simulated as
the source ran it, so the ratio carries over to the decode step. Usage::

    python -m benchmarks.sglang_spec_decomposition [--rows ID,ID,...]

Exit status 0: a diagnostic, not a gate.
"""

from __future__ import annotations

import argparse
import re
import time
from typing import Any

import numpy as np

from sim.catalogue import get_model
from sim.run import run_scenario
from sim.validation.points import ValidationPoint, load_points
from sim.validation.scenarios import build_scenario, traces_dir

ROWS = (
    "moe-specdrift-gpt-oss-120b-eagle3-bs1",
    "moe-specdrift-gpt-oss-120b-eagle3-bs8",
    "moe-specdrift-gpt-oss-120b-eagle3-bs64",
    "moe-specdrift-gpt-oss-20b-eagle3-bs1",
    "moe-sglang-docs-deepseek-v3-mtp-bs1",
    "moe-sglang-docs-deepseek-v3-mtp-bs32",
    "moe-sglang-v041-deepseek-v3-bs1",
    "moe-sglang-v041-deepseek-v3-bs8",
    "moe-sglang-v041-deepseek-v3-bs32",
)
#: sgl-project/sglang PR #3582 (2025-02-14, "Support NextN (MTP) speculative decoding for
#: DeepSeek-V3/R1", merged for v0.4.3): "1.76x speed up ... 77 token/s output throughput on batch
#: size 1", "~1.9 avg accept length for draft 2 tokens". Baseline 77 / 1.76 = 43.75 tok/s.
MTP_PR_BS1 = {"baseline_tok_s": 77.0 / 1.76, "speculative_tok_s": 77.0, "acceptance": 1.9}
TERMS = ("fixed_s", "linear_s", "attention_s", "allreduce_s", "sampling_s", "draft_s")
_STATED_AL = re.compile(r"accept(?:ance)? length (\d+(?:\.\d+)?)")


def measured_arms(point: ValidationPoint, points: dict[str, ValidationPoint]) -> tuple[Any, Any]:
    """The measured output tok/s of the row's two arms (None where the source gives none)."""
    baseline_id = point.point_id.replace(f"-{point.method}-", "-baseline-")
    if baseline_id in points:
        base = points[baseline_id].measured
        return base, base * point.measured
    if point.point_id == "moe-sglang-docs-deepseek-v3-mtp-bs1":
        return MTP_PR_BS1["baseline_tok_s"], MTP_PR_BS1["speculative_tok_s"]
    return None, None


def stated_acceptance(point: ValidationPoint) -> float | None:
    """The mean acceptance length (bonus token included) the row's source states."""
    found = _STATED_AL.search(point.notes or "")
    if found:
        return float(found.group(1))
    return MTP_PR_BS1["acceptance"] if point.model.startswith("deepseek") else None


def arm(point: ValidationPoint, method: str, measured: float | None) -> dict[str, Any]:
    """One arm's simulated throughput and decode step, against ``measured`` tok/s."""
    result = run_scenario(build_scenario(point, method), traces_dir())
    steps = {key: np.asarray(value) for key, value in result.steps.items()}
    decode = (steps["num_prefill_tokens"] == 0) & (steps["num_decode_seqs"] > 0)
    predicted = result.summary.output_throughput_tok_s
    mean_step = float(steps["duration_s"][decode].mean())
    tokens = steps["num_tokens"][decode]
    model = get_model(point.model)
    return {
        "method": method,
        "predicted": predicted,
        "measured": measured,
        "step_ms": 1e3 * mean_step,
        "implied_ms": None if measured is None else 1e3 * mean_step * predicted / measured,
        **{t: 1e3 * float(steps[t][decode].mean()) for t in TERMS},
        "seqs": float(steps["num_decode_seqs"][decode].mean()),
        "tokens": float(tokens.mean()),
        "experts": float(np.mean(model.expected_experts_touched(tokens))),
        "acceptance": result.summary.mean_acceptance_length,
    }


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=",".join(ROWS))
    args = parser.parse_args()
    points = {p.point_id: p for p in load_points()}
    started = time.perf_counter()
    print(
        "| row | arm | predicted tok/s | measured | error | step ms | step implied | fixed | "
        "linear | attention | all-reduce | sampling | draft | seqs/step | tokens/step | "
        "experts/layer | acceptance (stated) |"
    )
    print("|---|---|" + "---:|" * 15)
    for row_id in args.rows.split(","):
        point = points[row_id]
        if point.method == "none":
            arms: tuple[dict[str, Any], ...] = (arm(point, "none", point.measured),)
        else:
            base_tok_s, spec_tok_s = measured_arms(point, points)
            arms = (arm(point, "none", base_tok_s), arm(point, point.method, spec_tok_s))
        for r in arms:
            error = None if r["measured"] is None else r["predicted"] / r["measured"] - 1
            stated = stated_acceptance(point) if r["method"] != "none" else None
            print(
                f"| {row_id} | {r['method']} | {r['predicted']:,.1f} | "
                f"{_fmt(r['measured'], ',.1f')} | {_fmt(error, '+.1%')} | {r['step_ms']:.2f} | "
                f"{_fmt(r['implied_ms'], '.2f')} | {r['fixed_s']:.2f} | {r['linear_s']:.2f} | "
                f"{r['attention_s']:.2f} | {r['allreduce_s']:.2f} | {r['sampling_s']:.3f} | "
                f"{r['draft_s']:.2f} | {r['seqs']:.1f} | {r['tokens']:.1f} | "
                f"{r['experts']:.1f} | {r['acceptance']:.3f} ({_fmt(stated, '.3g')}) |",
                flush=True,
            )
        if len(arms) == 1:
            continue
        ratio = arms[1]["predicted"] / arms[0]["predicted"]
        print(
            f"| {row_id} | speedup | {ratio:.3f} | {point.measured:.3f} | "
            f"{100 * (ratio / point.measured - 1):+.1f}% |" + " |" * 12
        )
    print(f"wall time {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
