"""Acceptance of the MoE models' MTP modules and EAGLE-3 heads from published figures, and the
reason given where none is published."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.acceptance.config import build_acceptance_model
from sim.acceptance.plan import Proposal
from sim.errors import ScenarioError


def test_deepseek_mtp_uses_the_reported_second_token_acceptance() -> None:
    model = build_acceptance_model(None, "mtp", "deepseek-v3", "sharegpt", 0.0, Path.cwd())
    # DeepSeek-V3 report §5.4.3: 85-90 % of second tokens accepted; the midpoint is shipped.
    assert model.expected_acceptance_length(Proposal.chain(1)) == pytest.approx(1.875)


def test_gpt_oss_eagle3_at_temperature_zero_reaches_the_published_mean_length() -> None:
    model = build_acceptance_model(None, "eagle3", "gpt-oss-120b", "gsm8k", 0.0, Path.cwd())
    # nebius/EAGLE3-gpt-oss-120b: tau 2.81 at K = 7.
    assert model.expected_acceptance_length(Proposal.chain(7)) == pytest.approx(2.81, rel=1e-3)


def test_a_pair_with_nothing_published_says_so() -> None:
    with pytest.raises(
        ScenarioError, match=r"GLM-4\.5 ships one MTP layer .* no per-position acceptance"
    ):
        build_acceptance_model(None, "mtp", "glm-4.5", "sharegpt", 0.0, Path.cwd())
