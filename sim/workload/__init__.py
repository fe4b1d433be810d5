"""The workload: when requests arrive and how many prompt and output tokens each one has.

``WorkloadConfig`` is the scenario's ``workload:`` section; :func:`build_workload` turns it, a
:class:`~sim.random_streams.RandomStreams` and the scenario's folder into a :class:`Workload`, whose
generators also report the analytic means and variances the samples should match.
"""

from sim.workload.arrivals import ArrivalProcess, GammaArrivals, PoissonArrivals, ReplayedArrivals
from sim.workload.builder import AnalyticMeans, Workload, build_workload
from sim.workload.config import (
    ArrivalConfig,
    ClosedLoopArrivalConfig,
    EmpiricalLengthConfig,
    FixedLengthConfig,
    GammaArrivalConfig,
    LengthConfig,
    LognormalLengthConfig,
    PoissonArrivalConfig,
    TraceArrivalConfig,
    TraceLengthConfig,
    UniformLengthConfig,
    WorkloadConfig,
)
from sim.workload.lengths import (
    EmpiricalLengths,
    FixedLengths,
    LengthDistribution,
    LognormalLengths,
    ReplayedLengths,
    UniformLengths,
)

__all__ = [
    "AnalyticMeans",
    "ArrivalConfig",
    "ArrivalProcess",
    "ClosedLoopArrivalConfig",
    "EmpiricalLengthConfig",
    "EmpiricalLengths",
    "FixedLengthConfig",
    "FixedLengths",
    "GammaArrivalConfig",
    "GammaArrivals",
    "LengthConfig",
    "LengthDistribution",
    "LognormalLengthConfig",
    "LognormalLengths",
    "PoissonArrivalConfig",
    "PoissonArrivals",
    "ReplayedArrivals",
    "ReplayedLengths",
    "TraceArrivalConfig",
    "TraceLengthConfig",
    "UniformLengthConfig",
    "UniformLengths",
    "Workload",
    "WorkloadConfig",
    "build_workload",
]
