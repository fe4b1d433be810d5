"""One probed rate: runs of every seed, lengthened until each seed's verdict is decided.

A probe at rate λ runs each seed with ``base_requests`` Poisson requests, measured on a steady
window (:data:`PROBE_TRIM_FRACTIONS`: the first 20% and the last 10% of requests excluded), and
judges each run with :func:`reports.stability.judge_run`, every criterion on its confidence
interval. A seed whose verdict is *undecided* goes on :data:`GROWTH` times longer, up to
``max_requests`` (the long-run length the answer is read at); in the bracket's lower gap
(``direct``), where a rate that holds becomes the answer and is confirmed at ``max_requests``
anyway, straight there. A longer run continues the shorter one (:mod:`reports.probe_runs`: one
simulation per seed and rate, paused and read at each length), so lengthening costs only the
requests added. A seed still undecided there is **undecided for good**: the rate is
within the noise of the bound, and it neither holds nor fails (no point figure decides it: that
is a coin toss at the bound). A run at ``max_requests`` counts as holding only if its point
figures on the steady window (what the run's summary shows) hold too, and as failing only if they
fail too; where the interval and the point disagree it is undecided.

Seeds combine conservatively: the rate holds only if it holds in **every** seed, so one decided
failure settles the probe and the other seeds' longer runs are skipped; once a seed is undecided
for good the rate cannot hold, and the others get one run each (a failure there still counts).
Seeds are lengthened one at a time, the one whose point figures fail first. A probe may name a
*lead* seed (the one that failed at the method's last failing rate: with
common random numbers the same arrivals come back, scaled, at every rate, so the seed with the
worst bursts stays the worst): it runs alone until it is decided, and the others only if it
holds.

A rate whose short runs lean to hold (every seed run, none failed, each seed not shown to hold
undecided on a short run with point figures that hold) is **provisional**: it counts as holding
and the search moves on above it without lengthening it. It runs at ``max_requests`` only if it
becomes the answer (confirmed like any other, and refuted there the search goes on); a higher
rate that holds makes it moot, capacity being monotone in the rate.

A probe can be **confirmed** at ``max_requests``: to *hold* (every seed runs there, the
reported max rate) or to *fail* (seeds run there one at a time, the failing one first, until one
fails there: the reported first rate above).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reports.stability import FAILS, HOLDS, UNDECIDED
from sim.errors import SpecsimError
from sim.run import resolve_engine, run_scenario
from sim.scenario import validate_document

#: Shares of a probe's requests (by arrival) left out of its steady window: warm-up, then drain.
PROBE_TRIM_FRACTIONS = (0.2, 0.1)
#: An undecided seed's next run is this many times longer (capped at the probe's longest).
GROWTH = 4
#: A seed undecided at the longest run, for good: the rate is within the noise of the bound.
GRAY = "gray"
#: What a probe can be confirmed to do at its longest runs.
CONFIRM_HOLDS, CONFIRM_FAILS = "holds", "fails"
#: A saturation run gives each client at least this many requests, so most of the run is steady.
REQUESTS_PER_CLIENT = 4
#: Linux prctl option: the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1
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


def saturation_document(
    document: dict[str, Any], concurrency: int, seed: int, num_requests: int
) -> dict[str, Any]:
    """``document`` as a closed loop of ``concurrency`` clients with no think time (the queue
    never empties), ``num_requests`` requests, measured on the probes' steady window."""
    out = probe_document(document, 1.0, seed, num_requests)
    out["workload"]["arrival"] = {"process": "closed_loop", "concurrency": concurrency}
    return out


def run_saturation(
    document: dict[str, Any], base_dir: str, source: str, seed: int, num_requests: int
) -> float | str:
    """The node's saturation throughput in requests/s: a closed loop that keeps the engine's
    batch full (``min(max_num_seqs, num_requests / REQUESTS_PER_CLIENT)`` clients), measured on
    the steady window. No open-loop rate above it can be stable, so it is where the search
    starts. Returns the message of the SpecsimError that stopped it instead."""
    try:
        engine = resolve_engine(validate_document(document, source), Path(base_dir))
        concurrency = max(1, min(engine.max_num_seqs, num_requests // REQUESTS_PER_CLIENT))
        closed = saturation_document(document, concurrency, seed, num_requests)
        result = run_scenario(validate_document(closed, source), Path(base_dir))
    except SpecsimError as exc:
        return str(exc)
    return float(result.summary.request_throughput_req_s)


@dataclass(frozen=True)
class ProbeRan:
    """A probe run that finished: the stability judgement, the summary figures the plan keeps
    (:data:`KEPT_SUMMARY_KEYS` and its wall time) and the requests simulated for it (fewer than
    its length when it continued a shorter run; None: all of them)."""

    judgement: dict[str, Any]
    summary: dict[str, Any]
    simulated_requests: int | None = None


@dataclass(frozen=True)
class ProbeRefused:
    """A probe the simulator refused (the message of the SpecsimError that stopped it, or of a
    judgement that cannot be made): the plan reports it as the method's reason."""

    reason: str


#: What one probe run gives: a tagged result, never a bare string or dict.
ProbeOutcome = ProbeRan | ProbeRefused


@dataclass
class SeedRun:
    """One run of one seed at the probe's rate."""

    seed: int
    num_requests: int
    judgement: dict[str, Any]
    summary: dict[str, Any]
    #: Requests simulated for it: fewer than ``num_requests`` when it continued a shorter run.
    simulated_requests: int = 0

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
    lead: int | None = None
    runs: dict[int, list[SeedRun]] = field(default_factory=dict)
    #: CONFIRM_HOLDS or CONFIRM_FAILS once the rate is the answer or the first rate above it.
    confirm: str | None = None
    #: Lengthen an undecided seed straight to ``max_requests`` (in the bracket's lower gap,
    #: where a rate that holds becomes the answer and would be confirmed there anyway).
    direct: bool = False

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

    def _at_longest(self, seed: int) -> bool:
        run = self.last(seed)
        return run is not None and run.num_requests >= self.max_requests

    def seed_verdict(self, seed: int) -> str:
        """``holds`` or ``fails`` (decided), ``gray`` (undecided at the longest run: within the
        noise of the bound), or ``undecided`` (not run, or undecided short of the longest run).
        At the longest run the interval and the point figures must agree."""
        run = self.last(seed)
        if run is None:
            return UNDECIDED
        if run.num_requests < self.max_requests:
            return run.verdict
        point = run.judgement.get("point_verdict")
        return run.verdict if run.verdict != UNDECIDED and point == run.verdict else GRAY

    def decided_by(self, seed: int) -> str | None:
        """``interval`` when the seed's verdict was shown at 95% confidence (and, at the
        longest run, its point figures agree); ``gray`` when it is undecided for good; None if
        it was not run to a verdict."""
        verdict = self.seed_verdict(seed)
        return "interval" if verdict in (HOLDS, FAILS) else "gray" if verdict == GRAY else None

    def _next_length(self, seed: int) -> int | None:
        """The run ``seed`` needs next in the ordinary search, if any."""
        run = self.last(seed)
        if run is None:
            return self.base_requests
        if run.verdict == UNDECIDED and run.num_requests < self.max_requests:
            growth = self.max_requests if self.direct else GROWTH * run.num_requests
            return min(growth, self.max_requests)
        return None

    def pending(self) -> list[tuple[int, int]]:
        """(seed, requests) runs still needed."""
        verdicts = {seed: self.seed_verdict(seed) for seed in self.seeds}
        if self.confirm == CONFIRM_HOLDS:
            if any(v in (FAILS, GRAY) for v in verdicts.values()):
                return []
            order = self._lead_first()
            first = [s for s in order if not self._at_longest(s)]
            lead = order[0]
            if lead in first and self.lead in self.seeds:
                return [(lead, self.max_requests)]
            return [(seed, self.max_requests) for seed in first]
        if self.confirm == CONFIRM_FAILS:
            if any(v == FAILS and self._at_longest(s) for s, v in verdicts.items()):
                return []
            # Failing seeds first: one seed at a time, until one fails at the longest run.
            order = sorted(self._lead_first(), key=lambda s: verdicts[s] != FAILS)
            nxt = next((s for s in order if not self._at_longest(s)), None)
            return [] if nxt is None else [(nxt, self.max_requests)]
        if FAILS in verdicts.values():
            return []
        if GRAY in verdicts.values():
            # The rate cannot hold; one run of each other seed may still show it fails.
            return [(s, self.base_requests) for s in self.seeds if self.last(s) is None]
        if self.provisional:
            return []
        first = [self.lead] if self.lead in self.seeds else []
        if first and (verdicts[first[0]] == HOLDS or self._short_point_holds(first[0])):
            first = []
        needed = []
        for seed in first or self.seeds:
            length = self._next_length(seed)
            if length is not None:
                needed.append((seed, length))
        if any(length == self.base_requests for _, length in needed):
            return [(s, n) for s, n in needed if n == self.base_requests]
        # Longer runs one seed at a time, the likeliest to fail first (its point figures fail):
        # a failure or an undecided-for-good seed settles the probe without the others.
        needed.sort(key=lambda item: self._point(item[0]) != FAILS)
        return needed[:1]

    def _short_point_holds(self, seed: int) -> bool:
        """Undecided on a run shorter than the longest, with point figures that hold, in the
        ordinary search (not under confirmation)."""
        run = self.last(seed)
        return (
            self.confirm is None
            and run is not None
            and run.num_requests < self.max_requests
            and run.verdict == UNDECIDED
            and self._point(seed) == HOLDS
        )

    @property
    def provisional(self) -> bool:
        """Whether the rate is taken to hold for now, unconfirmed: every seed has run, none
        failed, and each one not shown to hold is undecided on a short run whose point figures
        hold (:meth:`_short_point_holds`). The search moves on above it; if it comes to be the
        answer it is confirmed in every seed at the longest runs like any other, and if a higher
        rate holds it is never needed (capacity is monotone in the rate)."""
        return all(
            self.seed_verdict(seed) == HOLDS or self._short_point_holds(seed) for seed in self.seeds
        ) and any(self.seed_verdict(seed) != HOLDS for seed in self.seeds)

    def _point(self, seed: int) -> str | None:
        run = self.last(seed)
        return None if run is None else run.judgement.get("point_verdict")

    def _lead_first(self) -> list[int]:
        return sorted(self.seeds, key=lambda s: s != self.lead)

    def record(self, seed: int, num_requests: int, outcome: ProbeRan) -> None:
        """Add a finished run of ``seed``."""
        simulated = (
            num_requests if outcome.simulated_requests is None else outcome.simulated_requests
        )
        run = SeedRun(seed, num_requests, outcome.judgement, outcome.summary, simulated)
        self.runs.setdefault(seed, []).append(run)
        self.runs[seed].sort(key=lambda r: r.num_requests)

    @property
    def outcome(self) -> bool | None:
        """True if the rate held in every seed, False if it failed in one, None if neither is
        shown (some seed undecided for good). Under CONFIRM_FAILS it fails only on a seed
        failing at the longest run."""
        verdicts = [self.seed_verdict(seed) for seed in self.seeds]
        if self.confirm == CONFIRM_FAILS:
            failed = any(self.seed_verdict(s) == FAILS and self._at_longest(s) for s in self.seeds)
            if failed:
                return False
            return (
                True
                if all(
                    v == HOLDS and self._at_longest(s)
                    for s, v in zip(self.seeds, verdicts, strict=True)
                )
                else None
            )
        if FAILS in verdicts:
            return False
        return True if all(v == HOLDS for v in verdicts) or self.provisional else None

    @property
    def holds(self) -> bool:
        """Whether the rate held in every seed (meaningful once nothing is pending)."""
        return self.outcome is True

    def confirmed(self) -> bool:
        """Whether the probe's outcome was read at the longest runs: every seed there if it
        holds, one failing seed there if it fails."""
        if self.outcome is True:
            return all(self._at_longest(s) for s in self.seeds)
        return any(self.seed_verdict(s) == FAILS and self._at_longest(s) for s in self.seeds)

    def seed_holds(self, seed: int) -> bool | None:
        """True or False once decided for ``seed``; None if undecided for good or cut short by
        another seed's failure."""
        verdict = self.seed_verdict(seed)
        return True if verdict == HOLDS else False if verdict == FAILS else None

    def first_failing(self) -> int | None:
        """The first seed whose verdict is a failure (None if none failed)."""
        return next((s for s in self.seeds if self.seed_verdict(s) == FAILS), None)

    def reason(self) -> str:
        """Why the rate failed, from the first failing seed's failing or undecided checks."""
        for seed in self.seeds:
            run = self.last(seed)
            if run is None or self.seed_verdict(seed) == HOLDS:
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
