"""EAGLE-3's resident head weights as vLLM loads them, against the sweep's logged model memory.

The vLLM concurrency sweep's logs (Qwen3-32B bf16 on one H100 SXM5 94GB, docs/validation.md)
report 61.03 GiB of model weights without speculation and 63.94 GiB with the RedHatAI EAGLE-3
head: 2.91 GiB for the head. vLLM keeps the head's own token embedding beside the target's
(vllm/v1/spec_decode/eagle.py, load_model); SGLang swaps in the target's.
"""

from __future__ import annotations

import pytest

from sim.catalogue import BF16_BYTES, get_model
from sim.drafting.eagle3 import eagle3_networks
from sim.engine.memory import GIB

#: The logs' "Model loading took" figures, GiB, without speculation and with the EAGLE-3 head.
LOGGED_TARGET_GIB, LOGGED_WITH_HEAD_GIB = 61.03, 63.94


def test_the_head_with_its_own_embedding_weighs_what_the_log_counts() -> None:
    model = get_model("qwen3-32b")
    first, _ = eagle3_networks(model, own_embedding=True)
    # The logged figures are rounded to 0.01 GiB each: their difference to within 0.01.
    assert first.resident_bytes / GIB == pytest.approx(
        LOGGED_WITH_HEAD_GIB - LOGGED_TARGET_GIB, abs=0.01
    )
    # The target's own bytes are the catalogue's, to the same rounding.
    assert model.weight_bytes / GIB == pytest.approx(LOGGED_TARGET_GIB, abs=0.01)


@pytest.mark.parametrize("name", ["qwen3-32b", "llama-3.1-8b", "llama-3.1-70b"])
def test_the_own_embedding_adds_exactly_the_vocabulary_by_hidden_table(name: str) -> None:
    """The embedding is memory held, not bytes read: a forward reads the same either way."""
    model = get_model(name)
    shared, _ = eagle3_networks(model)
    own, _ = eagle3_networks(model, own_embedding=True)
    table = model.spec.vocab_size * model.spec.hidden_size * BF16_BYTES
    assert own.resident_bytes - shared.resident_bytes == pytest.approx(table)
    assert own.weight_bytes == shared.weight_bytes
