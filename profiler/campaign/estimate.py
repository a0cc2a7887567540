"""Wall-time estimate of a campaign from its protocol, before any GPU time is spent.

The estimate replays the plan (:func:`profiler.campaign.cells.plan_runs`) through the same warm-worker rules as
:class:`profiler.campaign.pool.WorkerPool` (workers keyed by job type and sharing mode, kept for their batch-size
block; one MPS daemon per run of MPS runs) and charges each run:

* process start + model build for every *cold* worker, then its warm-up (``warmup_iters`` iterations plus
  cuDNN autotuning), one member after the other; a *warm* worker re-warms for 2 iterations;
* the window: ``max(min_window_seconds, (min_window_iters + 1) · t'_max)`` plus the iteration the partners
  finish after the stop (at most 2 are in flight, so no longer queue drains);
* fixed costs: barrier and stop, the MPS membership check, the results-store write; an MPS daemon cycle
  (start, readiness, quit polling) whenever the mode switches to MPS.

Iteration times: ``t = batch · FLOPs per sample / achieved rate + launch overhead`` solo, and co-located
``t'_j = Σ t`` (δ = 1: no gain from sharing — the conservative end). Groups whose memory does not fit are
refused by the pre-check and cost nothing; solos that do not fit cost a start and an OOM. All figures are
:class:`EstimateAssumptions` fields, stated in results/BENCHMARKS.md; the first GPU window replaces them with
measured solo times.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from profiler.campaign.cells import Run, plan_runs
from profiler.campaign.pool import PLAIN, REWARM_ITERS, WorkerKey, mode_key, upcoming_block
from profiler.campaign.spec import CampaignSpec

# Training FLOPs per 224x224 sample = 3 x forward (2 x multiply-accumulates), forward MACs from the
# torchvision model documentation (ResNet-18 1.81 G, ResNet-50 4.09 G, VGG-11 7.61 G, VGG-19 19.63 G);
# SE-ResNet-18 adds < 1 % to ResNet-18. Scaled by (image_size / 224)^2 for other sizes.
TRAIN_GFLOPS_224 = {"resnet18": 10.9, "resnet50": 24.5, "vgg11": 45.7, "vgg19": 117.8, "se_resnet18": 11.0,
                    "tiny_cnn": 0.05}
# Activation memory kept for backward per 224x224 sample in fp32/tf32 (MiB), from the saved tensors of one
# training step (models.memory.activation_mib_per_sample); halved for bf16.
ACTIVATION_MIB_224 = {"resnet18": 21.2, "resnet50": 81.9, "vgg11": 46.6, "vgg19": 74.9, "se_resnet18": 24.0,
                      "tiny_cnn": 3.3}
PARAMS_M = {"resnet18": 11.7, "resnet50": 25.6, "vgg11": 132.9, "vgg19": 143.7, "se_resnet18": 11.8,
            "tiny_cnn": 0.1}


@dataclass(frozen=True)
class EstimateAssumptions:
    gpu: str = "h100"
    # Achieved training rate by precision (TFLOP/s): about 1,100 ResNet-50 images/s in TF32 on an H100 SXM,
    # FP32 without tensor cores at about two thirds of that, bf16 autocast with channels-last about twice.
    achieved_tflops: dict[str, float] = field(default_factory=lambda: {"fp32": 18.0, "tf32": 27.0, "bf16": 55.0})
    memory_mib: float = 80 * 1024
    context_mib: float = 500.0
    launch_overhead_s: float = 0.004  # per iteration (kernel launches of a small batch)
    process_start_s: float = 4.0  # fork from the torch-preloaded fork server, CUDA context, model build
    autotune_s: float = 1.5  # cuDNN benchmark mode on the first warm-up iterations
    run_overhead_s: float = 0.5  # barrier, progress lag, stop and result collection
    store_write_s: float = 0.2
    mps_check_s: float = 0.2
    mps_cycle_s: float = 3.0  # daemon start + answer + quit polling


@dataclass(frozen=True)
class CampaignEstimate:
    runs: int
    infeasible: int
    window_s: float
    warmup_s: float
    startup_s: float
    overhead_s: float

    @property
    def total_s(self) -> float:
        return self.window_s + self.warmup_s + self.startup_s + self.overhead_s

    @property
    def efficiency(self) -> float:
        return self.window_s / self.total_s if self.total_s else 0.0


def solo_iteration_s(model: str, batch: int, image_size: int, precision: str, a: EstimateAssumptions) -> float:
    flops = TRAIN_GFLOPS_224.get(model, 20.0) * 1e9 * (image_size / 224) ** 2 * batch
    return flops / (a.achieved_tflops[precision] * 1e12) + a.launch_overhead_s


def memory_mib(model: str, batch: int, image_size: int, precision: str, a: EstimateAssumptions) -> float:
    activations = ACTIVATION_MIB_224.get(model, 100.0) * (image_size / 224) ** 2 * batch
    if precision == "bf16":
        activations /= 2
    weights = PARAMS_M.get(model, 50.0) * 1e6 * 4 * 3 / 2**20  # parameters, gradients, momentum (fp32)
    return activations + weights + a.context_mib


def estimate_campaign(spec: CampaignSpec, a: EstimateAssumptions | None = None) -> CampaignEstimate:
    """Estimated wall time of ``spec`` on one GPU, by the rules in the module docstring."""
    a = a or EstimateAssumptions()
    runs = plan_runs(spec)
    warm = spec.workers == "warm"
    idle: Counter[WorkerKey] = Counter()
    window = warmup = startup = overhead = 0.0
    infeasible = 0
    daemon_up = False
    for position, run in enumerate(runs):
        cost = _run_cost(run, spec, a, idle if warm else Counter())
        if cost is None:
            infeasible += 1
        else:
            w, up, start, extra = cost
            window, warmup, startup = window + w, warmup + up, startup + start
            overhead += extra + a.run_overhead_s
            served = mode_key(run.cell) != PLAIN  # the mode has a service (the MPS daemon)
            if served:
                overhead += a.mps_check_s + (0.0 if daemon_up else a.mps_cycle_s)
            daemon_up = served  # a plain run quits the daemon first
        overhead += a.store_write_s
        if warm:
            if cost is not None:
                idle.update(WorkerKey(job, mode_key(run.cell)) for job in run.cell.jobs)
            keep: Counter[WorkerKey] = Counter()
            for upcoming in upcoming_block(runs, position):
                for key, count in Counter(WorkerKey(j, mode_key(upcoming.cell)) for j in upcoming.cell.jobs).items():
                    keep[key] = max(keep[key], count)
            idle = idle & keep
        if not any(key.mode != PLAIN for key in idle):
            daemon_up = False  # no idle client needs it: the pool quits the daemon
    return CampaignEstimate(len(runs), infeasible, window, warmup, startup, overhead)


def _run_cost(run: Run, spec: CampaignSpec, a: EstimateAssumptions,
              idle: Counter[WorkerKey]) -> tuple[float, float, float, float] | None:
    """(window, warm-up, start-up, other) seconds of one run, or None when the memory pre-check refuses it."""
    jobs = run.cell.jobs
    need = sum(memory_mib(j.model, j.batch_size, spec.image_size, j.precision, a) for j in jobs)
    if len(jobs) > 1 and need > a.memory_mib:
        return None
    solo = [solo_iteration_s(j.model, j.batch_size, spec.image_size, j.precision, a) for j in jobs]
    available = Counter(idle)
    warmup = startup = 0.0
    for job, t in zip(jobs, solo):
        key = WorkerKey(job, mode_key(run.cell))
        if available[key] > 0:
            available[key] -= 1
            warmup += min(REWARM_ITERS, spec.warmup_iters) * t
        else:
            startup += a.process_start_s
            warmup += spec.warmup_iters * t + a.autotune_s
    if len(jobs) == 1 and need > a.memory_mib:
        return 0.0, warmup, startup, 0.0  # the solo goes out of memory during warm-up
    t_max = sum(solo)  # δ = 1: every member sees the sum of the members' iteration times
    iters = (spec.min_window_iters or 0) + 1
    span = max(spec.min_window_seconds or 0.0, iters * t_max)
    return span, warmup, startup, t_max  # + the iteration each partner finishes after the stop
