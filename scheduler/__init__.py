"""Scheduling with measured interference: one ILP round, the simulator, executors and the live service.

* :mod:`scheduler.model` — the scheduler's model: cluster, jobs, goodput, configurations, co-location, placement,
  the policy interface;
* :mod:`scheduler.ilp` — the packing-aware round ILP (Sia's formulation plus group variables);
  :mod:`scheduler.policies` — the baselines, and every policy by name;
* :mod:`scheduler.formats` — every file format read or written, the bundled data and public-data locations;
* :mod:`scheduler.sim` — the trace-driven simulator and policy comparisons;
* :mod:`scheduler.executor` — launching a decision (local, Ray, Slurm, Kubernetes);
  :mod:`scheduler.service` — the live scheduler behind ``colocate serve``;
* :mod:`scheduler.bench` — ``colocate bench`` for the scheduler, simulator and service;
  :mod:`scheduler.report` — comparison reports and figures.
"""
