"""The schema of ``sim/data/kernels/<gpu>.yaml``: every key, its range and its provenance fields.

A kernel file is validated whole when first read; a wrong key, a value out of range, a table that is
not increasing or an interval that does not contain its estimate is refused with the file and the
key path (``docs/kernels.md`` describes the fields).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sim.errors import CatalogueError

AllReduceMode = Literal["graph", "eager", "nccl"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Fitted(_Strict):
    """Provenance every fitted entry carries."""

    ci95: dict[str, tuple[float, float]]
    num_rows: int = Field(gt=0)
    agreement: dict[str, float]
    source: str
    rows: str
    method: str

    @model_validator(mode="after")
    def _interval_holds_estimate(self) -> _Fitted:
        for name, (lo, hi) in self.ci95.items():
            value = getattr(self, name, None)
            if value is None or not lo <= value <= hi:
                raise ValueError(f"ci95.{name} = [{lo}, {hi}] must contain the estimate {value}")
        return self


class _Table(_Strict):
    message_bytes: list[float] = Field(min_length=2)
    latency_s: list[float] = Field(min_length=2)
    summary: dict[str, Any]

    @model_validator(mode="after")
    def _monotone(self) -> _Table:
        b, t = np.asarray(self.message_bytes), np.asarray(self.latency_s)
        if b.size != t.size:
            raise ValueError("message_bytes and latency_s must have the same length")
        if not (b[0] > 0 and np.all(np.diff(b) > 0)):
            raise ValueError("message_bytes must be positive and strictly increasing")
        if not (t[0] > 0 and np.all(np.diff(t) >= 0)):
            raise ValueError("latency_s must be positive and non-decreasing")
        return self


class CollectiveEntry(_Strict):
    source: str
    rows: str
    method: str
    tp: dict[int, _Table] = Field(min_length=1)


class MoeEntry(_Fitted):
    bandwidth: float = Field(gt=0, le=1)
    flops: float = Field(gt=0, le=1)
    roofline_p: float = Field(ge=1)
    floor_s: float = Field(ge=0)


class GemmEntry(_Fitted):
    bandwidth: float = Field(gt=0, le=1)
    flops: float = Field(gt=0, le=1)
    roofline_p: float = Field(ge=1)
    gemm_floor_s: float = Field(ge=0)


class DecodeEntry(_Fitted):
    bandwidth: float = Field(gt=0, le=1)
    per_seq_kv_head_s: float = Field(ge=0)
    floor_s: float = Field(ge=0)


class PrefillEntry(_Fitted):
    flops: float = Field(gt=0, le=1)
    per_token_head_s: float = Field(ge=0)
    floor_s: float = Field(ge=0)


class KernelFile(_Strict):
    gpu: str
    device: str
    generated_by: str
    source: dict[str, str]
    allreduce: dict[AllReduceMode, CollectiveEntry] = {}
    moe: dict[Literal["bf16", "fp8", "fp8_block"], MoeEntry] = {}
    gemm: dict[Literal["fp8", "fp8_block"], GemmEntry] = {}
    decode_attention: dict[Literal["bf16", "fp8"], DecodeEntry] = {}
    prefill_attention: dict[Literal["bf16", "fp8"], PrefillEntry] = {}
    not_measured: dict[str, str] = {}


def parse_kernel_file(text: str, where: str) -> KernelFile:
    """Validate the text of one kernel file; ``where`` names it in messages.

    Raise CatalogueError naming ``where`` and the key path if the YAML is invalid or a value is
    missing, unknown or out of range (a table that is not increasing, an interval without its
    value).
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CatalogueError(f"{where}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise CatalogueError(f"{where}: expected a mapping at the top level")
    try:
        return KernelFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(p) for p in first["loc"]) or "<top>"
        raise CatalogueError(f"{where}: {path}: {first['msg']}") from None
