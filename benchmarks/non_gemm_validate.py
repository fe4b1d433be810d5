"""``specsim validate`` with the elementwise-operator candidate added to every dense target.

A what-if, not the model: the candidate of ``benchmarks.sweep_step_decomposition`` (the
decoder's RMSNorms, rotary embedding, SiLU-and-mul and residual add priced by the bytes they
move at the bandwidth Vidur's H100 profiles imply, above the preset's fixed per-layer time) is
added to the linear-layer time of every cost model of a dense, full-attention GQA model on one
attention group, on whatever GPU and at whatever tensor-parallel degree (norms and adds on every
rank, the head- and MLP-wise operators split). MoE, MLA and linear-attention models and
multi-group layouts are left as they are. The output is the command's own. Usage::

    python -m benchmarks.non_gemm_validate [--regime REGIME ...] [--json]

It prints ``specsim validate``'s tables (and exits with its status) so that they can be set
beside a plain run's.
"""

from __future__ import annotations

import runpy
import sys
from typing import Any

import numpy as np

from benchmarks.sweep_step_decomposition import non_gemm_s
from sim.cost_model import StepCostModel


def _applies(model: StepCostModel) -> bool:
    spec = model.model.spec
    dense_gqa = spec.num_experts <= 1 and spec.attention == "gqa"
    return dense_gqa and not spec.num_linear_attention_layers and model._parallel is None


def main() -> None:
    original = StepCostModel.__init__

    def init(self: StepCostModel, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if not _applies(self):
            return
        model, gpu, tp = self.model, self.gpu, self.tp
        per_layer_s = self.host_costs.per_layer_overhead_s

        def extra(num_tokens: Any) -> np.ndarray:
            return non_gemm_s(model, gpu, per_layer_s, num_tokens, tp)

        linear = self.linear_s
        self.linear_s = lambda n, n_logits: linear(n, n_logits) + extra(n)  # type: ignore[method-assign]
        kernels = self._kernels
        if kernels is not None and kernels.prices_linear:
            measured = kernels.linear_s
            kernels.linear_s = lambda n, n_logits: measured(n, n_logits) + extra(n)  # type: ignore[method-assign]

    StepCostModel.__init__ = init  # type: ignore[method-assign]
    sys.argv = ["specsim", "validate", *sys.argv[1:]]
    runpy.run_module("specsim", run_name="__main__")


if __name__ == "__main__":
    main()
