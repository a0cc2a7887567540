"""What the simulator knows about jobs beyond the policy code: goodput wrappers, Sia's job rules, memory.

* :class:`AccumulatingGoodput` — a rigid job whose local batch exceeds what fits runs with gradient
  accumulation (as Sia's and Pollux's simulators do).
* :class:`BootstrapGoodput` — what a Sia-style scheduler *believes* (Sia §3.4, ``--project_throughputs``):
  throughput is learned online; a GPU type the job has not run on is projected from one it has, by the ratio
  of the application's 1-GPU throughputs on the two types. Together with :func:`sia_max_gpus` (≤ 2× the
  most GPUs observed, ≤ 64, ≤ max batch / min local batch) new jobs start on one GPU and at most double
  per round.
* :class:`MemoryModel` — each job's per-GPU memory footprint at its local batch on each GPU type, and
  :class:`MemoryCheckedTable`, the colocation table every packing policy reads, which answers "no ratio"
  for a pair or group of three that cannot fit (so no policy ever proposes it).

Sia's per-application numbers (siasosp23/artifacts, ``sia-simulator``): restart (checkpoint-restore) time
in the simulation (``applications.py``), the restart *penalty* its ILP uses (``sia.py``,
``get_restart_penalty``), and the calibration slowdown (``simulator_config.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from common.errors import InputError
from scheduler.formats.profiles import load_goodput_model as goodput_model_from_path
from scheduler.formats.shared_data import default_profiles_dir
from scheduler.model.colocation import ColocationTable
from scheduler.model.goodput import (
    EstimateArrays,
    GoodputEstimate,
    GoodputModel,
    GoodputModelBase,
    GoodputWrapper,
    estimate_arrays,
)
from scheduler.model.jobs import Job
from scheduler.model.memory import free_for_footprints_gb, group_fits
from scheduler.model.state_memo import StateMemo
from scheduler.model.step_time import STEP_TIME_MODES

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.model.cluster import Cluster
    from scheduler.model.configs import Configuration

SIA_RESTART_COST_S: Mapping[str, float] = {"cifar10": 50, "deepspeech2": 25, "bert": 120, "yolov3": 80,
                                           "imagenet": 250, "ncf": 15}
SIA_RESTART_PENALTY_S: Mapping[str, float] = {"cifar10": 30, "deepspeech2": 25, "bert": 120, "yolov3": 45,
                                              "imagenet": 250, "ncf": 30}
SIA_SLOWDOWN: Mapping[str, float] = {"cifar10": 1.8, "imagenet": 1.2, "yolov3": 1.2, "bert": 1.2,
                                     "deepspeech2": 1.2, "ncf": 1.5}
# Sia's simulator gives every NCF job this batch as its target (cluster.py); the data has no other use for it
SIA_TARGET_BATCH: Mapping[str, int] = {"ncf": 32768}
SIA_MAX_GPUS = 64  # "simulator can't handle more" (Sia's cluster.py)


class AccumulatingGoodput(GoodputWrapper):
    """Wraps a goodput model: a rigid job whose local batch exceeds the largest profiled one still runs,
    accumulating gradients over ``k = ceil(local / max_local)`` micro-batches. Its samples/s are those of
    the micro-batch (a slight underestimate: one all-reduce per ``k`` micro-steps), its statistical
    efficiency that of the full batch. ``local_cap`` (per call) lowers the micro-batch further, for a job
    that shares its GPUs' memory with a partner. Everything else is delegated."""

    def __init__(self, inner: GoodputModel) -> None:
        super().__init__(inner)
        # answers kept by the profile model's state key of the job (application, batch limits, epoch) and the
        # shape: the simulator re-reads one job on one shape several times a round (substeps); else no memo
        self._memo = StateMemo(inner)

    def accumulated(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int,
                    local_cap: float | None = None) -> GoodputEstimate | None:
        """The job's own batch run as micro-batches of at most the largest local batch (and ``local_cap``)."""
        return self._memo(self._accumulated, job, gpu_type, num_gpus, num_nodes, local_cap)

    def _accumulated(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int,
                     local_cap: float | None) -> GoodputEstimate | None:
        if not job.batch_size:
            return None
        span = self.local_batch_range(job.application, gpu_type)
        if span is None:
            return None
        biggest = span[1] if local_cap is None else min(span[1], max(local_cap, span[0]))
        local = job.batch_size / num_gpus
        if local <= biggest * (1 + 1e-9):
            return None
        steps = math.ceil(local / biggest - 1e-9)
        micro = max(1, int(job.batch_size // steps))
        est = self.inner.estimate(job.with_state(batch_size=micro, adaptive=False), gpu_type, num_gpus, num_nodes)
        if est is None:
            return None
        full = self.efficiency(job, float(job.batch_size))
        eff = float(np.asarray(full).reshape(-1)[0]) if full is not None else est.efficiency
        return GoodputEstimate(int(job.batch_size), est.throughput, eff)

    def estimate(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int = 1) -> GoodputEstimate | None:
        return self._memo(self._estimate, job, gpu_type, num_gpus, num_nodes)

    def same_state(self, job: Job, other: Job) -> bool:
        """Whether every estimate of ``job`` is the estimate of ``other`` too (one state key of the profile
        model, e.g. one epoch of its validation curves); False where the model keys no states."""
        return self._memo.same_state(job, other)

    def _estimate(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int) -> GoodputEstimate | None:
        est = self.inner.estimate(job, gpu_type, num_gpus, num_nodes)
        if est is not None or job.adaptive:
            return est
        return self._accumulated(job, gpu_type, num_gpus, num_nodes, None)

    def estimate_arrays(self, job: Job, configs: Sequence[Configuration]) -> EstimateArrays:
        arrays = estimate_arrays(self.inner, job, configs)
        if job.adaptive or not job.batch_size or not np.isnan(arrays.goodput).any():
            return arrays
        filled = arrays.to_list()
        for i, c in enumerate(configs):
            if filled[i] is None:
                filled[i] = self.accumulated(job, c.gpu_type, c.num_gpus, c.num_nodes)
        return EstimateArrays.from_list(filled)

    def estimate_many(self, job: Job, configs: Sequence[Configuration]) -> list[GoodputEstimate | None]:
        return self.estimate_arrays(job, configs).to_list()


class BootstrapGoodput(GoodputWrapper):
    """The policy's belief under Sia's online throughput learning (see the module docstring).

    ``observed[job][gpu_type]`` = the most GPUs the job has run on there (the simulator records it). On an
    observed type the belief is the model's value; on another type it is the value on the first observed
    type (cluster order, as Sia takes the first GPU type with a fitted model) at the same GPU count, times
    ``tput_t(1) / tput_ref(1)`` — each type's 1-GPU throughput at its largest local batch, Sia's ratio. A
    job never run yet is believed at the model's 1-GPU values (Sia uses the raw 1-GPU throughput; its GPU
    cap of 1 leaves nothing else to compare).
    """

    def __init__(self, inner: GoodputModel, cluster: Cluster) -> None:
        super().__init__(inner)
        self.cluster = cluster
        self.observed: dict[str, dict[str, int]] = {}
        self._ratio: dict[tuple[str, str, str], float] = {}
        self._plans: dict[tuple, Any] = {}
        self._plans_by_id: dict[tuple, tuple[object, Any]] = {}
        self._projected: dict[tuple, tuple[EstimateArrays, tuple, EstimateArrays]] = {}

    def record(self, job: str, gpu_type: str, num_gpus: int) -> None:
        seen = self.observed.setdefault(job, {})
        seen[gpu_type] = max(seen.get(gpu_type, 0), num_gpus)

    def max_observed(self, job: str) -> int:
        return max(self.observed.get(job, {}).values(), default=0)

    def _atomic_rate(self, application: str, gpu_type: str) -> float | None:
        span = self.local_batch_range(application, gpu_type)
        if span is None:
            return None
        rate = self.inner.throughput(application, gpu_type, 1, int(span[1]), 1)
        return rate if rate and rate > 0 else None

    def ratio(self, application: str, gpu_type: str, reference: str) -> float | None:
        key = (application, gpu_type, reference)
        if key not in self._ratio:
            a, b = self._atomic_rate(application, gpu_type), self._atomic_rate(application, reference)
            self._ratio[key] = a / b if a and b else float("nan")
        value = self._ratio[key]
        return None if math.isnan(value) else value

    def estimate_arrays(self, job: Job, configs: Sequence[Configuration]) -> EstimateArrays:
        seen = self.observed.get(job.name)
        if not seen:
            return estimate_arrays(self.inner, job, configs)
        reference = next(t.name for t in self.cluster if t.name in seen)
        plan = self._projection(job.application, reference, configs, seen)
        if plan is None:
            return estimate_arrays(self.inner, job, configs)
        # one call for the shapes and the reference type's shapes at the same GPU counts behind them
        both = estimate_arrays(self.inner, job, plan[1])
        # the answer depends only on those estimates and the plan: a job whose estimates did not change
        # since the last round (the inner model hands back the same arrays) gets the same answer back
        key = (id(both), id(plan))
        hit = self._projected.get(key)
        if hit is not None and hit[0] is both and hit[1] is plan:
            return hit[2]
        result = self._project(both, plan, len(configs))
        if len(self._projected) > 4096:
            self._projected.clear()
        self._projected[key] = (both, plan, result)
        return result

    @staticmethod
    def _project(both: EstimateArrays, plan: tuple, n: int) -> EstimateArrays:
        rows, _, ratios = plan
        arrays = EstimateArrays(both.goodput[:n], both.batch_size[:n], both.throughput[:n], both.efficiency[:n])
        ref = EstimateArrays(both.goodput[n:], both.batch_size[n:], both.throughput[n:], both.efficiency[n:])
        ok = arrays.goodput > 0
        batch = np.where(ok, np.floor(arrays.batch_size), np.nan)
        throughput = np.where(ok, arrays.throughput, np.nan)
        efficiency = np.where(ok, arrays.efficiency, np.nan)
        # a shape the job cannot run on (memory, profile) stays so: projection does not change that
        hit = ok[rows] & (ref.goodput > 0)
        at, src = rows[hit], np.nonzero(hit)[0]
        throughput[at] = ref.throughput[src] * ratios[src]
        efficiency[at] = ref.efficiency[src]
        batch[at] = np.floor(ref.batch_size[src])
        goodput = throughput * efficiency  # as GoodputEstimate.goodput computes it
        for array in (goodput, batch, throughput, efficiency):
            array.setflags(write=False)  # shared between callers (see estimate_arrays)
        return EstimateArrays(goodput, batch, throughput, efficiency)

    def _projection(self, application: str, reference: str, configs: Sequence[Configuration],
                    seen: Mapping[str, int]) -> "tuple[np.ndarray, tuple[Configuration, ...], np.ndarray] | None":
        """Which shapes are projected from ``reference`` (rows), the shapes followed by the reference
        shapes behind the rows (same GPU count, nodes of the reference type) and the rows' ratios; None
        when nothing is projected. Cached by the tuple's identity, then by content: the ILP asks for the
        same shapes every round."""
        seen_types = frozenset(seen)
        by_id = (application, reference, id(configs), seen_types)
        hit = self._plans_by_id.get(by_id)
        if hit is not None and hit[0] is configs:  # the entry keeps its tuple alive, so the id is not reused
            return hit[1]
        plan = self._plan(application, reference, tuple(configs), seen_types)
        if len(self._plans_by_id) > 4096:
            self._plans_by_id.clear()
        self._plans_by_id[by_id] = (configs, plan)
        return plan

    def _plan(self, application: str, reference: str, configs: tuple[Configuration, ...],
              seen: frozenset[str]) -> "tuple[np.ndarray, tuple[Configuration, ...], np.ndarray] | None":
        from scheduler.model.configs import Configuration

        key = (application, reference, configs, seen)
        plan = self._plans.get(key, False)
        if plan is not False:
            return plan
        ref_type = self.cluster[reference]
        rows, refs, ratios = [], [], []
        for i, c in enumerate(configs):
            if c.gpu_type in seen:
                continue
            ratio = self.ratio(application, c.gpu_type, reference)
            if ratio is None:
                continue
            rows.append(i)
            refs.append(Configuration(reference, math.ceil(c.num_gpus / ref_type.gpus_per_node), c.num_gpus))
            ratios.append(ratio)
        plan = (np.array(rows, dtype=np.int64), configs + tuple(refs), np.array(ratios, dtype=float)) if rows else None
        if len(self._plans) > 4096:
            self._plans.clear()
        self._plans[key] = plan
        return plan

    def estimate_many(self, job: Job, configs: Sequence[Configuration]) -> list[GoodputEstimate | None]:
        return self.estimate_arrays(job, configs).to_list()

    def estimate(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int = 1) -> GoodputEstimate | None:
        from scheduler.model.configs import Configuration

        return self.estimate_arrays(job, (Configuration(gpu_type, num_nodes, num_gpus),)).at(0)


def sia_max_gpus(model: GoodputModelBase, cluster: Cluster, application: str, observed: int | None) -> int:
    """Sia's GPU cap for an adaptive job: ``min(max(2·observed, 1), 64, max_batch // min_local)``, the last
    term taken on the most permissive GPU type (Sia shares the cap across types). ``observed=None``: no
    online learning (oracle throughput), only the last two terms."""
    curve = model.curves.get(application)
    by_batch = 0
    for t in cluster:
        span = model.local_batch_range(application, t.name)
        if span is not None and curve is not None:
            by_batch = max(by_batch, int(curve.max_batch_size // max(span[0], 1)))
    cap = min(SIA_MAX_GPUS, by_batch) if by_batch else SIA_MAX_GPUS
    if observed is not None:
        cap = min(cap, max(2 * observed, 1))
    return max(cap, 1)


# --------------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------------

# Parameter counts (millions) of the models behind Sia's six applications, from their papers: ResNet-18
# (CIFAR variant, He et al. 2016), ResNet-50 (He et al. 2016), BERT-base (Devlin et al. 2019), YOLOv3
# (Redmon & Farhadi 2018), DeepSpeech2 (Amodei et al. 2016 report 35-100 M; 40 M assumed), NeuMF on
# MovieLens-20M (He et al. 2017; embeddings of 138 k users + 27 k items, ~21 M).
MODEL_PARAMS_M: Mapping[str, float] = {"cifar10": 11.2, "imagenet": 25.6, "bert": 110.0, "yolov3": 61.9,
                                       "deepspeech2": 40.0, "ncf": 21.0}
BYTES_PER_PARAM = 16  # fp32 weights + gradients + two optimizer moments (an upper bound for SGD+momentum)


@dataclass(frozen=True)
class MemoryModel:
    """Per-GPU memory (GB) of a job at local batch ``m`` on a GPU type: ``static + per_sample · m``.

    ``static`` = parameters × 16 bytes (:data:`MODEL_PARAMS_M`); ``per_sample`` is set so that the
    largest local batch profiled on the type (Sia's profiles stop where memory runs out: its adaptdl
    ``profiles/`` record exactly that batch per GPU type) fills the GPU less one CUDA context. So a job
    alone always fits; n jobs on one GPU (a pair, a group of three) fit by the rule the ILP plans with and
    ``colocate serve`` enforces (:func:`scheduler.model.memory.group_fits`: ``Σ (1 + h)·(static + per_sample·m)
    + n·context ≤ memory``, h the stated headroom). The linear form overstates activations at small batches, so
    the check errs toward rejecting a group.
    """

    model: GoodputModelBase
    cluster: Cluster
    context_gb: float = 0.5
    params_m: Mapping[str, float] = field(default_factory=lambda: dict(MODEL_PARAMS_M))

    def static_gb(self, application: str) -> float:
        return self.params_m.get(application, 0.0) * 1e6 * BYTES_PER_PARAM / 1e9

    def per_sample_gb(self, application: str, gpu_type: str) -> float | None:
        span = self.model.local_batch_range(application, gpu_type)
        if span is None or span[1] <= 0:
            return None
        free = self.cluster[gpu_type].memory_gb - self.context_gb - self.static_gb(application)
        return max(free, 0.0) / span[1]

    def footprint_gb(self, application: str, gpu_type: str, local_batch: float) -> float | None:
        per = self.per_sample_gb(application, gpu_type)
        return None if per is None else self.static_gb(application) + per * local_batch

    def min_local(self, job: Job, gpu_type: str) -> float | None:
        """The smallest local batch the job can run on one GPU of the type (adaptive: the smallest
        profiled; rigid: its own batch per GPU, or the largest that fits when it accumulates)."""
        span = self.model.local_batch_range(job.application, gpu_type)
        if span is None:
            return None
        if job.adaptive or not job.batch_size:
            return float(span[0])
        return min(job.batch_size / max(job.num_gpus, 1), float(span[1]))

    def group_fits(self, gpu_type: str, *members: tuple[str, float]) -> bool:
        """Whether the ``(application, local batch)`` members fit together on one GPU of the type (True when
        the goodput model has no batch limits for one of them: a table without a batch dimension)."""
        sizes = [self.footprint_gb(app, gpu_type, local) for app, local in members]
        if any(f is None for f in sizes):
            return True
        return group_fits(self.cluster[gpu_type].memory_gb, sizes, self.context_gb)

    def group_locals(self, gpu_type: str, *members: tuple[str, float],
                     floors: Sequence[float] | None = None) -> tuple[float, ...]:
        """Local batches the members can run at together: as asked when they fit, else shrunk in proportion
        until they do (the jobs then accumulate gradients to keep their global batch). ``floors``: the
        smallest local batch each can run; a member that would go below it stays there and the others
        shrink further (so a group whose floors fit always fits)."""
        per = [self.per_sample_gb(app, gpu_type) for app, _ in members]
        if self.group_fits(gpu_type, *members) or any(p is None for p in per):
            return tuple(local for _, local in members)
        lowest = list(floors) if floors is not None else [0.0] * len(members)
        out = [float(local) for _, local in members]
        fixed: set[int] = set()
        for _ in members:  # each pass fixes at least one more member at its floor, or ends
            free = (free_for_footprints_gb(self.cluster[gpu_type].memory_gb, len(members), self.context_gb)
                    - sum(self.static_gb(app) for app, _ in members)
                    - sum((per[i] or 0.0) * lowest[i] for i in fixed))
            need = sum((per[i] or 0.0) * members[i][1] for i in range(len(members)) if i not in fixed)
            shrink = max(free, 0.0) / need if need > 0 else 0.0
            below = []
            for i, (_, local) in enumerate(members):
                if i not in fixed:
                    out[i] = float(math.floor(local * shrink))
                    if out[i] < lowest[i]:
                        below.append(i)
            if not below:
                break
            for i in below:
                fixed.add(i)
                out[i] = float(lowest[i])
        return tuple(out)


@dataclass(frozen=True, eq=False)
class MemoryCheckedTable(ColocationTable):
    """A colocation table that answers None for a pair or a group of three whose smallest local batches do
    not fit together on the GPU type (:class:`MemoryModel`), so every packing policy leaves such groups alone."""

    memory: MemoryModel | None = None
    # answers by everything a lookup reads of the two jobs (the ILP asks the same few questions every round)
    _answers: dict[tuple, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        return id(self)

    def _fit(self, gpu_type: str, jobs: Sequence[Job]) -> bool:
        if self.memory is None:
            return True
        members = []
        for j in jobs:
            local = self.memory.min_local(j, gpu_type)
            if local is None:
                return True  # no batch limits known (see MemoryModel.group_fits)
            members.append((j.application, local))
        return self.memory.group_fits(gpu_type, *members)

    def lookup(self, gpu_type: str, job_a: Job, job_b: Job) -> tuple[float, float] | None:
        key = (gpu_type, job_a.application, job_a.batch_size, job_a.adaptive, job_a.num_gpus,
               job_b.application, job_b.batch_size, job_b.adaptive, job_b.num_gpus)
        answer = self._answers.get(key, False)
        if answer is False:
            if len(self._answers) > 65536:
                self._answers.clear()
            answer = self._answers[key] = self._lookup(gpu_type, job_a, job_b)
        return answer

    def _lookup(self, gpu_type: str, job_a: Job, job_b: Job) -> tuple[float, float] | None:
        hit = super().lookup(gpu_type, job_a, job_b)
        return hit if hit is None or self._fit(gpu_type, (job_a, job_b)) else None

    def triple_ratios(self, gpu_type: str, jobs: Sequence[Job]) -> tuple[float, float, float] | None:
        hit = super().triple_ratios(gpu_type, jobs)
        return hit if hit is None or self._fit(gpu_type, jobs) else None


def scaled_table(table: ColocationTable, strength: float) -> ColocationTable:
    """The table with every pair's benefit scaled: ``Σr − 1`` becomes ``strength · (Σr − 1)`` by scaling
    both ratios alike (each capped at 1); 1 leaves it as is, < 1 weakens, > 1 strengthens. Infeasible
    pairs (a ratio of 0) stay infeasible."""
    rows = {}
    for key, (ra, rb) in table.ratios.items():
        total = ra + rb
        if ra <= 0 or rb <= 0 or total <= 0:
            rows[key] = (ra, rb)
            continue
        factor = max(1.0 + strength * (total - 1.0), 0.0) / total
        rows[key] = (min(ra * factor, 1.0), min(rb * factor, 1.0))
    return ColocationTable(rows)


# --------------------------------------------------------------------------------------------------
# Loading the default goodput model
# --------------------------------------------------------------------------------------------------

@lru_cache(maxsize=4)
def _load_profiles(path: str, applications: tuple[str, ...] | None, gpu_types: tuple[str, ...] | None,
                   efficiency: str, step_times: str) -> GoodputModel:
    from scheduler.formats.profiles import is_sia_traces_dir, read_gns_curves, read_sia_profiles
    from scheduler.model.efficiency import read_validation_curves
    from scheduler.model.goodput import ProfileGoodputModel

    p = Path(path)
    if is_sia_traces_dir(p):
        profiles = read_sia_profiles(p, applications=applications, gpu_types=gpu_types)
        validation = read_validation_curves(p, applications) if efficiency == "sia" else None
        return ProfileGoodputModel(profiles, read_gns_curves(p, applications=applications), validation, step_times)
    model = goodput_model_from_path(p)
    return model if step_times == "fitted" else ProfileGoodputModel(model.profiles, model.curves, step_times=step_times)


EFFICIENCY_MODES = ("sia", "gns")


def simulation_goodput_model(profiles: str | Path | None = None, applications: Sequence[str] | None = None,
                       gpu_types: Sequence[str] | None = None, efficiency: str = "sia",
                       step_times: str = "fitted") -> GoodputModel:
    """A :class:`scheduler.model.goodput.ProfileGoodputModel` from a profile CSV or Sia traces directory (default:
    Sia's traces in the shared data folder, else the bundled set), restricted to the given applications and GPU
    types, cached.

    ``efficiency``: ``"sia"`` reads every validation curve (efficiency at the job's own batch, as Sia's
    simulator); ``"gns"``: the initial batch's gradient-noise curve only (Pollux's form). ``step_times``:
    ``"fitted"`` (Pollux-form fit, measured points as measured) or ``"interpolated"`` (Sia's simulator's).
    """
    if efficiency not in EFFICIENCY_MODES:
        raise InputError(f"efficiency model {efficiency!r}", source="simulate", field="efficiency",
                         valid=", ".join(EFFICIENCY_MODES))
    path = Path(profiles) if profiles is not None else default_profiles_dir(gpu_types)
    if not path.exists():
        raise InputError("throughput profiles not found", source=path, field="profiles",
                         valid="Sia's traces directory (<shared>/sia/traces) or a profile CSV")
    apps = tuple(sorted(applications)) if applications is not None else None
    types = tuple(sorted(gpu_types)) if gpu_types is not None else None
    if step_times not in STEP_TIME_MODES:
        raise InputError(f"step-time model {step_times!r}", source="simulate", field="step_times",
                         valid=", ".join(STEP_TIME_MODES))
    return _load_profiles(str(path.resolve()), apps, types, efficiency, step_times)


__all__ = [
    "EFFICIENCY_MODES", "MODEL_PARAMS_M", "SIA_RESTART_COST_S", "SIA_RESTART_PENALTY_S", "SIA_SLOWDOWN",
    "SIA_TARGET_BATCH", "AccumulatingGoodput", "BootstrapGoodput", "MemoryCheckedTable", "MemoryModel",
    "simulation_goodput_model", "scaled_table", "sia_max_gpus",
]
