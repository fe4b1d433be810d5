"""The measured points of the under-load validation: one row of ``validation_points.csv`` each.

Every point carries its setup (engine, model, GPU, TP degree, precision, speculation, workload),
the measured value with its unit and statistic, its public source, and ``fitted_by``: the fit that
used the point, or empty for a point no coefficient was fitted on (out of sample). The file is
written by ``tools/build_validation_points.py`` from the public measurements it cites.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path

from sim.errors import CalibrationError

#: Quantities a point can measure, with the unit each must be given in.
QUANTITY_UNITS = {"tpot_ms": "ms", "ttft_ms": "ms", "output_tok_s": "tok/s", "speedup": "x"}
#: ``ratio``: a speedup as output throughput with / without speculation at the same closed-loop
#: load; ``tpot_ratio`` and ``latency_ratio``: mean TPOT or end-to-end latency without / with, the
#: speedups a request-rate sweep reports (an open loop below saturation delivers its offered load
#: in both arms, so its throughput ratio is ~1 whatever speculation does).
STATISTICS = ("mean", "p50", "ratio", "tpot_ratio", "latency_ratio")
RATE_SPEEDUP_STATISTICS = ("tpot_ratio", "latency_ratio")
ARRIVALS = ("closed_loop", "poisson", "constant", "trace")


@dataclass(frozen=True)
class ValidationPoint:
    """One measured point and the setup it was measured in.

    Count-like setup fields are ``None`` where the source does not state them; ``model`` and
    ``gpu`` are catalogue names where the catalogue has them, else the source's own words.
    ``num_requests`` counts the requests the source measured; ``warmup_requests`` the requests
    its harness sent before them and left out of its statistics (``None``: none stated).
    ``tensor_parallel`` and ``expert_parallel`` give the split of a multi-GPU MoE deployment
    (attention TP, the rest data-parallel attention groups; expert-parallel ranks) where the
    source states one; ``None``: the plain TP node over ``num_gpus``.
    ``kv_cache`` is the KV-cache format the source's engine ran with where it differs from the
    weights' default (empty: 16-bit). ``prompt_pool`` is the number of distinct prompts the
    source's harness sent in turn, each prompt recurring once per pass (``None``: every prompt
    distinct). ``num_turns`` is the number of turns of each conversation the harness held (MT-Bench
    runs two: the second question is sent with the first answer in its prompt); ``num_requests``
    then counts every turn (``None``: one-turn requests). ``temperature`` is the sampling
    temperature the source states where it is not greedy (``None``: 0), which picks the published
    acceptance a speculative point runs with. ``draft_model`` names the draft of a
    ``draft_model`` point (a catalogue name or Hugging Face id; empty: none named).
    ``acceptance_profile`` is the shipped acceptance profile the speculative arm runs with (a key
    of ``acceptance_profiles.yaml``; empty: the default for the method, model and dataset).
    ``lengths`` names a shipped table of per-request prompt and output lengths
    (:data:`sim.validation.scenarios.LENGTH_TABLES`) the requests are drawn from instead of
    ``prompt_tokens`` / ``output_tokens`` (empty: the fixed lengths). The last three columns may be
    absent from a points file (written before they existed): they are then empty.
    """

    point_id: str
    source_group: str
    engine: str
    preset: str
    model: str
    gpu: str
    num_gpus: int
    precision: str
    kv_cache: str
    method: str
    num_speculative_tokens: int | None
    arrival: str
    concurrency: int | None
    rate_per_s: float | None
    trace: str
    prompt_tokens: int | None
    output_tokens: int | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    dataset: str
    num_requests: int | None
    warmup_requests: int | None
    quantity: str
    statistic: str
    measured: float
    unit: str
    source: str
    fitted_by: str
    not_expressible: str
    notes: str
    tensor_parallel: int | None = None
    expert_parallel: int | None = None
    prompt_pool: int | None = None
    num_turns: int | None = None
    temperature: float | None = None
    draft_model: str = ""
    acceptance_profile: str = ""
    lengths: str = ""

    @property
    def is_fitted(self) -> bool:
        """Whether a coefficient of the simulator was fitted on this point."""
        return bool(self.fitted_by)


_INT_FIELDS = {
    "num_gpus",
    "tensor_parallel",
    "expert_parallel",
    "num_speculative_tokens",
    "concurrency",
    "prompt_tokens",
    "output_tokens",
    "max_num_seqs",
    "max_num_batched_tokens",
    "num_requests",
    "warmup_requests",
    "prompt_pool",
    "num_turns",
}
_FLOAT_FIELDS = {"rate_per_s", "measured", "temperature"}
#: Columns a points file may lack (added after files were written; empty when absent).
_OPTIONAL_COLUMNS = ("draft_model", "acceptance_profile", "lengths")
_REQUIRED = ("point_id", "source_group", "model", "gpu", "quantity", "measured", "unit", "source")


def default_points_path() -> Path:
    """The points file shipped with specsim."""
    return Path(str(resources.files("sim") / "data" / "validation_points.csv"))


def _parse(row: dict[str, str], where: str) -> ValidationPoint:
    values: dict[str, object] = {}
    for field in fields(ValidationPoint):
        text = (row.get(field.name) or "").strip()
        if field.name in _REQUIRED and not text:
            raise CalibrationError(f"{where}: column {field.name} is empty")
        if field.name in _INT_FIELDS or field.name in _FLOAT_FIELDS:
            if not text:
                if field.name in ("num_gpus", "measured"):
                    raise CalibrationError(f"{where}: column {field.name} is empty")
                values[field.name] = None
                continue
            try:
                number = float(text)
            except ValueError:
                raise CalibrationError(
                    f"{where}: column {field.name} must be a number, got {text!r}"
                ) from None
            if field.name in _INT_FIELDS:
                if number != int(number) or number < 1:
                    raise CalibrationError(
                        f"{where}: column {field.name} must be a whole number >= 1, got {text!r}"
                    )
                values[field.name] = int(number)
            else:
                if not number > 0:
                    raise CalibrationError(f"{where}: column {field.name} must be > 0, got {text}")
                values[field.name] = number
        else:
            values[field.name] = text
    point = ValidationPoint(**values)  # type: ignore[arg-type]
    if point.quantity not in QUANTITY_UNITS:
        raise CalibrationError(
            f"{where}: quantity must be one of {sorted(QUANTITY_UNITS)}, got {point.quantity!r}"
        )
    if point.unit != QUANTITY_UNITS[point.quantity]:
        raise CalibrationError(
            f"{where}: {point.quantity} is given in {QUANTITY_UNITS[point.quantity]}, "
            f"got unit {point.unit!r}"
        )
    if point.statistic not in STATISTICS:
        raise CalibrationError(f"{where}: statistic must be one of {STATISTICS}")
    if point.arrival and point.arrival not in ARRIVALS:
        raise CalibrationError(f"{where}: arrival must be one of {ARRIVALS}, got {point.arrival!r}")
    rate_driven = point.arrival in ("poisson", "constant")
    if point.quantity == "speedup" and rate_driven != (point.statistic in RATE_SPEEDUP_STATISTICS):
        raise CalibrationError(
            f"{where}: a speedup under {point.arrival or 'an unstated'} arrivals has statistic "
            + (f"one of {RATE_SPEEDUP_STATISTICS}" if rate_driven else "ratio")
            + f", got {point.statistic!r}"
        )
    return point


def load_points(path: Path | None = None) -> list[ValidationPoint]:
    """Read and check every point of ``path`` (the shipped file by default).

    Raise CalibrationError, naming the file and line, if a column is missing or empty where it
    is required, a number does not parse, a quantity's unit is wrong, or a point id repeats.
    """
    path = path if path is not None else default_points_path()
    try:
        text = path.read_text()
    except OSError as exc:
        raise CalibrationError(f"{path}: cannot read the points file ({exc.strerror})") from None
    reader = csv.DictReader(text.splitlines())
    expected = [f.name for f in fields(ValidationPoint)]
    missing = [
        name
        for name in expected
        if name not in (reader.fieldnames or []) and name not in _OPTIONAL_COLUMNS
    ]
    if missing:
        raise CalibrationError(f"{path}, line 1: missing columns {missing}")
    points: list[ValidationPoint] = []
    seen: dict[str, int] = {}
    for line, row in enumerate(reader, start=2):
        point = _parse(row, f"{path}, line {line}")
        if point.point_id in seen:
            raise CalibrationError(
                f"{path}, line {line}: point_id {point.point_id!r} repeats line "
                f"{seen[point.point_id]}"
            )
        seen[point.point_id] = line
        points.append(point)
    return points
