"""Fit the acceptance of turboderp/Qwama-0.5B-Instruct drafting for Llama-3-70B on ShareGPT on the
vLLM blog's 1 request/s row, the only row the fit sees.

No acceptance rate of this pair was found published, so the draft-model rows of the vLLM blog of
2024-10-17 (``tools/quoted_validation_points.py``) run with one constant per-position acceptance
rate ``a`` (each of the k = 4 drafts accepted with probability ``a`` given the ones before it).
This script finds the ``a`` whose simulated end-to-end latency ratio at 1 request/s (without /
with speculation, the row's statistic, each arm simulated as ``specsim validate`` simulates it)
equals the ratio read off the blog's bars, by bisection, and the interval of ``a`` between the
blog's printed "Up to 1.5x" and the bar reading plus one pixel of each bar (the reading's
resolution). The result goes into ``sim/data/acceptance_profiles.yaml`` under
``draft_model/llama-3.1-70b+qwama-0.5b/sharegpt``; the rows at 2, 4, 8 and 10 requests/s are
never seen by the fit and are judged out of sample.

Run ``python -m tools.fit_blog_draft_acceptance`` from the checkout (about half a minute).
"""

from __future__ import annotations

from typing import Any

from sim.run import run_scenario
from sim.scenario import Scenario
from sim.validation import load_points
from sim.validation.points import ValidationPoint
from sim.validation.scenarios import scenario_document, traces_dir

#: The one row the fit sees.
FIT_POINT = "vllm-blog-2410-llama-3-70b-draft-qwama-0.5b-k4-qps1"
#: The blog's printed value at 1 request/s ("Up to 1.5x Speedup at QPS=1", figure 5).
PRINTED = 1.5
#: One pixel of a bar top in figure 5 (144 px a second) in seconds.
PIXEL_S = 1 / 144
#: The bar readings of the fitted row (s): with speculation, without.
SPEC_S, BASE_S = 1.642, 2.538
#: The shipped profile this fit writes.
PROFILE_KEY = "draft_model/llama-3.1-70b+qwama-0.5b/sharegpt"
#: What the last run of :func:`main` printed (the catalogue, presets and cost model of that tree):
#: the fitted rate and its interval (from the printed 1.5x to the bar reading plus a pixel).
FITTED_RATE = 0.499
FITTED_INTERVAL = (0.4805, 0.5045)
NUM_SPECULATIVE_TOKENS = 4


def profile_entry() -> dict[str, Any]:
    """The shipped profile entry of the fit (``acceptance_profiles.yaml``, :data:`PROFILE_KEY`)."""
    return {
        "temperature": 0.0,
        "temperature_note": "vLLM's benchmark_serving.py of 2024 sends temperature 0 (greedy)",
        "conditional_rates": [FITTED_RATE] * NUM_SPECULATIVE_TOKENS,
        "fit": (
            "one constant per-position rate fitted by simulation on the vLLM blog's 1 request/s "
            "row alone (end-to-end latency ratio 1.546 read off figure 5's bars; "
            "tools/fit_blog_draft_acceptance.py); interval from the printed 'Up to 1.5x' to the "
            "bar reading plus one pixel per bar; the rows at 2-10 requests/s are out of sample"
        ),
        "fit_interval": list(FITTED_INTERVAL),
        "citation": (
            'vLLM blog "How Speculative Decoding Boosts vLLM Performance by up to 2.8x" '
            "(2024-10-17), figure 5: Llama-3-70B on four H100s, turboderp/Qwama-0.5B-Instruct "
            "drafting k = 4, ShareGPT; no published acceptance rate of this pair was found"
        ),
        "source_ids": ["vllm_blog_2024_10"],
        "rows": [{"point_id": FIT_POINT}],
    }


def _mean_e2e_ms(point: ValidationPoint, rate: float | None) -> float:
    """The simulated mean end-to-end latency of ``point``'s arm: speculative with the constant
    per-position acceptance ``rate``, or the baseline when ``rate`` is None."""
    document = scenario_document(point, "none" if rate is None else None)
    if rate is not None:
        k = document["speculation"]["num_speculative_tokens"]
        document["speculation"]["acceptance"] = {"per_position": [rate] * k}
    summary = run_scenario(Scenario.model_validate(document), traces_dir()).summary
    value = summary.latency_stat_ms("e2e_latency", "mean")
    if value is None:
        raise SystemExit(f"{point.point_id}: the run measured no end-to-end latency")
    return float(value)


def fit(point: ValidationPoint, target: float, base_ms: float, tol: float = 1e-4) -> float:
    """The rate whose latency ratio is ``target``, by bisection on [0.01, 0.99]."""
    low, high = 0.01, 0.99
    while high - low > tol:
        middle = (low + high) / 2
        if base_ms / _mean_e2e_ms(point, middle) < target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def main() -> None:
    """Print the fitted rate, its interval and the ratios they give."""
    point = next(p for p in load_points() if p.point_id == FIT_POINT)
    base_ms = _mean_e2e_ms(point, None)
    reading_error = (PIXEL_S / SPEC_S + PIXEL_S / BASE_S) * point.measured
    targets = {
        "fit": point.measured,
        "low": PRINTED,
        "high": point.measured + reading_error,
    }
    for name, target in targets.items():
        rate = fit(point, target, base_ms)
        ratio = base_ms / _mean_e2e_ms(point, rate)
        print(f"{name}: target {target:.4f} -> rate {rate:.4f} (simulated ratio {ratio:.4f})")
    print(f"baseline mean end-to-end latency {base_ms:.1f} ms (measured {BASE_S * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
