"""Every file format the scheduler reads or writes, and where its data lies.

Cluster files and job CSVs are read by :mod:`scheduler.model.cluster` and :mod:`scheduler.model.jobs` beside
their values; the job file of ``colocate submit`` by :mod:`scheduler.service.jobs.jobspec`. Here:

* :mod:`.colocation_table` — measured or predicted pair ratios per GPU type;
* :mod:`.profiles` — throughput profiles and gradient-noise curves (ours, Sia's traces);
* :mod:`.workloads` and :mod:`.workload_jobs` — simulator workloads (public traces, synthetic);
* :mod:`.gavel_format` — Gavel's throughput files; :mod:`.allocation_file` — the allocation JSON;
* :mod:`.sia_reference` — summaries of runs of Sia's own simulator;
* :mod:`.bundled`, :mod:`.bundled_files` — the data shipped in ``scheduler/data``;
  :mod:`.shared_data` — where public data sets are found.
"""
