"""The scheduler's model of the world, free of file formats and solvers.

* :mod:`.cluster` — GPU types and nodes; :mod:`.jobs` — jobs as a round sees them;
* :mod:`.goodput` and :mod:`.step_time` — throughput × statistical efficiency (Pollux), the step-time model;
* :mod:`.configs` — Sia's configuration set; :mod:`.colocation` — pair ratios as the scheduler looks them up;
* :mod:`.memory` — a group's memory at its members' batches; :mod:`.efficiency` — statistical efficiency;
* :mod:`.policy` — the policy interface and decision checks; :mod:`.placement` — allocations to nodes and GPUs.
"""
