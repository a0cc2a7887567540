"""The live scheduler behind ``colocate serve``: state database, job files, round loop, online learning.

* :mod:`.jobspec` — the job file of ``colocate submit``;
* :mod:`.state` — the SQLite state of one scheduler instance (its state directory);
* :mod:`.learning` — measurements → goodput estimates and colocation ratios for the next rounds;
* :mod:`.rounds` — the pure part of a round (policy input, what to change);
* :mod:`.groups` — a unit of the decision → GPU group and its supervisor's document;
* :mod:`.server` — the round loop that enacts decisions on an executor (:mod:`scheduler.executor.registry`).
"""
