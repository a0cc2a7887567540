"""Column names of the results store, shared by the profiler (writer) and the analysis (reader).

The files are described in the README, section "Output files".

``runs.parquet`` has one row per run (a cell executed once: one repeat of a solo, pair or triple);
``jobs.parquet`` one row per job per run. Rows are keyed by ``run_id``; a cell (``cell_id``) groups the
repeats of one configuration. Times are seconds, memory MiB, utilizations percent (0–100).
"""

from __future__ import annotations

# Run status values.
STATUS_OK = "ok"  # measured; delta and friends are set for groups
STATUS_INFEASIBLE = "infeasible"  # out of memory (measured OOM or the memory pre-check); a result, not an error
STATUS_FAILED = "failed"  # a worker crashed / MPS client fault / timeout: the whole group is failed
STATUS_SKIPPED = "skipped"  # could not run here (no GPU, no MPS, solo baseline missing); error says why
RUN_STATUSES = (STATUS_OK, STATUS_INFEASIBLE, STATUS_FAILED, STATUS_SKIPPED)

RUN_COLUMNS: tuple[str, ...] = (
    "run_id",  # "<cell_id>#r<repeat>"
    "cell_id",  # e.g. "pair|timeslice|resnet18@64+vgg11@64" or "pair|mps50|..."
    "campaign",
    "kind",  # solo | pair | triple
    "group_size",
    "device",  # cpu | cuda:N as given in the spec
    "gpu_name",  # "NVIDIA H100 80GB HBM3" or the CPU model
    "gpu_type",  # short type used across the project: h100, h200, a100, v100, cpu ...
    "sharing",  # none | timeslice | mps
    "mps_thread_percentage",  # int or <NA>
    "models",  # "resnet18+vgg11" (job order within the group)
    "batch_sizes",  # "64+64"
    "job_types",  # "resnet18@64+vgg11@64"
    "image_size",
    "precision",  # fp32 | tf32 | bf16 (every member of a group runs in it)
    "seq_len",  # tokens per sample of token models (the campaign's seq_len)
    "repeat",
    "status",
    "error",  # empty when ok; the reason otherwise
    "delta",  # Σ t_j / max t'_j (groups only)
    "throughput_sum",  # Σ t_j / t'_j (groups only)
    "max_slowdown",  # max_j t'_j / t_j
    "window_s",  # length of the common overlap window
    "wall_s",  # wall time of the whole run incl. process start and warm-up
    "started_at",  # ISO-8601 UTC
    "session_id",  # the campaign invocation that measured the run: a pair's δ uses solos of its own session
    "host",  # hostname of the machine that measured it
    "gpu_uuid",  # NVML UUID of the GPU (two machines with the same GPU model are two GPUs)
    "driver",  # NVIDIA driver version
    "sm_clock_mean_mhz",
    "sm_clock_min_mhz",
    "clock_event_reasons",  # union of NVML clock-event (throttle) reasons seen in the window, "|"-joined
    "memory_used_max_mib",  # NVML device memory used, max over the window: device-wide, idle workers included
    "gpu_util_mean",  # NVML utilization.gpu: % of time any kernel ran — NOT occupancy
    "gpm_sm_occupancy_mean",  # NVML GPM SM occupancy (Hopper+), % of max warps
    "gpm_sm_util_mean",
    "gpm_dram_bw_util_mean",
    "nvml_samples",
)

JOB_COLUMNS: tuple[str, ...] = (
    "run_id",
    "cell_id",
    "job_index",
    "model",
    "batch_size",
    "job_type",  # "model@batch"
    "iter_time_s",  # t' (co-located) or t (solo): mean iteration time inside the window
    "iter_time_std_s",
    "solo_iter_time_s",  # t from the campaign's solo baseline (mean over solo repeats)
    "slowdown",  # t' / t
    "ratio",  # t / t' = co-located / solo throughput
    "iters_in_window",
    "peak_memory_mib",  # steady-state torch max_memory_reserved after warm-up (GPU) or max RSS growth (CPU)
    "peak_allocated_mib",  # steady-state torch max_memory_allocated after warm-up (GPU); RSS growth (CPU)
    "nvml_process_memory_mib",  # NVML device memory of the job's process after the window, context included
    "precision",
    "status",
    "error",
)

KERNEL_COLUMNS: tuple[str, ...] = (
    "model",
    "batch_size",
    "job_type",
    "image_size",
    "gpu_name",
    "gpu_type",
    "backend",  # torch-profiler | ncu
    "kernel",
    "duration_us",
    "grid",
    "block",
    "registers_per_thread",
    "shared_memory_bytes",
    "blocks_per_sm",
    "warps_per_sm",
    "occupancy_pct",  # torch-profiler: occupancy-calculator estimate; ncu: achieved (sm__warps_active)
    "dram_throughput_pct",  # ncu only
    "sm_throughput_pct",  # ncu only
)

# File names of a results directory (the store writes them, the analysis reads them).
RUNS_FILE = "runs.parquet"
JOBS_FILE = "jobs.parquet"
KERNELS_FILE = "kernels.parquet"
META_FILE = "meta.json"


# Columns read back as numbers (float64); the others are strings or None.
RUN_NUMERIC = (
    "group_size",
    "mps_thread_percentage",
    "image_size",
    "repeat",
    "delta",
    "throughput_sum",
    "max_slowdown",
    "window_s",
    "wall_s",
    "sm_clock_mean_mhz",
    "sm_clock_min_mhz",
    "memory_used_max_mib",
    "gpu_util_mean",
    "gpm_sm_occupancy_mean",
    "gpm_sm_util_mean",
    "gpm_dram_bw_util_mean",
    "nvml_samples",
)
JOB_NUMERIC = (
    "job_index",
    "batch_size",
    "iter_time_s",
    "iter_time_std_s",
    "solo_iter_time_s",
    "slowdown",
    "ratio",
    "iters_in_window",
    "peak_memory_mib",
)
KERNEL_NUMERIC = (
    "batch_size",
    "image_size",
    "duration_us",
    "registers_per_thread",
    "shared_memory_bytes",
    "blocks_per_sm",
    "warps_per_sm",
    "occupancy_pct",
    "dram_throughput_pct",
    "sm_throughput_pct",
)
