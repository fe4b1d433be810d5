"""``specsim validate`` without the elementwise-operator term, to set beside a plain run.

The cost model prices the decoder's RMSNorms, rotary embedding, SiLU-and-mul and residual add by
the bytes each token moves (:mod:`sim.elementwise`, docs/cost-model.md). This runs the same
command with that term set to zero on every step path (the Python breakdown and the compiled
evaluator's tables both read :meth:`StepCostModel.elementwise_s`), every other fitted value as
packaged: the difference between the two outputs is the term's share at the current fit, not
the model before the term (whose host terms were fitted without it). Usage::

    python -m benchmarks.non_gemm_validate [--regime REGIME ...] [--json]

It prints ``specsim validate``'s tables and exits with its status.
"""

from __future__ import annotations

import runpy
import sys

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sim.cost_model import StepCostModel


def _without(self: StepCostModel, num_tokens: ArrayLike) -> NDArray[np.float64]:
    """No elementwise time: zeros shaped as the tokens."""
    del self
    return np.zeros_like(np.asarray(num_tokens, dtype=np.float64))


def main() -> None:
    StepCostModel.elementwise_s = _without  # type: ignore[method-assign]
    sys.argv = ["specsim", "validate", *sys.argv[1:]]
    runpy.run_module("specsim", run_name="__main__")


if __name__ == "__main__":
    main()
