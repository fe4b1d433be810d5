"""One probed rate: runs of every seed, lengthened until each seed's verdict is decided.

A probe at rate λ runs each seed with ``base_requests`` Poisson requests, measured on a steady
window (:data:`PROBE_TRIM_FRACTIONS`: the first 20% and the last 10% of requests excluded), and
judges each run with :func:`reports.stability.judge_run`. A seed whose verdict is *undecided*
runs again with twice the requests, up to ``max_requests``; a seed still undecided there counts
as failing, since the rate was not shown to hold. Seeds combine conservatively: the rate holds
only if it holds in **every** seed, so one decided failure settles the probe and the other seeds'
longer runs are skipped.
"""

from __future__ import annotations

import copy
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reports.stability import FAILS, HOLDS, UNDECIDED, Target, judge_run
from sim.errors import SpecsimError
from sim.run import run_scenario
from sim.scenario import validate_document

#: Shares of a probe's requests (by arrival) left out of its steady window: warm-up, then drain.
PROBE_TRIM_FRACTIONS = (0.2, 0.1)
#: Summary figures kept per run (the rest is in the run's records, which are not kept).
KEPT_SUMMARY_KEYS = (
    "output_throughput_tok_s",
    "request_throughput_req_s",
    "mean_batch_size",
    "kv_cache_peak_usage",
    "num_preemptions",
    "wall_time_s",
)


def probe_document(
    document: dict[str, Any], rate_per_s: float, seed: int, num_requests: int
) -> dict[str, Any]:
    """``document`` with Poisson arrivals at ``rate_per_s``, ``num_requests``, ``seed`` and the
    probes' steady window (any measurement section of the scenario is replaced)."""
    out = copy.deepcopy(document)
    workload = dict(out.get("workload") or {})
    workload["arrival"] = {"process": "poisson", "rate_per_s": rate_per_s}
    workload["num_requests"] = num_requests
    out["workload"] = workload
    out["seed"] = seed
    warmup, cooldown = PROBE_TRIM_FRACTIONS
    out["measurement"] = {"window": "steady", "warmup_fraction": warmup,
                          "cooldown_fraction": cooldown}  # fmt: skip
    return out


def run_probe(
    document: dict[str, Any], base_dir: str, source: str, targets: list[Target]
) -> dict[str, Any] | str:
    """One seed at one rate: its judgement and a few summary figures, or the message of the
    SpecsimError that stopped it."""
    try:
        scenario = validate_document(document, source)
        result = run_scenario(scenario, Path(base_dir), step_records="summary")
    except SpecsimError as exc:
        return str(exc)
    try:
        judgement = judge_run(result.requests, result.steps, targets, PROBE_TRIM_FRACTIONS)
    except ValueError as exc:
        return f"{source}: {exc}"
    summary = {key: result.summary[key] for key in KEPT_SUMMARY_KEYS}
    return {"judgement": judgement, "summary": summary}


def ignore_sigint() -> None:
    """Worker initializer: Ctrl-C reaches the process group; only the parent decides."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@dataclass
class SeedRun:
    """One run of one seed at the probe's rate."""

    seed: int
    num_requests: int
    judgement: dict[str, Any]
    summary: dict[str, Any]

    @property
    def verdict(self) -> str:
        return str(self.judgement["verdict"])


@dataclass
class Probe:
    """A rate under test: each seed's runs, shortest first. Raise ValueError on bad lengths."""

    rate_per_s: float
    seeds: list[int]
    base_requests: int
    max_requests: int
    runs: dict[int, list[SeedRun]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 < self.base_requests <= self.max_requests:
            raise ValueError(
                f"need 0 < base_requests <= max_requests, got "
                f"{self.base_requests}, {self.max_requests}"
            )

    def last(self, seed: int) -> SeedRun | None:
        """The longest run of ``seed`` so far."""
        runs = self.runs.get(seed) or []
        return runs[-1] if runs else None

    def seed_verdict(self, seed: int) -> str:
        """``holds``, ``fails``, or ``undecided`` (not run, or undecided at its longest run)."""
        run = self.last(seed)
        return UNDECIDED if run is None else run.verdict

    def pending(self) -> list[tuple[int, int]]:
        """(seed, requests) runs still needed; none once a seed has failed (every-seed rule)."""
        if any(self.seed_verdict(seed) == FAILS for seed in self.seeds):
            return []
        needed = []
        for seed in self.seeds:
            run = self.last(seed)
            if run is None:
                needed.append((seed, self.base_requests))
            elif run.verdict == UNDECIDED and run.num_requests < self.max_requests:
                needed.append((seed, min(2 * run.num_requests, self.max_requests)))
        return needed

    def record(self, seed: int, num_requests: int, outcome: dict[str, Any]) -> None:
        """Add a finished run of ``seed``."""
        run = SeedRun(seed, num_requests, outcome["judgement"], outcome["summary"])
        self.runs.setdefault(seed, []).append(run)

    @property
    def holds(self) -> bool:
        """Whether the rate held in every seed (meaningful once nothing is pending)."""
        return all(self.seed_verdict(seed) == HOLDS for seed in self.seeds)

    def seed_holds(self, seed: int) -> bool | None:
        """True or False once decided for ``seed`` (undecided at the longest run is False);
        None if the seed's runs were cut short by another seed's failure."""
        verdict = self.seed_verdict(seed)
        if verdict == HOLDS:
            return True
        run = self.last(seed)
        if verdict == FAILS or (run is not None and run.num_requests >= self.max_requests):
            return False
        return None

    def reason(self) -> str:
        """Why the rate failed, from the first failing seed's failing or undecided checks."""
        for seed in self.seeds:
            run = self.last(seed)
            if run is None or run.verdict == HOLDS:
                continue
            bad = [c for c in run.judgement["checks"] if c["verdict"] != HOLDS]
            text = ", ".join(
                f"{c['name']} {_fmt(c['value'])} [{_fmt(c['low'])}, {_fmt(c['high'])}] "
                f"{c['verdict']} (limit {c['limit']})"
                for c in bad
            )
            return f"seed {seed}, {run.num_requests} requests: {text}"
        return ""


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
