"""Named, independent random streams derived from one seed.

Every consumer of randomness asks for a stream by name (``"arrivals"``, ``"prompt_tokens"``,
``"acceptance"``, ...). A stream's state depends only on the seed and the name, never on the
order in which streams are requested, so two strategies compared on one seed see identical
arrivals and lengths (common random numbers) even when one of them draws acceptance numbers and
the other does not.
"""

from __future__ import annotations

import hashlib

import numpy as np


def _name_key(name: str) -> int:
    """A stable 64-bit integer for a stream name (Python's ``hash`` is salted per process)."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "little")


class RandomStreams:
    """A factory of ``numpy.random.Generator`` objects keyed by name.

    Raise ValueError if ``seed`` is negative.
    """

    def __init__(self, seed: int) -> None:
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        self.seed = int(seed)

    def stream(self, name: str) -> np.random.Generator:
        """A fresh generator for ``name``; asking twice gives two generators in the same state."""
        sequence = np.random.SeedSequence(entropy=self.seed, spawn_key=(_name_key(name),))
        return np.random.Generator(np.random.PCG64(sequence))
