"""Wall-time estimate of a campaign from its protocol, before any GPU time is spent.

The estimate replays the plan (:func:`profiler.campaign.cells.plan_runs`) through the same warm-worker rules as
:class:`profiler.campaign.pool.WorkerPool` (workers keyed by job type and sharing mode, kept for their batch-size
block; one MPS daemon per run of MPS runs) and charges each run:

* process start + model build for every *cold* worker, then its warm-up (``warmup_iters`` iterations plus
  cuDNN autotuning), one member after the other; a *warm* worker re-warms for 2 iterations;
* the window: ``max(min_window_seconds, (min_window_iters + 1) · t'_max)`` plus the iteration the partners
  finish after the stop (at most 2 are in flight, so no longer queue drains);
* fixed costs: barrier and stop, the MPS membership check, the results-store write; an MPS daemon cycle
  (start, readiness, quit polling) whenever the mode switches to MPS, and the stop of the idle MPS clients
  when a plain run follows;
* evictions: a group that does not fit beside the idle workers stops them (they start cold again later);
* windows: the campaign runs in device calls of ``window_budget_s``; each costs ``window_startup_s`` (machine,
  imports, packing) and one preflight with its MPS probe (``probe_s``); the first also runs the GPU tests
  (``first_window_tests_s``).

Iteration times: ``t = batch · FLOPs per sample / achieved rate + launch overhead`` solo, and co-located
``t'_j = Σ t`` (δ = 1: no gain from sharing — the conservative end). Groups whose memory does not fit are
refused by the pre-check and cost nothing; solos that do not fit cost a start and an OOM. All figures are
:class:`EstimateAssumptions` fields (``colocate bench profiler --estimate SPEC --set NAME=VALUE`` changes
any of them), stated in results/h100/NOTES.md; measured solo times replace the FLOP-rate model where a
results directory has them (``--results DIR``: :func:`measured_solo_times`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from profiler.campaign.cells import JobType, Run, plan_runs
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
# The same per 32x32 sample for the CIFAR-style variant the zoo builds for inputs of at most 95 px
# (models.registry.is_cifar_style: a stride-1 stem without pooling keeps 32x32 feature maps where the ImageNet stem
# would shrink them to 8x8), 10 classes: ten times what scaling the 224 px figure by pixels gives for ResNet-18.
ACTIVATION_MIB_CIFAR_32 = {"resnet18": 4.482, "resnet50": 24.332, "vgg11": 1.525, "vgg19": 2.682, "se_resnet18": 5.435,
                           "tiny_cnn": 0.067}
CIFAR_STYLE_MAX_IMAGE_SIZE = 95  # models.registry.CIFAR_STYLE_MAX_IMAGE_SIZE (not imported: no torch here)
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
    autotune_s: float = 0.5  # first-iteration cuBLAS/cuDNN set-up (heuristic algorithms: no timed autotuning)
    run_overhead_s: float = 0.5  # barrier, progress lag, stop and result collection
    store_write_s: float = 0.2
    mps_check_s: float = 0.2
    mps_cycle_s: float = 3.0  # daemon start + answer + quit polling
    mps_client_stop_s: float = 0.5  # per idle MPS client stopped before a plain run
    eviction_s: float = 1.0  # stopping the idle workers so that a group fits
    window_budget_s: float = 600.0  # one device call
    window_startup_s: float = 60.0  # machine start, imports, packing the results, per call
    probe_s: float = 15.0  # the preflight and its MPS probe, per call
    first_window_tests_s: float = 150.0  # the GPU tests, first call only
    solo_times_s: Mapping[str, float] = field(default_factory=dict)  # measured t by job type label ("resnet18@64")

    def with_values(self, values: Mapping[str, str]) -> EstimateAssumptions:
        """A copy with the named number fields set from text (``achieved_tflops`` sets the precision of the
        spec as ``tf32:27``); raises ValueError naming the field and what is valid."""
        numbers = {f.name for f in fields(self) if f.type in ("float", float)}
        changes: dict[str, object] = {}
        for name, text in values.items():
            if name == "achieved_tflops":
                precision, _, rate = text.partition(":")
                changes[name] = {**self.achieved_tflops, precision: _positive(name, rate)}
            elif name in numbers:
                changes[name] = _positive(name, text)
            else:
                raise ValueError(f"unknown assumption '{name}' (valid: {', '.join(sorted(numbers))}, "
                                 "achieved_tflops=PRECISION:RATE)")
        return replace(self, **changes)  # type: ignore[arg-type]


# GPU types with assumptions of their own. The H200 has the H100 SXM's GH100 tensor cores at the same rates (NVIDIA's
# H200 datasheet: equal TF32 and BF16 TFLOP/s) with 141 GB of HBM3e at 4.8 TB/s; the training rates are kept at the
# H100's (the faster memory is not counted: the estimate errs long) and the usable memory is the ~139 GiB this
# project's H200 device machines offer.
GPU_ASSUMPTIONS: Mapping[str, EstimateAssumptions] = {
    "h100": EstimateAssumptions(),
    "h200": EstimateAssumptions(gpu="h200", memory_mib=139 * 1024),
}


def assumptions_for(gpu: str) -> EstimateAssumptions:
    """The assumptions of a GPU type with its own (:data:`GPU_ASSUMPTIONS`), else the H100's under that name (for
    estimates whose solo times are measured on that GPU: ``--results``)."""
    return GPU_ASSUMPTIONS.get(gpu) or EstimateAssumptions(gpu=gpu)


def _positive(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}={text!r} is not a number >= 0")
    return value


def measured_solo_times(results_dir: str | Path) -> dict[str, float]:
    """Mean solo t by job type label from a results directory (every session's ok solos; empty when none)."""
    from profiler.campaign.driver import baselines_from
    from profiler.results.store import ResultsStore

    baselines = baselines_from(ResultsStore(results_dir))
    return {job.label: base.iter_time_s for job, base in baselines.items() if base.iter_time_s is not None}


@dataclass(frozen=True)
class CampaignEstimate:
    runs: int
    infeasible: int
    window_s: float
    warmup_s: float
    startup_s: float
    overhead_s: float
    windows: int = 1  # device calls needed
    per_window_s: float = 0.0  # their start-up, probes and the first call's tests
    measured: int = 0  # job types whose t came from measured solos

    @property
    def total_s(self) -> float:
        return self.window_s + self.warmup_s + self.startup_s + self.overhead_s + self.per_window_s

    @property
    def efficiency(self) -> float:
        return self.window_s / self.total_s if self.total_s else 0.0


def solo_iteration_s(model: str, batch: int, image_size: int, precision: str, a: EstimateAssumptions,
                     label: str | None = None) -> float:
    """Measured t of job type ``label`` when the assumptions hold one, else the FLOP-rate model."""
    if label is not None and label in a.solo_times_s:
        return float(a.solo_times_s[label])
    flops = TRAIN_GFLOPS_224.get(model, 20.0) * 1e9 * (image_size / 224) ** 2 * batch
    return flops / (a.achieved_tflops[precision] * 1e12) + a.launch_overhead_s


def activation_mib(model: str, image_size: int) -> float:
    """MiB of activations one sample of ``model`` keeps for backward at ``image_size`` (fp32): the figure of the
    model's variant at that size (CIFAR-style or ImageNet-style), scaled by pixels within the variant."""
    if image_size <= CIFAR_STYLE_MAX_IMAGE_SIZE and model in ACTIVATION_MIB_CIFAR_32:
        return ACTIVATION_MIB_CIFAR_32[model] * (image_size / 32) ** 2
    return ACTIVATION_MIB_224.get(model, 100.0) * (image_size / 224) ** 2


def memory_mib(model: str, batch: int, image_size: int, precision: str, a: EstimateAssumptions) -> float:
    activations = activation_mib(model, image_size) * batch
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
        if warm and _needs_eviction(run, spec, a, idle):
            overhead += a.eviction_s
            idle = Counter()
        if mode_key(run.cell) == PLAIN:  # a plain run stops the idle MPS clients (and their daemon) first
            clients = sum(count for key, count in idle.items() if key.mode != PLAIN)
            overhead += clients * a.mps_client_stop_s
            idle = Counter({key: count for key, count in idle.items() if key.mode == PLAIN})
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
    measured = len({j.label for r in runs for j in r.cell.jobs if j.label in a.solo_times_s})
    work = window + warmup + startup + overhead
    usable = max(a.window_budget_s - a.window_startup_s - a.probe_s, 1.0)
    windows = max(1, math.ceil((work + a.first_window_tests_s) / usable))
    per_window = windows * (a.window_startup_s + a.probe_s) + a.first_window_tests_s
    return CampaignEstimate(len(runs), infeasible, window, warmup, startup, overhead, windows, per_window, measured)


def _memory(job: JobType, spec: CampaignSpec, a: EstimateAssumptions) -> float:
    return memory_mib(job.model, job.batch_size, spec.image_size, job.precision, a)


def _needs_eviction(run: Run, spec: CampaignSpec, a: EstimateAssumptions, idle: Counter[WorkerKey]) -> bool:
    """Whether ``run`` fits an empty GPU but not beside the idle workers it does not use (the pool evicts)."""
    need = sum(_memory(j, spec, a) for j in run.cell.jobs)
    if need > a.memory_mib:
        return False
    spare = Counter(idle)
    for job in run.cell.jobs:
        spare[WorkerKey(job, mode_key(run.cell))] -= 1
    # an idle worker emptied its allocator cache: it holds weights, gradients, momentum and its context
    held = sum((_memory(key.job, spec, a) - _activations(key.job, spec)) * count
               for key, count in spare.items() if count > 0)
    return need + held > a.memory_mib


def _activations(job: JobType, spec: CampaignSpec) -> float:
    activations = activation_mib(job.model, spec.image_size) * job.batch_size
    return activations / 2 if job.precision == "bf16" else activations


def _run_cost(run: Run, spec: CampaignSpec, a: EstimateAssumptions,
              idle: Counter[WorkerKey]) -> tuple[float, float, float, float] | None:
    """(window, warm-up, start-up, other) seconds of one run, or None when the memory pre-check refuses it."""
    jobs = run.cell.jobs
    need = sum(memory_mib(j.model, j.batch_size, spec.image_size, j.precision, a) for j in jobs)
    if len(jobs) > 1 and need > a.memory_mib:
        return None
    solo = [solo_iteration_s(j.model, j.batch_size, spec.image_size, j.precision, a, j.label) for j in jobs]
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
