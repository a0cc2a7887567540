"""The trace-driven, round-based simulator, and comparisons of policies over workloads.

* :mod:`.simulator` — the round loop: arrivals, the policy's decision, checks, advancing every job by a round;
* :mod:`.job_state` — per-job state and the integration of one round; :mod:`.groups` — jobs sharing GPUs;
* :mod:`.job_model` — what the simulator knows about jobs beyond the policy (goodput wrappers, Sia's job rules,
  memory); :mod:`.config` — its knobs; :mod:`.checks` — per-round invariants; :mod:`.result` — its outputs;
* :mod:`.compare` — every policy on every workload and load, in parallel processes.
"""
