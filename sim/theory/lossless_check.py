"""A statistical check that speculative sampling leaves the target's output distribution unchanged.

A synthetic language model over a small vocabulary stands in for the target and the draft: both are
first-order Markov chains (the next-token distribution depends on the previous token, so each draft
position is conditioned on the drafted context, as in a real engine). The draft reads the wrong
context and is over-confident, so it is accepted only part of the time and the residual matters.
The check generates the first three tokens after a random context two ways, by speculative steps and
by sampling the target directly, and compares the two samples with chi-square tests of homogeneity
(Pearson, via ``scipy.stats.chi2_contingency``) on the first token, on the pair of tokens 1-2 and on
the pair of tokens 2-3. Cells whose expected count under the exact target is below five are pooled
into one cell, chosen from the exact distribution rather than from the data. The model and the
samplers are :mod:`sim.theory.markov_model`; here are the tests and the report.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.stats import chi2_contingency

from sim.errors import ScenarioError
from sim.theory.markov_model import (
    SEQUENCE_TOKENS,
    MarkovPair,
    chain_sequences,
    direct_sequences,
    dynamic_tree_sequences,
    markov_pair,
    tree_sequences,
)
from sim.theory.tree_sampling import (
    StaticTree,
)

MIN_EXPECTED_COUNT = 5.0


@dataclass(frozen=True, slots=True)
class ChiSquareTest:
    """One chi-square test of homogeneity between speculative and direct samples of a quantity."""

    quantity: str
    statistic: float
    dof: int
    p_value: float
    num_cells: int


@dataclass(frozen=True, slots=True)
class SamplerCheck:
    """The verdict for one sampler: its tests, pass or fail, and the acceptance it showed.

    ``mean_accepted_tokens_per_step`` counts accepted draft tokens (bonus excluded);
    ``mean_emitted_tokens_per_step`` includes the correction or bonus token.
    """

    sampler: str
    broken_residual: bool
    tests: tuple[ChiSquareTest, ...]
    passed: bool
    min_p_value: float
    num_steps: int
    mean_accepted_tokens_per_step: float
    mean_emitted_tokens_per_step: float


@dataclass(frozen=True, slots=True)
class LosslessReport:
    """The lossless check's result, self-contained: parameters, seed, wall time and every test.

    A sampler passes when every one of its tests has a p-value of at least
    ``significance_level / number of tests`` (Bonferroni, so the family-wise false alarm rate is at
    most ``significance_level``).
    """

    samples: int
    seed: int
    vocab_size: int
    k: int
    tree_widths: tuple[int, ...]
    dynamic_tree: tuple[int, int, int]
    significance_level: float
    broken_residual: bool
    target_acceptance_rate: float
    checks: tuple[SamplerCheck, ...]
    wall_time_s: float

    @property
    def passed(self) -> bool:
        """Whether every sampler passed."""
        return all(check.passed for check in self.checks)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary of the whole report."""
        result = asdict(self)
        result["passed"] = self.passed
        return result

    def format_text(self) -> str:
        """A short human-readable table of the tests."""
        variant = "BROKEN residual (negative control)" if self.broken_residual else "exact residual"
        lines = [
            f"Lossless check: {self.samples} speculative vs {self.samples} direct sequences, "
            f"vocab {self.vocab_size}, chain k={self.k}, tree widths {list(self.tree_widths)}, "
            f"dynamic tree (topk, steps, tokens) {self.dynamic_tree}, seed {self.seed}, {variant}",
            f"draft/target overlap sum(min(p, q)) = {self.target_acceptance_rate:.3f}; "
            f"pass if every p-value >= {self.significance_level:g} / tests",
        ]
        for check in self.checks:
            verdict = "PASS" if check.passed else "FAIL"
            lines.append(
                f"  {check.sampler:<7} {verdict}  steps {check.num_steps}, accepted/step "
                f"{check.mean_accepted_tokens_per_step:.3f}, emitted/step "
                f"{check.mean_emitted_tokens_per_step:.3f} (bonus included)"
            )
            for test in check.tests:
                lines.append(
                    f"      {test.quantity:<12} chi2 {test.statistic:10.2f}  dof {test.dof:4d}  "
                    f"p {test.p_value:.3g}"
                )
        lines.append(f"wall time {self.wall_time_s:.2f} s")
        return "\n".join(lines)


def _cell_index(sequences: np.ndarray, columns: tuple[int, ...], vocab_size: int) -> np.ndarray:
    index = np.zeros(sequences.shape[0], dtype=np.int64)
    for column in columns:
        index = index * vocab_size + sequences[:, column]
    return index


def homogeneity_test(
    quantity: str,
    speculative_cells: np.ndarray,
    direct_cells: np.ndarray,
    exact_prob: np.ndarray,
    num_samples: int,
) -> ChiSquareTest:
    """Chi-square test that two samples of cell indices come from one distribution.

    Cells whose expected count ``num_samples * exact_prob`` is below five are pooled into one cell
    so that the chi-square approximation holds. Raise ScenarioError if fewer than two cells remain.
    """
    num_cells = exact_prob.size
    counts = np.stack(
        [
            np.bincount(speculative_cells, minlength=num_cells),
            np.bincount(direct_cells, minlength=num_cells),
        ]
    )
    rare = exact_prob * num_samples < MIN_EXPECTED_COUNT
    table = counts[:, ~rare]
    if np.any(rare):
        table = np.column_stack([table, counts[:, rare].sum(axis=1)])
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2:
        raise ScenarioError(f"homogeneity_test: {quantity} has fewer than two usable cells")
    result = chi2_contingency(table, correction=False)
    return ChiSquareTest(
        quantity=quantity,
        statistic=float(result.statistic),
        dof=int(result.dof),
        p_value=float(result.pvalue),
        num_cells=int(table.shape[1]),
    )


def _exact_cell_probs(pair: MarkovPair, context_prob: np.ndarray) -> dict[str, np.ndarray]:
    # Token 1 ~ context @ T; (t1, t2) ~ pi1(t1) T[t1, t2]; (t2, t3) ~ pi2(t2) T[t2, t3].
    first = context_prob @ pair.target_prob
    second = first @ pair.target_prob
    return {
        "token 1": first,
        "tokens 1-2": (first[:, None] * pair.target_prob).ravel(),
        "tokens 2-3": (second[:, None] * pair.target_prob).ravel(),
    }


def run_lossless_check(
    samples: int = 50_000,
    seed: int = 0,
    vocab_size: int = 12,
    k: int = 4,
    broken_residual: bool = False,
    tree_widths: tuple[int, ...] = (2, 2, 2),
    significance_level: float = 1e-3,
    dynamic_tree: tuple[int, int, int] = (3, 3, 8),
) -> LosslessReport:
    """Run the chain, static-tree and dynamic-tree samplers ``samples`` times each and test them
    against the target.

    Deterministic for a given seed: every random draw comes from a named stream of
    ``numpy.random.SeedSequence(seed)``. Raise ScenarioError if ``samples < 100``,
    ``vocab_size < 4``, ``k < 1``, a tree width is below one or ``significance_level`` is not in
    (0, 1).
    """
    if samples < 100:
        raise ScenarioError(f"lossless check: samples must be >= 100, got {samples}")
    if vocab_size < 4:
        raise ScenarioError(f"lossless check: vocab_size must be >= 4, got {vocab_size}")
    if k < 1:
        raise ScenarioError(f"lossless check: k must be >= 1, got {k}")
    if not 0.0 < significance_level < 1.0:
        raise ScenarioError(
            f"lossless check: significance_level must be in (0, 1), got {significance_level}"
        )
    tree = StaticTree.from_widths(tree_widths)
    started_s = time.perf_counter()
    pair = markov_pair(vocab_size)
    context_prob = np.full(vocab_size, 1.0 / vocab_size)
    # One independent stream per purpose, so that the direct sample never shares draws with either
    # speculative run.
    streams = [
        np.random.Generator(np.random.PCG64(child))
        for child in np.random.SeedSequence(seed).spawn(8)
    ]
    direct_contexts, chain_contexts, tree_contexts = (
        stream.integers(0, vocab_size, size=samples) for stream in streams[:3]
    )
    direct = direct_sequences(pair, direct_contexts, SEQUENCE_TOKENS, streams[3])
    exact = _exact_cell_probs(pair, context_prob)
    quantities = {"token 1": (0,), "tokens 1-2": (0, 1), "tokens 2-3": (1, 2)}

    runs = {
        "chain": chain_sequences(
            pair, chain_contexts, k, SEQUENCE_TOKENS, streams[4], broken_residual=broken_residual
        ),
        "tree": tree_sequences(
            pair,
            tree_contexts,
            tree,
            SEQUENCE_TOKENS,
            streams[5],
            broken_residual=broken_residual,
        ),
        "dynamic": dynamic_tree_sequences(
            pair,
            streams[6].integers(0, vocab_size, size=samples),
            dynamic_tree,
            SEQUENCE_TOKENS,
            streams[7],
            broken_residual=broken_residual,
        ),
    }
    checks = []
    for sampler, run in runs.items():
        tests = tuple(
            homogeneity_test(
                quantity,
                _cell_index(run.sequences, columns, vocab_size),
                _cell_index(direct, columns, vocab_size),
                exact[quantity],
                samples,
            )
            for quantity, columns in quantities.items()
        )
        min_p = min(test.p_value for test in tests)
        checks.append(
            SamplerCheck(
                sampler=sampler,
                broken_residual=broken_residual,
                tests=tests,
                passed=min_p >= significance_level / len(tests),
                min_p_value=min_p,
                num_steps=run.num_steps,
                mean_accepted_tokens_per_step=run.mean_accepted_tokens_per_step,
                mean_emitted_tokens_per_step=run.mean_accepted_tokens_per_step + 1.0,
            )
        )
    return LosslessReport(
        samples=samples,
        seed=seed,
        vocab_size=vocab_size,
        k=k,
        tree_widths=tree.widths,
        dynamic_tree=dynamic_tree,
        significance_level=significance_level,
        broken_residual=broken_residual,
        target_acceptance_rate=pair.mean_overlap,
        checks=tuple(checks),
        wall_time_s=time.perf_counter() - started_s,
    )
