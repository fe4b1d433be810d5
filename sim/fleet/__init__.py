"""Fleets: replicas of a serving node behind a router, on one SimPy clock.

``config`` (the scenario's ``fleet:`` section), ``routers`` (the policies), ``stage`` (arrivals,
routing and the routing contract), ``replica`` (a node that plans stretches and commits them once
no unrouted request can cut them), ``disaggregation`` (the prefill and decode stages), ``links``
(KV transfer time), ``build`` (replica groups and the fleet that holds them), ``runner``
(:func:`sim.fleet.runner.run_fleet`), ``records`` (merged records and summaries) and ``table``
(the per-replica table). ``sim.run.run_scenario`` runs a fleet when the scenario has one;
nothing is imported here, so the scenario schema can import ``sim.fleet.config`` alone.
"""
