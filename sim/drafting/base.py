"""The interface every drafting strategy implements, and what they share.

A strategy answers four questions for the engine: what it proposes per verify step (a chain of k
drafts or a tree), how long its drafting takes for a step's batch, what it keeps in GPU memory
(weights, KV per token), and, through its acceptance model, how many drafts each request's steps
accept.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from sim.acceptance.config import build_acceptance_model
from sim.acceptance.plan import AcceptanceModel, Proposal
from sim.catalogue import GPU, Model
from sim.cost_model import StepCostModel
from sim.engine.drafter import DraftWork, StepPlan

if TYPE_CHECKING:
    from sim.scenario import Scenario

FloatArray = NDArray[np.float64]


class Strategy(ABC):
    """A drafting strategy as the engine sees it."""

    name: str = "abstract"
    #: How the engine runs this combination: "supported", "experimental" or "unchecked".
    support_level: str = "supported"
    #: Tokens a verify step computes per sequence besides its input token and its drafts.
    extra_tokens_per_decode: int = 0

    def __init__(self, proposal: Proposal | None, acceptance: AcceptanceModel | None) -> None:
        self.proposal = proposal
        self.acceptance = acceptance

    @abstractmethod
    def draft_time_s(self, work: DraftWork) -> FloatArray:
        """Seconds of drafting each step adds (one entry per step of ``work``)."""

    def extra_kv_bytes_per_token(self) -> float:
        """KV bytes per token the drafter keeps beside the target's (summed over GPUs)."""
        return 0.0

    def weight_bytes_per_gpu(self) -> float:
        """Bytes of drafter weights each of the target's GPUs holds."""
        return 0.0

    def plan(self, num_decode_tokens: NDArray[np.int64], rng: np.random.Generator) -> StepPlan:
        """Every request's verify steps: draft tokens proposed and accepted at each."""
        if self.proposal is None or self.acceptance is None:
            return StepPlan.without_speculation(len(num_decode_tokens))
        plan = self.acceptance.plan(num_decode_tokens, self.proposal, rng)
        return StepPlan.of(plan)

    def describe(self) -> dict[str, Any]:
        """The strategy's settings and its acceptance model, for results and reports."""
        out: dict[str, Any] = {"method": self.name, "engine_support": self.support_level}
        if self.proposal is not None:
            out["num_draft_tokens"] = self.proposal.num_draft_tokens
            out["depth"] = self.proposal.depth
            if self.proposal.tree_widths is not None:
                out["tree_widths"] = list(self.proposal.tree_widths)
        if self.acceptance is not None:
            out["acceptance"] = self.acceptance.describe()
            out["expected_acceptance_length"] = (
                self.acceptance.expected_acceptance_length(self.proposal)
                if self.proposal is not None
                else 1.0
            )
        return out


class NoSpeculation(Strategy):
    """Plain autoregressive decoding: one token per sequence per step, no drafting cost."""

    name = "none"

    def __init__(self) -> None:
        super().__init__(None, None)

    def draft_time_s(self, work: DraftWork) -> FloatArray:
        return np.zeros(len(np.atleast_1d(work.num_seqs)))


@dataclass(frozen=True)
class BuildContext:
    """Everything a strategy's builder may read: the scenario and the node it runs on."""

    scenario: Scenario
    model: Model
    gpu: GPU
    cost_model: StepCostModel
    engine_preset: str
    base_dir: Path

    @property
    def method(self) -> str:
        """``speculation.method``."""
        return self.scenario.speculation.method

    @property
    def tp(self) -> int:
        """The target's tensor-parallel degree."""
        return self.cost_model.tp

    def acceptance(self, proposal: Proposal | None = None) -> AcceptanceModel:
        """The acceptance model ``speculation.acceptance`` names, or the shipped default.

        Raise ScenarioError if the key is invalid, or omitted with nothing shipped.
        """
        del proposal
        scenario = self.scenario
        model_name = scenario.model if isinstance(scenario.model, str) else scenario.model.name
        # A draft model's acceptance is the (target, draft) pair's.
        draft = scenario.speculation.draft_model if self.method == "draft_model" else None
        return build_acceptance_model(
            scenario.speculation.acceptance,
            self.method,
            model_name,
            scenario.workload.dataset,
            scenario.workload.temperature,
            self.base_dir,
            draft_model=draft if isinstance(draft, str) or draft is None else draft.name,
        )


def build_no_speculation(ctx: BuildContext) -> Strategy:
    """The strategy of method ``none``: no drafts, plain decoding."""
    return NoSpeculation()
