"""What happens inside one measured job, and the math on its timings (no campaign machinery here).

* :mod:`.worker` — one training job in its own OS process: build once, warm up, run timed windows, on command;
* :mod:`.training` — the training step every profiled job runs (and the precisions it supports);
* :mod:`.metrics` — the measurement math: overlap window, iteration times, δ, slowdowns, confidence intervals.
"""
