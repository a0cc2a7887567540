"""The live scheduler behind ``colocate serve``: state database, job files, round loop, online learning.

* :mod:`.jobs.jobspec` — the job file of ``colocate submit``;
* :mod:`.state` — the SQLite state of one scheduler instance (its state directory);
* (online learning — measurements → goodput estimates and pair ratios — lives in :mod:`scheduler.learning`);
* :mod:`.rounds` — the pure part of a round (policy input, what to change);
* :mod:`.groups` — a unit of the decision → GPU group and its supervisor's document;
* :mod:`.server` — the round loop that enacts decisions on an executor (:mod:`scheduler.executor.registry`).
"""
