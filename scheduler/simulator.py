"""Trace-driven, round-based cluster simulator for every policy behind :class:`scheduler.policy.Policy`.

Each round (60 s by default, as in Sia):

1. Jobs whose arrival time has passed join the active set.
2. The policy allocates (the very same :mod:`scheduler.ilp` / :mod:`scheduler.policies` objects that
   ``colocate schedule`` uses); the placement stage (:func:`scheduler.placement.place`) assigns nodes/GPUs.
3. Invariants are checked (:func:`check_round`, then :func:`check_placement`): every active job exactly
   once, no finished or unknown job, capacity per GPU type, at most two jobs per GPU and only as declared
   partners on exactly the same GPUs, rigid jobs at least their requested size. A violation raises
   :class:`SimulationError` naming the round and the job.
4. A job whose GPUs changed (type, count, nodes or GPU indices) pays its restart cost (checkpoint-restore:
   no progress, GPUs held); the next round it is *pinned* so the policy keeps it in place while restoring.
5. Jobs progress by their goodput on the allocation (throughput × statistical efficiency, from the goodput
   model, divided by the application's calibration slowdown), times their co-location ratio while packed.
   Within a round a pair is integrated piecewise: a job runs at its solo rate while its partner restores or
   after its partner finished, at the packed rate otherwise. A job finishes when its useful samples reach
   its work; it leaves at that instant and its GPUs are free from the next round.

Job length (work) is Sia's: the application's full reference GNS curve (``max_progress × M0`` useful
samples, e.g. 100 epochs of CIFAR-10), unless the workload gives ``work`` or ``duration``. Restart costs and
calibration slowdowns per application default to the values of Sia's simulator
(:data:`SIA_RESTART_COST_S`, :data:`SIA_SLOWDOWN`). The goodput model plays both roles — what the policy
believes and what happens — so differences between policies come from decisions alone.

Rigid jobs whose batch does not fit a GPU's memory run with gradient accumulation
(:class:`AccumulatingGoodput`): the samples/s of the largest batch that fits, at the efficiency of the
requested batch.

Deterministic for a seed (the seed reaches randomised policies such as Gandiva). Results:
:class:`SimulationResult` with per-job, per-round and per-allocation tables (written as Parquet).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from profiler.errors import InputError
from scheduler.cluster import Cluster, load_cluster
from scheduler.goodput import EstimateArrays, GoodputEstimate, GoodputModel, GoodputModelBase, estimate_arrays
from scheduler.jobs import Job
from scheduler.placement import Placement, place
from scheduler.policy import Allocation, Policy, RoundContext, RoundDecision, check_decision
from scheduler.workloads import Workload, WorkloadJob, default_profiles_dir, load_workload

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from scheduler.colocation import ColocationTable
    from scheduler.configs import Configuration

# Sia's simulator (siasosp23/artifacts, sia-simulator/applications.py and simulator_config.py): seconds to
# checkpoint and restore per application, and the slowdown that calibrates simulated to measured runs.
SIA_RESTART_COST_S: Mapping[str, float] = {"cifar10": 50, "deepspeech2": 25, "bert": 120, "yolov3": 80,
                                           "imagenet": 250, "ncf": 15}
SIA_SLOWDOWN: Mapping[str, float] = {"cifar10": 1.8, "imagenet": 1.2, "yolov3": 1.2, "bert": 1.2,
                                     "deepspeech2": 1.2, "ncf": 1.5}
SUMMARY_KEYS = ("policy", "jobs", "completed", "avg_jct_s", "p50_jct_s", "p99_jct_s", "makespan_s", "gpu_hours",
                "utilization", "restarts", "packed_fraction", "wall_s")


class SimulationError(AssertionError):
    """An invariant broke; the message names the round, the simulated time and the job."""


@dataclass(frozen=True)
class SimConfig:
    """Simulation knobs. ``restart_cost_s``/``slowdown`` are per application (others use the defaults)."""

    round_s: float = 60.0
    seed: int = 0
    restart_cost_s: Mapping[str, float] = field(default_factory=lambda: dict(SIA_RESTART_COST_S))
    default_restart_cost_s: float = 30.0
    slowdown: Mapping[str, float] = field(default_factory=lambda: dict(SIA_SLOWDOWN))
    max_time_s: float = 60 * 86400.0
    log_allocations: bool = True

    def __post_init__(self) -> None:
        if not self.round_s > 0:
            raise InputError(f"round length {self.round_s}", source="--round", field="round", valid="seconds > 0")
        if not self.max_time_s > 0:
            raise InputError(f"max time {self.max_time_s}", source="simulate", field="max_time_s", valid="seconds > 0")

    def restart_cost(self, application: str) -> float:
        return float(self.restart_cost_s.get(application, self.default_restart_cost_s))

    def slowdown_of(self, application: str) -> float:
        return float(self.slowdown.get(application, 1.0))


# --------------------------------------------------------------------------------------------------
# Goodput with gradient accumulation for rigid jobs
# --------------------------------------------------------------------------------------------------

class AccumulatingGoodput(GoodputModelBase):
    """Wraps a goodput model: a rigid job whose local batch exceeds the largest profiled one still runs,
    accumulating gradients over ``k = ceil(local / max_local)`` micro-batches (as Sia's and Pollux's
    simulators do). Its samples/s are those of the micro-batch (a slight underestimate: one all-reduce per
    ``k`` micro-steps), its statistical efficiency that of the full batch. Everything else is delegated."""

    def __init__(self, inner: GoodputModel) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:  # curves, local_batch_range, applications, ...
        return getattr(self.inner, name)

    def throughput(self, application: str, gpu_type: str, num_gpus: int, batch_size: int,
                   num_nodes: int = 1) -> float | None:
        return self.inner.throughput(application, gpu_type, num_gpus, batch_size, num_nodes)

    def _accumulated(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int) -> GoodputEstimate | None:
        if job.adaptive or not job.batch_size:
            return None
        limits = getattr(self.inner, "local_batch_range", None)
        span = limits(job.application, gpu_type) if limits is not None else None
        if span is None:
            return None
        local = job.batch_size / num_gpus
        if local <= span[1] * (1 + 1e-9):
            return None
        steps = math.ceil(local / span[1] - 1e-9)
        micro = max(1, int(job.batch_size // steps))
        est = self.inner.estimate(job.with_state(batch_size=micro), gpu_type, num_gpus, num_nodes)
        if est is None:
            return None
        efficiency_of = getattr(self.inner, "efficiency", None)
        eff = float(np.asarray(efficiency_of(job, float(job.batch_size))).reshape(-1)[0]) if efficiency_of else est.efficiency
        return GoodputEstimate(int(job.batch_size), est.throughput, eff)

    def estimate(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int = 1) -> GoodputEstimate | None:
        est = self.inner.estimate(job, gpu_type, num_gpus, num_nodes)
        return est if est is not None else self._accumulated(job, gpu_type, num_gpus, num_nodes)

    def estimate_arrays(self, job: Job, configs: "Sequence[Configuration]") -> EstimateArrays:
        arrays = estimate_arrays(self.inner, job, configs)
        if job.adaptive or not job.batch_size or not np.isnan(arrays.goodput).any():
            return arrays
        filled = arrays.to_list()
        for i, c in enumerate(configs):
            if filled[i] is None:
                filled[i] = self._accumulated(job, c.gpu_type, c.num_gpus, c.num_nodes)
        return EstimateArrays.from_list(filled)

    def estimate_many(self, job: Job, configs: "Sequence[Configuration]") -> list[GoodputEstimate | None]:
        return self.estimate_arrays(job, configs).to_list()


@lru_cache(maxsize=4)
def _load_profiles(path: str, applications: tuple[str, ...] | None, gpu_types: tuple[str, ...] | None) -> GoodputModel:
    from scheduler.goodput import ProfileGoodputModel
    from scheduler.profiles import is_sia_traces_dir, read_gns_curves, read_sia_profiles

    p = Path(path)
    if is_sia_traces_dir(p):
        profiles = read_sia_profiles(p, applications=applications, gpu_types=gpu_types)
        return ProfileGoodputModel(profiles, read_gns_curves(p, applications=applications))
    return ProfileGoodputModel.from_path(p)


def load_goodput_model(profiles: str | Path | None = None, applications: Sequence[str] | None = None,
                       gpu_types: Sequence[str] | None = None) -> GoodputModel:
    """A :class:`scheduler.goodput.ProfileGoodputModel` from a profile CSV or Sia traces directory (default:
    Sia's traces in the shared data folder, else the bundled set), restricted to the given applications and GPU types, cached."""
    path = Path(profiles) if profiles is not None else default_profiles_dir(gpu_types)
    if not path.exists():
        raise InputError("throughput profiles not found", source=path, field="--profiles",
                         valid="Sia's traces directory (<shared>/sia/traces) or a profile CSV")
    apps = tuple(sorted(applications)) if applications is not None else None
    types = tuple(sorted(gpu_types)) if gpu_types is not None else None
    return _load_profiles(str(path.resolve()), apps, types)


# --------------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------------

@dataclass
class SimulationResult:
    """Everything one run produced. ``summary`` has exactly :data:`SUMMARY_KEYS` (the ``--json`` schema)."""

    policy: str
    workload: str
    summary: dict[str, Any]
    jobs: "pd.DataFrame"
    rounds: "pd.DataFrame"
    allocations: "pd.DataFrame"
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {k: self.summary[k] for k in SUMMARY_KEYS}

    def write(self, out_dir: str | Path) -> dict[str, Path]:
        """Write ``jobs.parquet``, ``rounds.parquet``, ``allocations.parquet`` and ``summary.json``."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {
            "jobs": out / "jobs.parquet", "rounds": out / "rounds.parquet",
            "allocations": out / "allocations.parquet", "summary": out / "summary.json",
        }
        self.jobs.to_parquet(paths["jobs"], index=False)
        self.rounds.to_parquet(paths["rounds"], index=False)
        self.allocations.to_parquet(paths["allocations"], index=False)
        paths["summary"].write_text(json.dumps({**self.to_json(), "meta": self.meta}, indent=2, default=str) + "\n")
        return paths


# --------------------------------------------------------------------------------------------------
# Per-job state and invariants
# --------------------------------------------------------------------------------------------------

@dataclass
class _JobState:
    spec: WorkloadJob
    work: float                      # useful samples to finish
    m0: float                        # samples per unit of GNS progress (the curve's batch size)
    done: float = 0.0
    status: str = "pending"          # pending -> active -> done
    start: float | None = None
    completion: float | None = None
    starts: int = 0
    restarts: int = 0
    delay: float = 0.0               # checkpoint-restore time still to pay
    alloc: Allocation | None = None
    slot_key: tuple | None = None
    gpu_s: float = 0.0
    run_s: float = 0.0
    packed_s: float = 0.0


@dataclass
class _Member:
    state: _JobState
    delay: float
    solo: float
    packed: float
    remaining: float
    finish: float | None = None
    run_s: float = 0.0
    packed_s: float = 0.0


def check_round(round_index: int, time_s: float, decision: RoundDecision, jobs: Sequence[Job],
                cluster: Cluster, finished: set[str], placement: Placement | None = None,
                rigid_sizes: Mapping[str, int] | None = None) -> None:
    """Raise :class:`SimulationError` (naming round and job) if ``decision``/``placement`` break an invariant."""
    where = f"round {round_index} (t={time_s:.0f} s)"

    def fail(job: str, message: str) -> SimulationError:
        return SimulationError(f"{where}: job {job}: {message}")

    active = {j.name for j in jobs}
    seen: dict[str, str] = {}
    for a in decision.allocations:
        if a.job in seen:
            raise fail(a.job, "allocated twice")
        seen[a.job] = "allocated"
    for name in decision.unallocated:
        if name in seen:
            raise fail(name, f"both {seen[name]} and unallocated")
        seen[name] = "unallocated"
    for name in seen:
        if name in finished:
            raise fail(name, "already finished but still scheduled")
        if name not in active:
            raise fail(name, "not an active job")
    for name in sorted(active - set(seen)):
        raise fail(name, "lost: neither allocated nor unallocated")
    alloc = decision.by_job()
    for a in decision.allocations:
        if a.gpu_type not in cluster:
            raise fail(a.job, f"unknown GPU type {a.gpu_type!r}")
        if a.num_gpus < 1:
            raise fail(a.job, f"{a.num_gpus} GPUs")
        if rigid_sizes is not None and a.num_gpus < rigid_sizes.get(a.job, 0):
            raise fail(a.job, f"rigid job of {rigid_sizes[a.job]} GPUs given {a.num_gpus}")
        if a.partner is not None:
            b = alloc.get(a.partner)
            if b is None or b.partner != a.job:
                raise fail(a.job, f"partner {a.partner} does not pair back")
            if (b.gpu_type, b.num_gpus, b.num_nodes) != (a.gpu_type, a.num_gpus, a.num_nodes):
                raise fail(a.job, f"pair configurations differ from partner {a.partner}")
    for gpu_type, used in decision.gpus_used().items():
        if used > cluster.capacity(gpu_type):
            names = sorted(a.job for a in decision.allocations if a.gpu_type == gpu_type)
            raise fail(names[-1], f"{gpu_type}: {used} GPUs allocated > capacity {cluster.capacity(gpu_type)} "
                                  f"(jobs {', '.join(names)})")
    try:
        check_decision(decision, jobs, cluster)
    except AssertionError as err:
        raise SimulationError(f"{where}: {err}") from None
    if placement is not None:
        check_placement(round_index, time_s, decision, placement)


def check_placement(round_index: int, time_s: float, decision: RoundDecision, placement: Placement) -> None:
    """Raise :class:`SimulationError` if ``placement`` does not realise a decision that passed :func:`check_round`."""
    where = f"round {round_index} (t={time_s:.0f} s)"

    def fail(job: str, message: str) -> SimulationError:
        return SimulationError(f"{where}: job {job}: {message}")

    alloc = decision.by_job()
    for slot, names in placement.occupants().items():
        if len(names) > 2:
            raise fail(names[0], f"GPU {slot} shared by {len(names)} jobs {names}")
        if len(names) == 2 and (alloc[names[0]].partner != names[1]):
            raise fail(names[0], f"shares GPU {slot} with {names[1]}, which is not its partner")
    for name, jp in placement.jobs.items():
        a = alloc.get(name)
        if a is None:
            raise fail(name, "placed without an allocation")
        if jp.gpu_type != a.gpu_type or jp.num_gpus != a.num_gpus:
            raise fail(name, f"placed on {jp.num_gpus}x{jp.gpu_type}, allocated {a.num_gpus}x{a.gpu_type}")
        if a.partner is not None and a.partner in placement.jobs:
            other = placement.jobs[a.partner]
            if (other.gpu_type, other.nodes, other.gpus) != (jp.gpu_type, jp.nodes, jp.gpus):
                raise fail(name, f"pair with {a.partner} is not on the same GPUs")


# --------------------------------------------------------------------------------------------------
# The simulator
# --------------------------------------------------------------------------------------------------

ProgressCallback = Callable[[float, int, int], None]


class Simulator:
    """One policy over one workload on one cluster (see the module docstring)."""

    def __init__(self, cluster: Cluster, workload: Workload, policy: Policy, goodput: GoodputModel,
                 colocation: "ColocationTable | None" = None, config: SimConfig = SimConfig(),
                 adaptive: bool = False) -> None:
        self.cluster = cluster
        self.workload = workload
        self.policy = policy
        self.goodput = AccumulatingGoodput(goodput) if not isinstance(goodput, AccumulatingGoodput) else goodput
        self.colocation = colocation
        self.config = config
        self.adaptive = adaptive
        self.states = {j.name: self._initial_state(j) for j in workload.jobs}
        if len(self.states) != len(workload.jobs):
            raise InputError("duplicate job names", source=workload.source, field="name", valid="unique names")

    # ------------------------------------------------------------------ set-up
    def _probe(self, spec: WorkloadJob, gpus: int, batch: int | None, progress: float = 0.0) -> Job:
        return Job(name=spec.name, application=spec.application, arrival=spec.arrival, num_gpus=gpus,
                   batch_size=batch, adaptive=False, progress=progress)

    def _reference_rate(self, spec: WorkloadJob) -> float | None:
        """Solo useful samples/s at the job's request on the first GPU type where it runs."""
        from scheduler.policies.common import rigid_shape

        for t in self.cluster:
            shape = rigid_shape(spec.num_gpus, t)
            if shape is None:
                continue
            est = self.goodput.estimate(self._probe(spec, spec.num_gpus, spec.batch_size), t.name,
                                        spec.num_gpus, shape.nodes)
            if est is not None and est.goodput > 0:
                return est.goodput / self.config.slowdown_of(spec.application)
        return None

    def _initial_state(self, spec: WorkloadJob) -> _JobState:
        curves = getattr(self.goodput, "curves", None) or {}
        curve = curves.get(spec.application)
        m0 = float(curve.init_batch_size) if curve is not None else 1.0
        runnable = any(self.goodput.estimate(self._probe(spec, 1, None), t.name, 1, 1) is not None
                       for t in self.cluster) or self._reference_rate(spec) is not None
        if not runnable:
            raise InputError(f"job {spec.name}: application {spec.application!r} has no throughput profile on "
                             f"any GPU type of the cluster ({', '.join(self.cluster.type_names)})",
                             source=self.workload.source, field="application",
                             valid="an application with profiles for the cluster's GPU types")
        if spec.work is not None:
            work = float(spec.work)
        elif spec.duration_s is not None:
            rate = self._reference_rate(spec)
            if rate is None:
                raise InputError(f"job {spec.name}: cannot run {spec.num_gpus} GPUs of {spec.application} on any "
                                 f"GPU type to size it from its duration", source=self.workload.source,
                                 field="duration", valid="a request that fits the cluster")
            work = rate * float(spec.duration_s)
        elif curve is not None:
            work = float(curve.max_progress) * m0
        else:
            raise InputError(f"job {spec.name}: application {spec.application!r} has no GNS curve to size it",
                             source=self.workload.source, field="work",
                             valid="a work or duration column, or an application with validation-*.csv curves")
        return _JobState(spec=spec, work=work, m0=m0)

    # ------------------------------------------------------------------ views
    def _view(self, st: _JobState, now: float) -> Job:
        a = st.alloc
        spec = st.spec
        return Job(
            name=spec.name, application=spec.application, arrival=spec.arrival, num_gpus=spec.num_gpus,
            batch_size=None if self.adaptive else spec.batch_size,
            max_batch_size=spec.batch_size if self.adaptive else None,
            adaptive=self.adaptive, age_s=max(now - spec.arrival, 0.0), restarts=st.restarts,
            current_gpu_type=a.gpu_type if a else None, current_num_gpus=a.num_gpus if a else 0,
            current_partner=a.partner if a else None, pinned=bool(a is not None and st.delay > 0),
            progress=st.done / st.m0,
        )

    def _solo_rate(self, st: _JobState, a: Allocation, round_index: int, now: float) -> float:
        used = a.num_gpus if self.adaptive else min(st.spec.num_gpus, a.num_gpus)
        probe = self._probe(st.spec, used, a.batch_size or st.spec.batch_size, st.done / st.m0)
        est = self.goodput.estimate(probe, a.gpu_type, used, a.num_nodes)
        if est is None or not est.goodput > 0:
            raise SimulationError(f"round {round_index} (t={now:.0f} s): job {st.spec.name}: allocated "
                                  f"{used}x{a.gpu_type} (batch {a.batch_size}) where it cannot run")
        return est.goodput / self.config.slowdown_of(st.spec.application)

    # ------------------------------------------------------------------ the loop
    def run(self, progress: ProgressCallback | None = None) -> SimulationResult:
        cfg = self.config
        R = cfg.round_s
        started = time.perf_counter()
        pending = sorted(self.states.values(), key=lambda s: (s.spec.arrival, s.spec.name))
        next_pending = 0
        active: dict[str, _JobState] = {}
        finished: set[str] = set()
        previous: Placement | None = None
        round_rows: list[dict[str, Any]] = []
        alloc_rows: list[dict[str, Any]] = []
        total_gpus = self.cluster.total_gpus
        now = 0.0
        k = 0
        busy_gpu_s = packed_gpu_s = 0.0
        solver_fallbacks = 0
        rigid_sizes = None if self.adaptive else {n: s.spec.num_gpus for n, s in self.states.items()}
        while True:
            while next_pending < len(pending) and pending[next_pending].spec.arrival <= now + 1e-9:
                st = pending[next_pending]
                st.status = "active"
                active[st.spec.name] = st
                next_pending += 1
            if not active:
                if next_pending >= len(pending):
                    break
                # idle cluster: jump to the first round boundary at or after the next arrival
                now = math.ceil(pending[next_pending].spec.arrival / R - 1e-9) * R
                k = int(round(now / R))
                previous = None
                continue
            if now >= cfg.max_time_s:
                break
            views = [self._view(st, now) for st in active.values()]
            context = RoundContext(goodput=self.goodput, time_s=now, colocation=self.colocation,
                                   previous_placement=previous, round_duration_s=R,
                                   extras={"seed": cfg.seed, "round": k})
            t0 = time.perf_counter()
            decision = self.policy.allocate(views, self.cluster, context)
            policy_s = time.perf_counter() - t0
            check_round(k, now, decision, views, self.cluster, finished, rigid_sizes=rigid_sizes)
            placement = place(decision, self.cluster, previous)
            check_placement(k, now, decision, placement)  # the decision itself was checked just above
            if decision.solver.fallback is not None:
                solver_fallbacks += 1
            by_job = decision.by_job()
            unplaced = set(placement.unplaced)
            view_of = {v.name: v for v in views}
            # apply: restarts, suspensions
            restarts_now = 0
            for name, st in active.items():
                a = by_job.get(name)
                jp = placement.of(name) if a is not None and name not in unplaced else None
                if a is not None and a.partner is not None and (a.partner in unplaced or placement.of(a.partner) is None):
                    a = Allocation(a.job, a.gpu_type, a.num_gpus, a.batch_size, None, a.expected_goodput, a.num_nodes)
                if a is None or jp is None:
                    st.alloc, st.slot_key, st.delay = None, None, 0.0
                    continue
                key = (a.gpu_type, a.num_gpus, jp.nodes, jp.gpus)
                if key != st.slot_key:
                    st.delay = cfg.restart_cost(st.spec.application)
                    if st.starts > 0:
                        st.restarts += 1
                        restarts_now += 1
                    st.starts += 1
                    if st.start is None:
                        st.start = now
                st.alloc, st.slot_key = a, key
            # progress: one unit per single job or pair
            round_busy = round_packed = 0.0
            packed_jobs = 0
            done_now: list[_JobState] = []
            seen: set[str] = set()
            for name, st in active.items():
                if st.alloc is None or name in seen:
                    continue
                a = st.alloc
                members = [st]
                if a.partner is not None:
                    members.append(active[a.partner])
                seen.update(m.spec.name for m in members)
                units = []
                for m in members:
                    solo = self._solo_rate(m, m.alloc, k, now)  # type: ignore[arg-type]
                    units.append(_Member(m, min(m.delay, R), solo, solo, m.work - m.done))
                if len(members) == 2:
                    ratios = self.colocation.lookup(a.gpu_type, view_of[members[0].spec.name],
                                                    view_of[members[1].spec.name]) if self.colocation else None
                    if ratios is None or ratios[0] <= 0 or ratios[1] <= 0:
                        raise SimulationError(f"round {k} (t={now:.0f} s): job {members[0].spec.name}: packed with "
                                              f"{members[1].spec.name} on {a.gpu_type} without a feasible "
                                              f"co-location ratio")
                    units[0].packed = units[0].solo * ratios[0]
                    units[1].packed = units[1].solo * ratios[1]
                    packed_jobs += 2
                held, both = _advance(units, R)
                round_busy += a.num_gpus * held
                round_packed += a.num_gpus * both
                for u in units:
                    m = u.state
                    m.done = m.work - u.remaining
                    m.run_s += u.run_s
                    m.packed_s += u.packed_s
                    alive = u.finish if u.finish is not None else R
                    # a pair's GPUs are split evenly while both are there; a survivor holds them alone
                    m.gpu_s += a.num_gpus * ((alive - both) + both / 2 if len(units) == 2 else alive)
                    if cfg.log_allocations:
                        jp = placement.of(m.spec.name)
                        alloc_rows.append({
                            "round": k, "time_s": now, "job": m.spec.name, "gpu_type": a.gpu_type,
                            "num_gpus": a.num_gpus, "num_nodes": a.num_nodes, "batch_size": m.alloc.batch_size,
                            "partner": m.alloc.partner, "nodes": ",".join(map(str, jp.nodes)) if jp else "",
                            "gpus": ",".join(map(str, jp.gpus)) if jp else "", "solo_rate": u.solo,
                            "packed_rate": u.packed if len(units) == 2 else float("nan"),
                            "restore_s": u.delay, "progress": m.done / m.work,
                        })
                    if u.finish is not None:
                        m.completion = now + u.finish
                        done_now.append(m)
            for st in active.values():
                st.delay = max(st.delay - R, 0.0) if st.alloc is not None else 0.0
            for st in done_now:
                if st.spec.name in finished:
                    raise SimulationError(f"round {k} (t={now:.0f} s): job {st.spec.name}: finished twice")
                finished.add(st.spec.name)
                st.status = "done"
                st.alloc = None
                del active[st.spec.name]
            busy_gpu_s += round_busy
            packed_gpu_s += round_packed
            running = sum(1 for v in views if v.name in by_job and v.name not in unplaced)
            round_rows.append({
                "round": k, "time_s": now, "active": len(views), "running": running,
                "waiting": len(views) - running, "unplaced": len(unplaced), "gpus_busy": sum(decision.gpus_used().values()),
                "gpu_s": round_busy, "utilization": round_busy / (total_gpus * R), "packed_jobs": packed_jobs,
                "packed_gpu_s": round_packed, "restarts": restarts_now, "completed": len(done_now),
                "solver": decision.solver.name, "status": decision.solver.status,
                "fallback": decision.solver.fallback or "", "objective": float(decision.objective),
                "policy_s": policy_s,
            })
            previous = Placement({n: jp for n, jp in placement.jobs.items() if n in active}, ())
            if progress is not None:
                progress(now + R, len(finished), len(self.states))
            now += R
            k += 1
        # every job is pending, active or done, and done ones exactly once
        lost = [n for n, s in self.states.items() if s.status == "done" and n not in finished]
        if lost:
            raise SimulationError(f"end: job {lost[0]}: marked done without finishing")
        wall = time.perf_counter() - started
        return self._result(round_rows, alloc_rows, busy_gpu_s, packed_gpu_s, wall, now, solver_fallbacks)

    # ------------------------------------------------------------------ summary
    def _result(self, round_rows: list[dict[str, Any]], alloc_rows: list[dict[str, Any]], busy_gpu_s: float,
                packed_gpu_s: float, wall: float, end_time: float, fallbacks: int) -> SimulationResult:
        import pandas as pd

        rows = []
        for st in sorted(self.states.values(), key=lambda s: (s.spec.arrival, s.spec.name)):
            jct = st.completion - st.spec.arrival if st.completion is not None else float("nan")
            rows.append({
                "job": st.spec.name, "application": st.spec.application, "arrival_s": st.spec.arrival,
                "num_gpus": st.spec.num_gpus, "batch_size": st.spec.batch_size or 0, "work": st.work,
                "start_s": st.start if st.start is not None else float("nan"),
                "completion_s": st.completion if st.completion is not None else float("nan"),
                "jct_s": jct, "completed": st.completion is not None, "restarts": st.restarts,
                "gpu_hours": st.gpu_s / 3600.0, "run_s": st.run_s, "packed_s": st.packed_s,
                "progress": st.done / st.work if st.work else 1.0,
            })
        jobs = pd.DataFrame(rows)
        rounds = pd.DataFrame(round_rows, columns=[
            "round", "time_s", "active", "running", "waiting", "unplaced", "gpus_busy", "gpu_s", "utilization",
            "packed_jobs", "packed_gpu_s", "restarts", "completed", "solver", "status", "fallback", "objective",
            "policy_s"])
        allocations = pd.DataFrame(alloc_rows, columns=[
            "round", "time_s", "job", "gpu_type", "num_gpus", "num_nodes", "batch_size", "partner", "nodes", "gpus",
            "solo_rate", "packed_rate", "restore_s", "progress"])
        done = jobs[jobs["completed"]]
        jcts = done["jct_s"].to_numpy(float)
        makespan = float(done["completion_s"].max()) if len(done) == len(jobs) and len(done) else float(end_time)
        summary = {
            "policy": getattr(self.policy, "name", type(self.policy).__name__),
            "jobs": int(len(jobs)),
            "completed": int(len(done)),
            "avg_jct_s": float(np.mean(jcts)) if len(jcts) else float("nan"),
            "p50_jct_s": float(np.percentile(jcts, 50)) if len(jcts) else float("nan"),
            "p99_jct_s": float(np.percentile(jcts, 99)) if len(jcts) else float("nan"),
            "makespan_s": makespan,
            "gpu_hours": busy_gpu_s / 3600.0,
            "utilization": busy_gpu_s / (self.cluster.total_gpus * makespan) if makespan > 0 else 0.0,
            "restarts": int(jobs["restarts"].sum()) if len(jobs) else 0,
            "packed_fraction": packed_gpu_s / busy_gpu_s if busy_gpu_s > 0 else 0.0,
            "wall_s": wall,
        }
        meta = {
            "workload": self.workload.name, "workload_source": self.workload.source,
            "cluster": self.cluster.to_dict(), "round_s": self.config.round_s, "seed": self.config.seed,
            "adaptive_jobs": self.adaptive, "rounds": len(round_rows), "solver_fallback_rounds": fallbacks,
            "policy_s_total": float(sum(r["policy_s"] for r in round_rows)),
            "colocation_rows": len(self.colocation) if self.colocation is not None else 0,
        }
        return SimulationResult(summary["policy"], self.workload.name, summary, jobs, rounds, allocations, meta)


def _advance(units: list[_Member], R: float) -> tuple[float, float]:
    """Integrate one single job or pair over a round; returns (GPU-holding time, time both were present).

    A member earns nothing while restoring (``delay``); it runs at ``packed`` while its partner is also
    running, else at ``solo``. Finish times are exact within the round.
    """
    t = 0.0
    for _ in range(16):  # at most a handful of events: two delays ends and two finishes
        alive = [u for u in units if u.finish is None]
        if not alive or t >= R - 1e-9:
            break
        computing = [u for u in alive if t >= u.delay - 1e-12]
        rates = {}
        for u in alive:
            if u not in computing:
                rates[id(u)] = 0.0
            else:
                rates[id(u)] = u.packed if len(computing) == 2 else u.solo
        nxt = R
        for u in alive:
            if u not in computing:
                nxt = min(nxt, u.delay)
            elif rates[id(u)] > 0:
                nxt = min(nxt, t + u.remaining / rates[id(u)])
        dt = max(nxt - t, 0.0)
        for u in alive:
            rate = rates[id(u)]
            if rate > 0:
                u.remaining -= rate * dt
                u.run_s += dt
                if len(computing) == 2:
                    u.packed_s += dt
            if u.remaining <= 1e-9 * max(1.0, abs(u.remaining) + rate * dt):
                u.remaining = 0.0
                u.finish = nxt
        t = nxt
    ends = [u.finish if u.finish is not None else R for u in units]
    both = min(ends) if len(units) == 2 else 0.0
    return max(ends), both


# --------------------------------------------------------------------------------------------------
# The entry point used by the CLI and the demo
# --------------------------------------------------------------------------------------------------

def simulate(cluster: "Cluster | str | Path", workload: "Workload | str | Path", policy_name: "str | Policy",
             colocation: "ColocationTable | str | Path | None" = None, round_s: float = 60.0, seed: int = 0, *,
             profiles: "str | Path | GoodputModel | None" = None, adaptive: bool | None = None,
             config: SimConfig | None = None, progress: ProgressCallback | None = None,
             policy_options: Mapping[str, Any] | None = None) -> SimulationResult:
    """Simulate ``policy_name`` on ``workload`` over ``cluster`` and return the :class:`SimulationResult`.

    ``colocation``: a table, a CSV path, or None — then packing policies use the bundled table transferred
    from Gavel's measurements (:mod:`scheduler.transfer`). ``profiles``: a goodput model, a profile CSV or
    Sia traces directory (default: Sia's traces in the shared data folder). ``adaptive`` overrides whether
    jobs are adaptive (default: as the named policy says; a Policy object passed directly: rigid unless it
    has ``adaptive = True`` or is the ILP policy).
    """
    from scheduler.colocation import ColocationTable
    from scheduler.policies import make_policy, policy_spec

    cluster_obj = cluster if isinstance(cluster, Cluster) else load_cluster(cluster)
    work = load_workload(workload)
    if isinstance(policy_name, str):
        spec = policy_spec(policy_name)
        policy = make_policy(spec.name, seed=seed, **dict(policy_options or {}))
        is_adaptive, packs = spec.adaptive, spec.packing
    else:
        policy = policy_name
        from scheduler.ilp import PackingPolicy

        is_adaptive = bool(getattr(policy, "adaptive", isinstance(policy, PackingPolicy)))
        packs = True
    if adaptive is not None:
        is_adaptive = adaptive
    if isinstance(colocation, (str, Path)):
        table: ColocationTable | None = ColocationTable.load(colocation)
    elif colocation is None and packs:
        from scheduler.transfer import default_table

        table = default_table()
    else:
        table = colocation
    if profiles is None or isinstance(profiles, (str, Path)):
        model = load_goodput_model(profiles, applications=work.applications, gpu_types=cluster_obj.type_names)
    else:
        model = profiles
    cfg = config if config is not None else SimConfig(round_s=round_s, seed=seed)
    sim = Simulator(cluster_obj, work, policy, model, table, cfg, adaptive=is_adaptive)
    return sim.run(progress)


__all__ = [
    "AccumulatingGoodput", "SimConfig", "SimulationError", "SimulationResult", "Simulator", "check_placement",
    "check_round", "load_goodput_model", "simulate", "SIA_RESTART_COST_S", "SIA_SLOWDOWN", "SUMMARY_KEYS",
]
