"""Acceptance models: how many draft tokens each speculative verify step accepts, per request.

Acceptance depends on a request's content, not on its batch, so a model draws every verify step of
every request up front (:class:`AcceptancePlan`); the engine then gathers the steps it runs.
"""

from sim.acceptance.config import AcceptanceConfig, build_acceptance_model
from sim.acceptance.models import ConstantAlphaModel, PositionalAcceptanceModel, TargetTauModel
from sim.acceptance.plan import AcceptanceModel, AcceptancePlan, Proposal
from sim.acceptance.traces import TraceReplayModel, TraceSet
from sim.acceptance.tree import eagle2_effective_proposal

__all__ = [
    "AcceptanceConfig",
    "AcceptanceModel",
    "AcceptancePlan",
    "ConstantAlphaModel",
    "PositionalAcceptanceModel",
    "Proposal",
    "TargetTauModel",
    "TraceReplayModel",
    "TraceSet",
    "build_acceptance_model",
    "eagle2_effective_proposal",
]
