"""The scheduler's model of the world, free of file formats and solvers.

* :mod:`.cluster` — GPU types and nodes; :mod:`.jobs` — jobs as a round sees them;
* :mod:`.goodput` and :mod:`.step_time` — throughput × statistical efficiency (Pollux), the step-time model;
* :mod:`.configs` — Sia's configuration set; :mod:`.colocation` — pair ratios as the scheduler looks them up;
* :mod:`.transfer` — ratios for Sia's applications transferred from Gavel's pairs;
  :mod:`.applications` — trace applications and the zoo models standing in for them;
* :mod:`.policy` — the policy interface and decision checks; :mod:`.placement` — allocations to nodes and GPUs.
"""
