"""SGLang's own drafting overheads, from how its EAGLE workers run a step and what was measured.

SGLang runs EAGLE-family drafting (EAGLE-1/2/3, MTP as NEXTN, a standalone draft model) on two
worker paths, and the path decides what a speculative step costs beyond the draft network's
roofline (:class:`sim.drafting.network.NetworkCost`):

* **Spec v1** (``eagle_worker.py``; every 0.4 release, and 0.5 for trees): the draft forwards of
  a step replay one CUDA graph and the verify replays the target's; the catch-up (draft-extend)
  forward ran eagerly until sgl-project/sglang PR #6606 (2025-05-26). The worker is
  synchronous: the overlap scheduler is off (``disable_overlap_schedule``), and the step reads
  the accepted lengths back to the host before it books the tokens and runs the draft extend,
  so the scheduler's and the worker's CPU work lie between GPU work.
* **Spec v2** (``eagle_worker_v2.py``, opt-in as ``SGLANG_ENABLE_SPEC_V2=1`` from PR #11398,
  2025-10-09; the default from PR #21062, 2026-03-21, for ``--speculative-eagle-topk 1``;
  ``server_args.py`` falls back to v1 for topk > 1, "spec v2 currently only supports topk = 1"):
  the same graphs, no host read-back inside the step, and the overlap scheduler on, so the CPU
  work of step n+1 runs while the GPU runs step n.

The CPU work v2 hides was measured at batch 1, the same server run both ways:

* PR #11398 (2025-10-09): Llama-3.1-8B-Instruct, EAGLE head
  ``lmsys/sglang-EAGLE-LLaMA3-Instruct-8B``, 5 steps, topk 1, 6 draft tokens, Triton attention:
  v1 246.80 tok/s at acceptance 2.99, v2 273.43 tok/s at 3.01:
  2.99 / 246.80 − 3.01 / 273.43 = 1.107 ms a step;
* PR #18906 (2026-02-16): Qwen3.5-397B-A17B at TP 8, NEXTN, 3 steps, topk 1, 4 draft tokens,
  acceptance 3.368 both ways: v1 298.19 tok/s, v2 323.72 tok/s: 0.891 ms a step.

Their mean, 0.999 ms (the two as its range), less the per-sequence CPU term the simulator already
shows when overlap is off (``per_sequence_overhead_s`` of sim/data/host_costs.yaml, one sequence),
is spec v1's ``per_step_s``; v2's is 0 (its CPU work is hidden behind the forward, which at every
speculative step outlasts it). Inside the graphs each draft forward runs one decoder layer's
small kernels (norms, rotary embedding, attention, activation, residual adds) that the roofline
and the per-GEMM floor do not price; the target pays them as ``per_layer_overhead_s`` per layer,
fitted for SGLang 0.5 on its serving rows (sim/data/host_costs.yaml): that is ``per_forward_s``
on both paths. Nothing here is fitted to a speculative row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.host_costs import host_costs_document, load_host_profile

if TYPE_CHECKING:
    from calibration.draft_overhead import FitResult

#: Batch-1 step time spec v1 shows over spec v2 (seconds), each: (source, v1 tok/s, v1
#: acceptance, v2 tok/s, v2 acceptance). A step emits ``acceptance`` tokens: step = AL / tok_s.
V1_OVER_V2_RUNS: tuple[tuple[str, float, float, float, float], ...] = (
    ("sgl-project/sglang PR #11398 (2025-10-09), Llama-3.1-8B EAGLE, 5 steps topk 1", 246.80, 2.99,
     273.43, 3.01),
    ("sgl-project/sglang PR #18906 (2026-02-16), Qwen3.5-397B-A17B TP 8 NEXTN, 3 steps topk 1",
     298.19, 3.368, 323.72, 3.368),
)  # fmt: skip
#: The host-cost preset whose fitted per-layer term prices a draft forward's small kernels.
PER_LAYER_SOURCE_PRESET = "sglang-0.5"
#: Methods SGLang runs on its EAGLE workers (MTP as NEXTN, draft_model as STANDALONE).
EAGLE_WORKER_METHODS = ("eagle", "eagle2", "eagle3", "mtp", "draft_model")
#: Methods that draft a tree (topk > 1), which SGLang 0.5 runs on spec v1.
TREE_METHODS = ("eagle2",)


def v1_step_s_per_run() -> list[float]:
    """Step time spec v1 adds over spec v2 in each measured run (seconds)."""
    return [
        v1_al / v1_tok_s - v2_al / v2_tok_s
        for _source, v1_tok_s, v1_al, v2_tok_s, v2_al in V1_OVER_V2_RUNS
    ]


def spec_v1_per_step_s() -> tuple[float, tuple[float, float]]:
    """Spec v1's ``per_step_s`` and its range over the runs: the measured v1 − v2 step time less
    the per-sequence CPU term the simulator already shows for one sequence with overlap off."""
    shown = load_host_profile(PER_LAYER_SOURCE_PRESET).costs.per_sequence_overhead_s
    runs = v1_step_s_per_run()
    mean = sum(runs) / len(runs)
    return mean - shown, (min(runs) - shown, max(runs) - shown)


def per_forward_s() -> tuple[float, tuple[float, float]]:
    """One draft forward's small kernels: SGLang 0.5's fitted per-layer term and its interval."""
    value = load_host_profile(PER_LAYER_SOURCE_PRESET).costs.per_layer_overhead_s
    fit = host_costs_document()["presets"][PER_LAYER_SOURCE_PRESET]["fit"]["free"][
        "per_layer_overhead_s"
    ]
    low, high = (float(x) for x in fit["ci95_s"])
    return value, (low, high)


def _round(x: float) -> float:
    return float(f"{x:.4g}")


def sglang_entries(
    lookups: dict[str, dict[str, Any]], v044: FitResult
) -> dict[str, dict[str, Any]]:
    """The ``sglang-0.4`` and ``sglang-0.5`` entries of draft_overheads.yaml; ``lookups`` holds
    the CPU-lookup methods' entries (n-gram, lookahead, suffix), carried as they are; ``v044`` is
    the fit of SGLang v0.4.4's per-step cost (``calibration.draft_overhead.fit_sglang_v1``, a
    FitResult with one parameter)."""
    step, (step_lo, step_hi) = spec_v1_per_step_s()
    forward, (fwd_lo, fwd_hi) = per_forward_s()
    runs = "; ".join(
        f"{source}: {1e3 * s:.3f} ms"
        for (source, *_rest), s in zip(V1_OVER_V2_RUNS, v1_step_s_per_run(), strict=True)
    )
    forward_text = (
        f"per_forward_s: one decoder layer's small kernels, host_costs.yaml "
        f"{PER_LAYER_SOURCE_PRESET} per_layer_overhead_s (fitted, 95% {1e3 * fwd_lo:.4f}-"
        f"{1e3 * fwd_hi:.4f} ms)"
    )
    v1 = {
        "per_step_s": _round(step),
        "per_forward_s": _round(forward),
        "per_step_range_s": [_round(step_lo), _round(step_hi)],
        "per_forward_ci95_s": [_round(fwd_lo), _round(fwd_hi)],
        "source": "spec v1 of 0.5 (synchronous EAGLE worker, overlap off): per_step_s = batch-1 "
        f"step time spec v1 shows over spec v2, mean of {runs}, less host_costs.yaml "
        "per_sequence_overhead_s (shown already with overlap off); " + forward_text,
    }
    fitted_step = float(v044.values[0])
    fitted_lo, fitted_hi = (float(x) for x in v044.ci95[0])
    v1_044 = {
        "per_step_s": _round(fitted_step),
        "per_forward_s": _round(forward),
        "per_step_ci95_s": [_round(fitted_lo), _round(fitted_hi)],
        "per_forward_ci95_s": [_round(fwd_lo), _round(fwd_hi)],
        "source": "fitted: SGLang v0.4.4 spec v1 (synchronous EAGLE worker, eager draft extend), "
        "per_step_s on the EAGLE-3 paper's Table 4 batch-1 rows (EAGLE-2 244.10 and EAGLE-3 "
        "373.25 tok/s, Llama-3.1-8B, one H100; their trees as sim/validate.py runs them), one "
        f"parameter on two rows (the later spec v1 measured {1e3 * step:.3f} ms, "
        f"{1e3 * step_lo:.3f}-{1e3 * step_hi:.3f}); " + forward_text,
    }
    v2 = {
        "per_step_s": 0.0,
        "per_forward_s": _round(forward),
        "per_forward_ci95_s": [_round(fwd_lo), _round(fwd_hi)],
        "source": "spec v2 (eagle_worker_v2.py with the overlap scheduler; the default for topk 1 "
        "since sgl-project/sglang PR #21062, 2026-03-21): per_step_s 0, the step's CPU work "
        "runs behind the previous step's forward; " + forward_text,
    }
    model_note = {
        "mtp": "; MTP runs as NEXTN on the EAGLE worker",
        "draft_model": "; STANDALONE on the EAGLE worker; a lower bound, one layer's kernels per "
        "forward of a multi-layer draft model",
        "medusa": "; SGLang runs no Medusa heads (the support table), kept for completeness",
    }

    def entry(base: dict[str, Any], method: str) -> dict[str, Any]:
        # Fresh lists per entry: the YAML then spells every entry out (no anchors).
        copied = {k: list(v) if isinstance(v, list) else v for k, v in base.items()}
        return {**copied, "source": base["source"] + model_note.get(method, "")}

    old = {m: entry(v1_044, m) for m in (*EAGLE_WORKER_METHODS, "medusa")}
    new = {m: entry(v1 if m in TREE_METHODS else v2, m) for m in (*EAGLE_WORKER_METHODS, "medusa")}
    for m in TREE_METHODS:
        new[m]["source"] += "; trees (topk > 1) run on spec v1 (server_args.py)"
    fresh = {m: dict(v) for m, v in lookups.items()}
    return {"sglang-0.4": {**old, **lookups}, "sglang-0.5": {**new, **fresh}}
