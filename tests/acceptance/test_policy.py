"""Adaptive speculation: per-position acceptance, the policies' rules, exactness and bad input.

Why the numbers are right:
- a chain of k drafts under a constant per-draft acceptance α emits on average
  ``(1 - α^{k+1}) / (1 - α)`` tokens per verify step (Leviathan et al. 2023, eq. 1); the
  per-position draw must give that for every k from the same uniforms;
- with the fixed policy, trace replay must reproduce the fixed-k plan step for step (the same
  keys from the same stream, the same ``min(acc_len, k + 1)`` rule), so every record is equal;
- SGLang's rule (PR #21599) on a hand-worked sequence of batches.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sim.acceptance.models import ConstantAlphaModel
from sim.acceptance.traces import TraceReplayModel, TraceSet
from sim.engine.policies import GoodputPolicy, PositionAcceptance, SglangEmaPolicy, build_policy
from sim.errors import ScenarioError
from sim.run import build_simulation, execute
from sim.scenario import validate_document
from sim.theory.chain_sampling import sample_categorical, speculative_chain_step
from sim.theory.lossless_check import homogeneity_test
from sim.theory.markov_model import direct_sequences, markov_pair
from specsim.cli import app

REPO = Path(__file__).resolve().parents[2]


def _scenario(policy: dict[str, Any] | None, **speculation: Any) -> dict[str, Any]:
    document = yaml.safe_load((REPO / "scenarios" / "spec-chat-eagle3.yaml").read_text())
    document["workload"]["num_requests"] = 60
    document["workload"]["arrival"]["rate_per_s"] = 4.0
    document["speculation"].update(speculation)
    if policy is not None:
        document["speculation"]["policy"] = policy
    return document


def _records(document: dict[str, Any], fast_forward: bool = True) -> dict[str, np.ndarray]:
    simulation = build_simulation(
        validate_document(document, "test"), REPO, fast_forward=fast_forward
    )
    execute(simulation)
    return {key: value.copy() for key, value in simulation.core.recorder.columns().items()}


@pytest.mark.parametrize("k", [1, 3, 5])
def test_fixed_policy_reproduces_the_fixed_k_trace_replay_exactly(k: int) -> None:
    today = _records(_scenario(None, num_speculative_tokens=k))
    fixed = _records(_scenario({"name": "fixed"}, num_speculative_tokens=k))
    assert today.keys() == fixed.keys()
    for key in today:
        assert np.array_equal(today[key], fixed[key]), key
    assert set(np.unique(fixed["spec_k"])) <= {0, k}


@settings(max_examples=40, deadline=None)
@given(
    traces=st.lists(st.lists(st.integers(1, 5), min_size=1, max_size=30), min_size=1, max_size=6),
    needed=st.lists(st.integers(0, 40), min_size=0, max_size=12),
    k_max=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
)
def test_replayed_positions_are_each_request_trace_kept_to_its_reach(
    traces: list[list[int]], needed: list[int], k_max: int, seed: int
) -> None:
    # Request r replays trace keys[r] (drawn first from the stream, as the fixed-k plan draws
    # them) kept to its first needed + k_max + 1 positions (a step starts below needed and
    # looks one step ahead), or whole when shorter: read modulo its kept length, every position
    # a request can reach reads the trace as trace replay does.
    model = TraceReplayModel(TraceSet.from_lists(traces, "test"))
    decode = np.array(needed, dtype=np.int64)
    positions = PositionAcceptance.from_model(model, decode, k_max, np.random.default_rng(seed))
    keys = np.random.default_rng(seed).integers(0, len(traces), size=len(needed))
    assert positions.offsets.size == len(needed) + 1
    for r, key in enumerate(keys.tolist()):
        reach = max(needed[r], 1) + k_max + 1
        kept = positions.values[positions.offsets[r] : positions.offsets[r + 1]]
        assert kept.tolist() == traces[key][:reach]
        reads = np.arange(reach, dtype=np.int64)
        expected = np.array(traces[key], dtype=np.int64)[reads % len(traces[key])]
        got = positions.at(np.full(reach, r, dtype=np.int64), reads)
        assert np.array_equal(got, expected)


@pytest.mark.parametrize("alpha", [0.3, 0.6, 0.85])
def test_positions_give_every_k_its_closed_form_tau(alpha: float) -> None:
    needed = np.full(2000, 100, dtype=np.int64)
    positions = PositionAcceptance.from_model(
        ConstantAlphaModel(alpha), needed, 7, np.random.default_rng(1)
    )
    acc = positions.values.astype(np.int64)
    for k in range(8):
        tau = (1 - alpha ** (k + 1)) / (1 - alpha)
        observed = np.minimum(acc, k + 1)
        # 200k draws: the standard error is below 0.005 for every α and k here.
        assert observed.mean() == pytest.approx(tau, abs=5 * observed.std() / np.sqrt(acc.size))


def test_sglang_rule_on_a_hand_worked_sequence() -> None:
    policy = SglangEmaPolicy(7, warmup_batches=2, update_interval=2)
    assert policy.steps == (1, 3, 7) and policy.ema == 6.0
    # Every batch accepts nothing: ema = 6 * 0.8^n.
    zeros = np.zeros((4, 1), dtype=np.int64)
    proposed = np.full((4, 1), 7, dtype=np.int64)
    for _ in range(3):
        policy.observe(np.arange(4), proposed, zeros)
    assert policy.current == 7  # count 3: warm-up done but (3 - 2) % 2 != 0
    assert policy.holds_for() == 1
    policy.observe(np.arange(4), proposed, zeros)
    # count 4: ema = 6 * 0.8^4 = 2.458 > 3 - 0.5 - 0.25 = 2.25: the hysteresis keeps 7.
    assert policy.ema == pytest.approx(6 * 0.8**4)
    assert policy.current == 7
    for _ in range(2):
        policy.observe(np.arange(4), proposed, zeros)
    # count 6: ema = 1.573 <= 2.25 -> 3, and > 1 - 0.5 - 0.25 = 0.25 so not 1.
    assert policy.current == 3
    for _ in range(10):
        policy.observe(np.arange(4), proposed, zeros)
    assert policy.ema == pytest.approx(6 * 0.8**16)  # count 16: 0.169 <= 0.25 drops to 1
    assert policy.current == 1
    full = np.full((4, 1), 1, dtype=np.int64)
    for _ in range(10):
        policy.observe(np.arange(4), full * 1, full)
    # Every draft accepted: ema = 1 - 0.831 * 0.8^n; at count 18 it is 0.468 (stays 1), at
    # count 20 0.660 > 1 - 0.5 + 0 (rises to 3), and it never passes 3 - 0.5 (stays 3).
    assert policy.current == 3


def test_sglang_batch_slots_learn_apart() -> None:
    """PR #24055: each batch-size range has its own EMA and step count. Batches of 4 that accept
    nothing drive their slot down to 1; the slot from 64 keeps the configured 5 (no batch of its
    size was seen), and a batch of 100 reads that slot."""
    policy = SglangEmaPolicy(5, warmup_batches=0, update_interval=1, batch_slots="sglang")
    assert [slot.steps for slot in policy.slots] == [(1, 3, 5), (1, 2, 5), (1, 2, 5)]
    assert policy.batch_dependent
    small = np.full((4, 1), 5, dtype=np.int64)
    # ema = 4 * 0.8^n falls to 0.22 <= 1 - 0.5 - 0.25 at n = 13: the slot drops to 1.
    for _ in range(13):
        policy.observe(np.arange(4), small, 0 * small)
    from sim.engine.policies import BatchView

    def view(b: int) -> BatchView:
        zeros = np.zeros(b, dtype=np.int64)
        return BatchView(b, np.arange(b), zeros, zeros, zeros + 1)

    assert policy.choose(view(4))[0] == 1
    assert policy.choose(view(100))[0] == 5
    assert policy.slots[1].batch_count == 0


def test_goodput_policy_turns_speculation_off_when_drafts_are_rejected() -> None:
    def step_time(b: int, k_max: int, context: int) -> np.ndarray:
        # Verify cost grows with the tokens; drafting adds a fixed 40 % per step.
        k = np.arange(k_max + 1)
        return 1.0 + 0.01 * b * (1 + k) + np.where(k > 0, 0.4, 0.0)

    policy = GoodputPolicy(4, 8, step_time, prior_alpha=0.9)
    from sim.engine.policies import BatchView

    ids = np.arange(8)
    view = BatchView(8, ids, np.zeros(8, np.int64), np.zeros(8, np.int64), np.ones(8, np.int64))
    assert policy.choose(view)[0] == 4  # α 0.9: τ(4) = 4.1 tokens for 1.8 vs 1 for 1.08
    proposed = np.full((8, 20), 4, dtype=np.int64)
    policy.observe(ids, proposed, np.zeros((8, 20), dtype=np.int64))
    assert policy.choose(view)[0] == 0  # α near 0: no k pays for the drafting


@pytest.mark.parametrize(
    ("name", "params", "key"),
    [
        ("fixed", {"k": 9}, "params.k"),
        ("sglang-ema", {"ema_alpha": 1.5}, "params.ema_alpha"),
        ("sglang-ema", {"candidate_steps": [0, 2]}, "params.candidate_steps"),
        ("disable-above-batch", {}, "params.max_batch_size"),
        ("oracle", {"k": 2}, "params.k"),
        ("goodput", {"update_interval": 0}, "params.update_interval"),
        ("sglang-ema", {"batch_slots": "vllm"}, "params.batch_slots"),
        ("sglang-ema", {"batch_slots": [{"min_batch_size": 4}]}, "params.batch_slots"),
        ("sglang-ema", {"batch_slots": [{"min_batch_size": 1, "up": 1}]}, "batch_slots[0]"),
        (
            "sglang-ema",
            {"batch_slots": [{"min_batch_size": 1}, {"min_batch_size": 8, "up_hysteresis": 3}]},
            "params.batch_slots[1].up_hysteresis",
        ),
    ],
)
def test_bad_parameters_name_their_key(name: str, params: dict[str, Any], key: str) -> None:
    with pytest.raises(ScenarioError, match=re.escape(key)):
        build_policy(name, params, 3, 4, lambda b, k, c: np.ones(k + 1))


@pytest.mark.parametrize(
    ("policy", "extra", "message"),
    [
        ({"name": "sglang-magic"}, {}, "unknown policy 'sglang-magic'"),
        ({"name": "sglang-ema", "params": {"ema_alpha": 0}}, {"engine": "sglang"}, "ema_alpha"),
        ({"name": "sglang-ema"}, {}, "does not offer 'sglang-ema' (it runs on sglang)"),
        ({"name": "fixed"}, {"method": "ngram"}, "needs a chain method"),
    ],
)
def test_bad_input_is_one_message_and_exit_2(
    tmp_path: Path, policy: dict[str, Any], extra: dict[str, Any], message: str
) -> None:
    document = _scenario(policy)
    if "engine" in extra:
        document["engine"] = {"preset": extra["engine"]}
    if "method" in extra:
        document["speculation"]["method"] = extra["method"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(document))
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_compare_arms_set_a_fixed_k_or_a_policy() -> None:
    """`specsim compare --methods eagle3:k=3,eagle3:adaptive=sglang-ema`: each arm's scenario
    carries its own k or policy, and a policy name that does not exist is refused."""
    from reports.comparison import arm_document, parse_arms
    from sim.scenario import validate_document

    arms, _ = parse_arms("eagle3:k=3,eagle3:adaptive=sglang-ema")
    fixed, adaptive = (arm_document({"engine": {"preset": "sglang"}}, arm)[0] for arm in arms[1:])
    assert fixed["speculation"]["num_speculative_tokens"] == 3
    assert "policy" not in fixed["speculation"]
    assert adaptive["speculation"]["policy"] == {"name": "sglang-ema"}
    assert validate_document(adaptive, "t").speculation.policy.name == "sglang-ema"
    bad = arm_document({}, parse_arms("eagle3:adaptive=nope")[0][1])[0]
    with pytest.raises(ScenarioError, match="policy"):
        validate_document(bad, "t")


def test_chain_sampler_is_lossless_when_k_changes_every_step() -> None:
    """The exact chain sampler with k drawn anew at every step from a policy's candidates
    (0 = plain decoding) still samples the target: chi-square on the first two tokens."""
    pair = markov_pair(6)
    rng = np.random.default_rng(3)
    samples, length = 40_000, 2
    contexts = rng.integers(0, 6, size=samples)
    candidates = np.array(sorted({0, *SglangEmaPolicy(7).candidates()}))
    sequences = np.zeros((samples, length), dtype=np.int64)
    filled = np.zeros(samples, dtype=np.int64)
    last = contexts.copy()
    while (filled < length).any():
        rows = np.flatnonzero(filled < length)
        k = int(rng.choice(candidates))
        prefix = np.zeros((rows.size, k + 1), dtype=np.int64)
        prefix[:, 0] = last[rows]
        for position in range(k):
            prefix[:, position + 1] = sample_categorical(pair.draft_prob[prefix[:, position]], rng)
        step = speculative_chain_step(
            prefix[:, 1:], pair.draft_prob[prefix[:, :k]], pair.target_prob[prefix], rng,
            broken_residual=False,
        )  # fmt: skip
        for i, row in enumerate(rows.tolist()):
            tokens = step.emitted_tokens[i][step.emitted_mask[i]]
            room = length - filled[row]
            take = tokens[:room]
            sequences[row, filled[row] : filled[row] + take.size] = take
            filled[row] += take.size
            last[row] = tokens[-1]
    direct = direct_sequences(pair, contexts, length, np.random.default_rng(4))
    context_prob = np.bincount(contexts, minlength=6) / samples
    first = context_prob @ pair.target_prob
    exact_pairs = np.einsum("c,ca,ab->ab", context_prob, pair.target_prob, pair.target_prob)
    test_first = homogeneity_test("token 1", sequences[:, 0], direct[:, 0], first, samples)
    cells = sequences[:, 0] * 6 + sequences[:, 1]
    direct_cells = direct[:, 0] * 6 + direct[:, 1]
    test_pair = homogeneity_test("tokens 1-2", cells, direct_cells, exact_pairs.ravel(), samples)
    assert test_first.p_value > 1e-3 and test_pair.p_value > 1e-3


@pytest.mark.parametrize(
    "policy",
    [
        {"name": "sglang-ema", "params": {"warmup_batches": 2, "update_interval": 3}},
        {
            "name": "sglang-ema",
            "params": {
                "warmup_batches": 2,
                "update_interval": 3,
                "batch_slots": [
                    {"min_batch_size": 1},
                    {"min_batch_size": 3, "candidate_steps": [1, 2], "down_hysteresis": 0.3},
                ],
            },
        },
        {"name": "goodput"},
        {"name": "oracle"},
        {"name": "disable-above-batch", "params": {"max_batch_size": 3}},
    ],
)
def test_fast_forward_equals_stepping_for_whole_scenarios(policy: dict[str, Any]) -> None:
    document = _scenario(policy, num_speculative_tokens=4, allow_unsupported=True)
    document["engine"] = {"preset": "sglang"}
    fast, slow = _records(document), _records(document, fast_forward=False)
    for key in fast:
        assert np.array_equal(fast[key], slow[key]), key
    assert len(np.unique(fast["spec_k"][fast["num_decode_seqs"] > 0])) > 1  # k did change


def test_a_fleet_with_a_policy_is_refused() -> None:
    document = yaml.safe_load((REPO / "scenarios" / "fleet-chat-4x-h100.yaml").read_text())
    document.setdefault("speculation", {"method": "eagle3"})["policy"] = {"name": "fixed"}
    with pytest.raises(ScenarioError, match="adaptive policies run on one node"):
        validate_document(document, "fleet.yaml")
