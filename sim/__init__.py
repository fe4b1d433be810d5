"""specsim: a discrete-event simulator of batched speculative-decoding LLM serving."""

from sim.errors import CalibrationError, CatalogueError, InvariantError, ScenarioError, SpecsimError

__version__ = "0.1.0"

__all__ = [
    "CalibrationError",
    "CatalogueError",
    "InvariantError",
    "ScenarioError",
    "SpecsimError",
    "__version__",
]
