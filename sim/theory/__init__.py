"""Theory the engine never runs: exact speculative sampling (chain and tree), the statistical
check that it is lossless, and the closed-form acceptance of a chain with its optimum.

``specsim lossless-check`` and ``specsim analyze`` print these; the serving simulation draws
acceptance from :mod:`sim.acceptance` instead.
"""
