"""The GPU side of the profiler: how jobs share a GPU and what the GPU reports.

* :mod:`.sharing` — the registry of sharing modes (time-sliced, MPS, ...);
* :mod:`.mps` — the private MPS control daemon: started, proven, quit;
* :mod:`.nvml` — the NVML sampler thread (memory, utilization, clocks, GPM metrics on Hopper);
* :mod:`.ncu` — Nsight Compute kernel metrics; :mod:`.devices` — which device a campaign runs on;
* :mod:`.preflight` — can this machine run the GPU and MPS paths (``colocate env --check``).
"""
