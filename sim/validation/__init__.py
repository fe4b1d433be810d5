"""Predicted against measured: the validation of specsim on public measurements.

``load_points`` reads the shipped measured points; ``run_points`` predicts a group of them
(``regimes=["tp"]``, ``source_groups=[...]`` or ``point_ids=[...]``) and returns one
``ValidationResult`` each; ``format_report`` prints the tables; ``speedup_checks`` the sign and
crossover lines of speculative speedup under load.
"""

from sim.validation.checks import ShapeCheck, speedup_checks, tree_speedup_at
from sim.validation.points import ValidationPoint, load_points
from sim.validation.runner import ValidationResult, resolve_regimes, run_points
from sim.validation.scenarios import REGIMES, build_scenario, inexpressible_reason, regime_of
from sim.validation.tables import format_mape, format_report, is_miss, mape, targets

__all__ = [
    "REGIMES",
    "ShapeCheck",
    "ValidationPoint",
    "ValidationResult",
    "build_scenario",
    "format_mape",
    "format_report",
    "inexpressible_reason",
    "is_miss",
    "load_points",
    "mape",
    "regime_of",
    "resolve_regimes",
    "run_points",
    "speedup_checks",
    "targets",
    "tree_speedup_at",
]
