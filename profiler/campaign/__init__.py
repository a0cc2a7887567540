"""A campaign: the YAML spec, its cells and runs, and the machinery that runs them into a results directory.

* :mod:`.spec` — the campaign spec, validated into a frozen :class:`CampaignSpec`;
* :mod:`.cells` — the spec expanded into cells and an ordered list of runs;
* :mod:`.driver` — run a whole campaign, resuming where an earlier invocation stopped;
* :mod:`.runner` — execute one run: one process per job, warm-up one at a time, barrier, the overlap window;
* :mod:`.pool` — worker processes kept warm across runs, and the MPS daemon they use;
* :mod:`.estimate` — wall-time estimate before any GPU time is spent; :mod:`.outdir` — output directories;
* :mod:`.ray_backend` — the same campaign as whole-GPU Ray tasks.
"""
