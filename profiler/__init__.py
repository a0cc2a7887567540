"""Measuring co-location: campaigns of solo, pair and triple runs on one GPU.

* :mod:`profiler.campaign` — the spec, its cells and runs, the runner, the warm worker pool, the driver, Ray;
* :mod:`profiler.measure` — inside one measured job: the worker process, the training step, the δ math;
* :mod:`profiler.gpu` — the GPU side: sharing modes, MPS, NVML/GPM sampling, Nsight Compute, devices, preflight;
* :mod:`profiler.results` — the results store (runs/jobs/kernels parquet, meta.json) and its column names;
* :mod:`profiler.kernels` — kernel-level profiles of one job alone; :mod:`profiler.bench` — profiler benchmarks.
"""
