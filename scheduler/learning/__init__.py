"""What the scheduler learns while it runs — one module for the live server and the simulator.

* :mod:`.online` — measured iteration times → goodput estimates and pair ratios (``colocate serve``);
* :mod:`.measured` — the measured solo times and learned pair ratios as shown (no numpy: ``jobs --json``);
* :mod:`.gradient_noise` — the gradient statistics a job reports → its noise scale and statistical efficiency
  (``serve``'s live goodput; no numpy);
* :mod:`.pairs` — the pair-ratio belief: prior + samples, shrinkage, intervals (:class:`PairBelief`);
* :mod:`.explore` — the exploration rule a policy plans with (:func:`planning_ratios`);
* :mod:`.predictor.prior` — the δ predictor's model, the prior for every pair (:func:`build_prior`);
* :mod:`.throughput` — the throughput belief fitted to the configurations a job has run (Sia's model);
* :mod:`.belief` — the simulator's ``--belief``: what the policy starts from, kept apart from the truth.
"""
