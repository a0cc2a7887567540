"""Trace-driven, round-based cluster simulator for every policy behind :class:`scheduler.model.policy.Policy`.

Each round (60 s by default, as in Sia) runs five named steps of :meth:`Simulator.run`:

1. **arrivals** — jobs whose arrival time has passed join the active set.
2. **decide** — the policy allocates (the very same :mod:`scheduler.ilp` / :mod:`scheduler.policies`
   objects that ``colocate schedule`` uses) and the placement stage (:func:`scheduler.model.placement.place`)
   assigns nodes/GPUs; the invariants of :mod:`scheduler.sim.checks` are checked on both.
3. **apply** — a job whose resources changed pays its checkpoint-restore (no progress, GPUs held) and is
   *pinned* while restoring. What counts as a change is Sia's rule by default (``restart_on="placement"``):
   a new GPU type or number of GPUs on any node, or new GPUs for a job that joins or leaves a pair or group
   of three (Sia has no groups; a job moving onto or off shared GPUs must restart); ``"shape"``: a new type,
   GPU count or node count; ``"gpus"``: any change of GPU indices. ``gavel-sia`` runs Sia's mechanism
   (:mod:`scheduler.policies.gavel`), whose rigid jobs may be split over nodes (the policy's
   ``traits.splits_across_nodes``: ``place(..., split=True)``); such a job runs on as many nodes as it was placed on.
4. **progress** — jobs progress by their goodput on the allocation (throughput × statistical efficiency,
   divided by the application's calibration slowdown), times their co-location ratio while packed; a job
   alone re-reads its goodput :data:`SUBSTEPS` times a round (its efficiency rises as it trains and Sia's
   simulator re-reads it at every epoch boundary: a short job crosses ~17 epochs a round); a pair
   or group of three (:mod:`scheduler.sim.groups`) is integrated piecewise: the group's ratios while all
   compute, the pair's once one has finished or while it restores, solo rate alone. A group of three's
   ratios are predicted from its pairs (:meth:`scheduler.model.colocation.ColocationTable.triple_ratios`, the
   ILP's own), as the run's ``meta.triple_ratios`` says. Every group's memory is checked at the local
   batches its members run. A job finishes when its useful samples reach its work; it leaves at that
   instant and its GPUs are free from the next round.
5. **log** — one row per round (and per allocation).

Fidelity to Sia's simulator (siasosp23/artifacts ``sia-simulator``): each modelled difference (statistical
efficiency, batch choice, throughput belief, step times, restart penalties and costs, Gavel's rounds, progress
within a round) follows Sia's simulator; the few alternatives kept for ablations are experimental
:class:`SimConfig` options. The list with its measurements is ``docs/simulator-fidelity.md``.

Memory (``memory=True``): every job has a per-GPU-type footprint at its local batch
(:class:`scheduler.sim.job_model.MemoryModel`); the colocation table the policies read answers "no ratio" for
pairs and groups of three that cannot fit, and the progress step checks every group it runs.

Job length (work) is Sia's: the application's reference curve (``max_progress × M0`` useful samples) unless
the workload gives ``work`` or ``duration``. Deterministic for a seed; results: :class:`.result.SimulationResult`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.errors import InputError
from scheduler.formats.colocation_table import load_colocation_table
from scheduler.formats.workload_jobs import Workload
from scheduler.formats.workloads import load_workload
from scheduler.ilp.config import IlpConfig
from scheduler.learning.belief import SimBelief, sim_belief
from scheduler.learning.throughput import LearnedThroughputGoodput, ThroughputLearner
from scheduler.model.cluster import Cluster, load_cluster
from scheduler.model.configs import Configuration
from scheduler.model.goodput import GoodputModel
from scheduler.model.jobs import Job, finishing, slowdown_bound
from scheduler.model.placement import place
from scheduler.model.policy import Allocation, JobPlacement, Placement, Policy, RoundContext, RoundDecision
from scheduler.sim.checks import SimulationError, check_placement, check_round
from scheduler.sim.config import SimConfig
from scheduler.sim.groups import group_members
from scheduler.sim.job_model import (
    SIA_TARGET_BATCH,
    AccumulatingGoodput,
    BootstrapGoodput,
    MemoryCheckedTable,
    MemoryModel,
    scaled_table,
    sia_max_gpus,
    simulation_goodput_model,
)
from scheduler.sim.job_state import JobState, Member, UnitTimes, advance, cluster_bound, initial_state
from scheduler.sim.result import SimulationResult, build_result

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.model.colocation import ColocationTable

ProgressCallback = Callable[[float, int, int], None]
# A job alone re-reads its goodput this many times a round (every 10 s of a 60-s round), as Sia's simulator
# re-reads the statistical efficiency at every epoch boundary: a short job crosses ~17 epochs a round while its
# efficiency rises about tenfold (results/sim/fidelity/NOTES.md, "progress within a round").
SUBSTEPS = 6
_DEFAULT_CONFIG = SimConfig()  # frozen: one shared default instance is safe


@dataclass
class _Run:
    """Loop state of one :meth:`Simulator.run`."""

    pending: list[JobState]
    next_pending: int = 0
    active: dict[str, JobState] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    previous: Placement | None = None
    now: float = 0.0
    k: int = 0
    round_rows: list[dict[str, Any]] = field(default_factory=list)
    alloc_rows: list[dict[str, Any]] = field(default_factory=list)
    busy_gpu_s: float = 0.0
    packed_gpu_s: float = 0.0
    triple_gpu_s: float = 0.0
    fallbacks: int = 0


class Simulator:
    """One policy over one workload on one cluster (see the module docstring). ``adaptive`` is decided by
    the caller (:func:`resolve_policy`) and nowhere else."""

    def __init__(self, cluster: Cluster, workload: Workload, policy: Policy, goodput: GoodputModel,
                 colocation: ColocationTable | None = None, config: SimConfig = _DEFAULT_CONFIG,
                 adaptive: bool = False) -> None:
        self.cluster = cluster
        self.workload = workload
        self.policy = policy
        self.config = config
        self.adaptive = adaptive
        self.max_group_size = policy.traits.max_group_size
        self.goodput = goodput if isinstance(goodput, AccumulatingGoodput) else AccumulatingGoodput(goodput)
        self.belief: GoodputModel = self.goodput
        if adaptive and config.throughput == "bootstrap":
            self.belief = BootstrapGoodput(self.goodput, cluster)
        elif adaptive and config.throughput == "fitted":
            self.belief = LearnedThroughputGoodput(self.goodput, cluster, ThroughputLearner())
        self.memory = MemoryModel(self.goodput, cluster) if config.memory else None
        self.colocation = self._policy_table(colocation)  # the truth: how fast pairs really run
        self.learner = self._belief(colocation)  # what the policy believes (never the truth, if learning)
        self._caps: dict[tuple[str, int | None], int] = {}
        self.states = {j.name: initial_state(j, self.goodput, cluster, config.slowdown_of(j.application),
                                             workload.source) for j in workload.jobs}
        bound = cluster_bound(policy)
        for st in self.states.values():  # what each job's time in a group is measured against
            st.bound = slowdown_bound(st.spec.requirements.max_slowdown, bound)
        if len(self.states) != len(workload.jobs):
            raise InputError("duplicate job names", source=workload.source, field="name", valid="unique names")

    def _belief(self, table: ColocationTable | None) -> SimBelief | None:
        if table is not None and self.config.colocation_strength != 1.0:
            table = scaled_table(table, self.config.colocation_strength)
        wrap = (lambda t: MemoryCheckedTable(t.ratios, self.memory)) if self.memory is not None else (lambda t: t)
        return sim_belief(self.config.belief, table, wrap, self.config.seed)

    def _policy_table(self, table: ColocationTable | None) -> ColocationTable | None:
        if table is None:
            return None
        if self.config.colocation_strength != 1.0:
            table = scaled_table(table, self.config.colocation_strength)
        if self.memory is not None:
            table = MemoryCheckedTable(table.ratios, self.memory)
        return table

    # ------------------------------------------------------------------ what the policy sees
    def _max_gpus(self, application: str, job: str) -> int:
        belief = self.belief
        learning = isinstance(belief, (BootstrapGoodput, LearnedThroughputGoodput))
        observed = belief.max_observed(job) if learning else None  # type: ignore[attr-defined]
        key = (application, observed)
        if key not in self._caps:
            self._caps[key] = sia_max_gpus(self.goodput, self.cluster, application, observed)
        return self._caps[key]

    def _view(self, st: JobState, now: float) -> Job:
        a, spec = st.alloc, st.spec
        limit = SIA_TARGET_BATCH.get(spec.application, spec.batch_size)
        return Job(
            name=spec.name, application=spec.application, arrival=spec.arrival, num_gpus=spec.num_gpus,
            batch_size=None if self.adaptive else spec.batch_size,
            max_batch_size=limit if self.adaptive else None,
            max_gpus=self._max_gpus(spec.application, spec.name) if self.adaptive else None,
            adaptive=self.adaptive, age_s=max(now - spec.arrival, 0.0), restarts=st.restarts,
            current_gpu_type=a.gpu_type if a else None, current_num_gpus=a.num_gpus if a else 0,
            current_partner=a.partner if a else None,
            pinned=a is not None and (st.delay > 0 or finishing(st.remaining_s(), self.config.round_s,
                                                                   1 + len(a.others))),
            progress=st.done / st.m0, restart_cost_s=self.config.restart_penalty(spec.application),
            requirements=spec.requirements,
        )

    # ------------------------------------------------------------------ what happens
    def _run_probe(self, st: JobState, a: Allocation) -> tuple[Job, int]:
        """The job as it runs on ``a`` and the GPUs it uses (a rigid job idles surplus GPUs)."""
        spec = st.spec
        used = a.num_gpus if self.adaptive else min(spec.num_gpus, a.num_gpus)
        free_batch = self.adaptive and self.config.batch == "app-max"
        probe = Job(name=spec.name, application=spec.application, arrival=spec.arrival, num_gpus=used,
                    batch_size=None if free_batch else (a.batch_size or spec.batch_size),
                    adaptive=free_batch, progress=st.done / st.m0)
        return probe, used

    def _rate(self, st: JobState, a: Allocation, local_cap: float | None = None) -> tuple[float, int]:
        """Useful samples/s and the global batch of ``st`` on ``a`` (micro-batches ≤ ``local_cap``)."""
        probe, used = self._run_probe(st, a)
        est = self.goodput.estimate(probe, a.gpu_type, used, a.num_nodes)
        if est is not None and local_cap is not None and est.batch_size / used > local_cap + 1e-9:
            fixed = probe.with_state(batch_size=est.batch_size, adaptive=False)
            est = self.goodput.accumulated(fixed, a.gpu_type, used, a.num_nodes, local_cap)
        if est is None or not est.goodput > 0:
            raise SimulationError(f"round {self._k} (t={self._now:.0f} s): job {st.spec.name}: allocated "
                                  f"{used}x{a.gpu_type} (batch {a.batch_size}) where it cannot run")
        return est.goodput / self.config.slowdown_of(st.spec.application), int(est.batch_size)

    def _substepped_rate(self, st: JobState, a: Allocation, R: float) -> tuple[float, int, tuple[int, ...]]:
        """The round's mean rate when the goodput is re-read :data:`SUBSTEPS` times over the round (Sia re-reads the
        efficiency at every epoch boundary): the rate that makes the same progress, or finishes at the same time;
        the batch the round started with, and every batch it ran, in order."""
        delay = min(st.delay, R)
        dt = (R - delay) / SUBSTEPS
        start, left, used = st.done, st.work - st.done, 0.0
        rate, batch = self._rate(st, a)
        batches = [batch]
        probe = self._run_probe(st, a)[0]  # a round inside one state (epoch) of the model re-reads this rate
        reread = not self.goodput.same_state(probe, probe.with_state(progress=min(st.work, start + rate * R) / st.m0))
        try:
            for step in range(SUBSTEPS):
                if step and reread:  # step 0 is the reading above
                    rate, ran = self._rate(st, a)
                    if ran != batches[-1]:
                        batches.append(ran)
                if rate * dt >= left:
                    used += left / rate
                    left = 0.0
                    break
                st.done += rate * dt
                left -= rate * dt
                used += dt
        finally:
            st.done = start
        progress = (st.work - start) - left
        return (progress / used if used > 0 else rate), batch, tuple(batches)

    def _local_batch(self, st: JobState, a: Allocation, batch: int) -> float:
        span = self.goodput.local_batch_range(st.spec.application, a.gpu_type)
        used = a.num_gpus if self.adaptive else min(st.spec.num_gpus, a.num_gpus)
        return min(batch / used, float(span[1])) if span else batch / used

    # ------------------------------------------------------------------ the loop
    def run(self, progress: ProgressCallback | None = None) -> SimulationResult:
        started = time.perf_counter()
        run = _Run(pending=sorted(self.states.values(), key=lambda s: (s.spec.arrival, s.spec.name)))
        while True:
            self._arrivals(run)
            if not run.active:
                if run.next_pending >= len(run.pending):
                    break
                self._skip_idle(run)
                continue
            if run.now >= self.config.max_time_s:
                break
            views, decision, placement, policy_s = self._decide(run)
            restarts = self._apply(run, decision, placement)
            shares, done = self._progress(run, views, placement)
            self._retire(run, done)
            self._log_round(run, views, decision, placement, policy_s, shares, restarts, len(done))
            if progress is not None:
                progress(run.now + self.config.round_s, len(run.finished), len(self.states))
            run.now += self.config.round_s
            run.k += 1
        lost = [n for n, s in self.states.items() if s.status == "done" and n not in run.finished]
        if lost:
            raise SimulationError(f"end: job {lost[0]}: marked done without finishing")
        return build_result(self, run.round_rows, run.alloc_rows, (run.busy_gpu_s, run.packed_gpu_s, run.triple_gpu_s),
                            time.perf_counter() - started, run.now, run.fallbacks)

    def _arrivals(self, run: _Run) -> None:
        while run.next_pending < len(run.pending) and run.pending[run.next_pending].spec.arrival <= run.now + 1e-9:
            st = run.pending[run.next_pending]
            st.status = "active"
            run.active[st.spec.name] = st
            run.next_pending += 1

    def _skip_idle(self, run: _Run) -> None:
        """Idle cluster: jump to the first round boundary at or after the next arrival."""
        R = self.config.round_s
        run.now = math.ceil(run.pending[run.next_pending].spec.arrival / R - 1e-9) * R
        run.k = int(round(run.now / R))
        run.previous = None

    def _decide(self, run: _Run) -> tuple[dict[str, Job], RoundDecision, Placement, float]:
        self._k, self._now = run.k, run.now
        views = {st.spec.name: self._view(st, run.now) for st in run.active.values()}
        table = self.learner.view(list(views.values()), self.cluster.total_gpus) if self.learner else self.colocation
        context = RoundContext(goodput=self.belief, time_s=run.now, colocation=table,
                               previous_placement=run.previous, round_duration_s=self.config.round_s,
                               calibration_slowdown=self.config.slowdown)
        t0 = time.perf_counter()
        decision = self.policy.allocate(list(views.values()), self.cluster, context)
        policy_s = time.perf_counter() - t0
        rigid = None if self.adaptive else {n: s.spec.num_gpus for n, s in run.active.items()}
        check_round(run.k, run.now, decision, list(views.values()), self.cluster, run.finished, rigid_sizes=rigid)
        placement = place(decision, self.cluster, run.previous, split=self.policy.traits.splits_across_nodes)
        check_placement(run.k, run.now, decision, placement)
        if decision.solver.fallback is not None:
            run.fallbacks += 1
        return views, decision, placement, policy_s

    def _restart_key(self, a: Allocation, jp: JobPlacement) -> tuple:
        if self.config.restart_on == "gpus":
            return (a.gpu_type, a.num_gpus, jp.nodes, jp.gpus, jp.layout)
        if self.config.restart_on == "placement":
            return (a.gpu_type, jp.per_node)
        return (a.gpu_type, a.num_gpus, a.num_nodes)

    def _apply(self, run: _Run, decision: RoundDecision, placement: Placement) -> int:
        """Suspensions, restarts and checkpoint-restore delays for this round's allocation."""
        by_job, unplaced = decision.by_job(), set(placement.unplaced)
        restarts = 0
        for name, st in run.active.items():
            a = by_job.get(name)
            jp = placement.of(name) if a is not None and name not in unplaced else None
            if a is not None and a.others:  # a member that could not be placed leaves the group
                kept = tuple(o for o in a.others if o not in unplaced and placement.of(o) is not None)
                if kept != a.others:
                    a = replace(a, partner=kept[0] if kept else None, partners=kept if len(kept) > 1 else ())
            if a is None or jp is None:
                st.alloc, st.slot_key, st.slots, st.delay = None, None, None, 0.0
                continue
            if jp.layout:  # a job split over nodes (Sia's Gavel) runs on as many nodes as it was placed on
                a = replace(a, num_nodes=len(jp.nodes))
            key, slots = self._restart_key(a, jp), (jp.nodes, jp.gpus)
            # joining or leaving a pair or group onto other GPUs restarts the job (Sia has no groups)
            before = set(st.alloc.others) if st.alloc is not None else set()
            grouped = bool(a.others) or bool(before)
            moved = key != st.slot_key or (grouped and slots != st.slots and set(a.others) != before)
            if moved:
                st.delay = self.config.restart_cost(st.spec.application)
                if st.starts > 0:
                    st.restarts += 1
                    restarts += 1
                st.starts += 1
                if st.start is None:
                    st.start = run.now
            st.alloc, st.slot_key, st.slots = a, key, slots
        return restarts

    def _progress(self, run: _Run, views: Mapping[str, Job], placement: Placement
                  ) -> tuple[dict[str, float], list[JobState]]:
        """Integrate every unit (single job, pair, group of three) over the round; returns this round's GPU-time
        totals (busy, packed, triple) and job counts (packed, triple), and the jobs that finished."""
        R = self.config.round_s
        shares = dict.fromkeys(("busy", "packed", "triple", "packed_jobs", "triple_jobs"), 0.0)
        done: list[JobState] = []
        seen: set[str] = set()
        for name, st in run.active.items():
            if st.alloc is None or name in seen:
                continue
            a = st.alloc
            members = [st] + [run.active[o] for o in a.others]
            seen.update(m.spec.name for m in members)
            if len(members) > 1:
                units = group_members(self, run.k, run.now, members, views)
                shares["packed_jobs"] += len(members)
                shares["triple_jobs"] += len(members) if len(members) == 3 else 0
            else:
                rate, batch, ran = self._substepped_rate(st, a, R)
                units = [Member(st, min(st.delay, R), rate, rate, st.work - st.done, batch=batch, batches=ran)]
            times = advance(units, R)
            if self.learner is not None and len(units) > 1 and all(u.packed_s > 0 for u in units):
                self.learner.observe(run.k, run.now, a.gpu_type, [views[u.state.spec.name] for u in units])
            shares["busy"] += a.num_gpus * times.held
            shares["packed"] += a.num_gpus * times.shared
            shares["triple"] += a.num_gpus * times.triple
            for u in units:
                self._account(run, u, a, times, len(units), placement)
                if u.finish is not None:
                    u.state.completion = run.now + u.finish
                    done.append(u.state)
        for st in run.active.values():
            st.delay = max(st.delay - R, 0.0) if st.alloc is not None else 0.0
        run.busy_gpu_s += shares["busy"]
        run.packed_gpu_s += shares["packed"]
        run.triple_gpu_s += shares["triple"]
        return shares, done

    def _account(self, run: _Run, u: Member, a: Allocation, times: UnitTimes, size: int, placement: Placement) -> None:
        m = u.state
        m.done = m.work - u.remaining
        m.run_s += u.run_s
        m.packed_s += u.packed_s
        m.gpu_s += a.num_gpus * times.gpu_share[m.spec.name]  # the GPUs split evenly among the members there
        if size > 1:
            m.note_slowdown(u.solo, u.packed, u.packed_s)
        if u.run_s > 0:
            m.rate = u.packed if size > 1 else u.solo
            self._learn(m, a, u)
        if self.config.log_allocations:
            jp = placement.of(m.spec.name)
            run.alloc_rows.append({
                "round": run.k, "time_s": run.now, "job": m.spec.name, "gpu_type": a.gpu_type,
                "num_gpus": a.num_gpus, "num_nodes": a.num_nodes, "batch_size": u.batch,
                "partner": ",".join(m.alloc.others) if m.alloc and m.alloc.others else None, "group_size": size,
                "nodes": ",".join(map(str, jp.nodes)) if jp else "",
                "gpus": ",".join(map(str, jp.gpus)) if jp else "", "solo_rate": u.solo,
                "packed_rate": u.packed if size > 1 else float("nan"), "restore_s": u.delay,
                "progress": m.done / m.work,
            })

    def _learn(self, st: JobState, a: Allocation, u: Member) -> None:
        """Sia learns from the steps a job ran: the GPUs it used (bootstrap), or what the configuration measured
        at each batch it ran, in order, its gradient noise at the last (fitted:
        :meth:`LearnedThroughputGoodput.record_run`; Sia's simulator records a point at every epoch)."""
        batches = u.batches or (u.batch,)
        if isinstance(self.belief, BootstrapGoodput):
            self.belief.record(st.spec.name, a.gpu_type, a.num_gpus)
        elif isinstance(self.belief, LearnedThroughputGoodput):
            used = a.num_gpus if self.adaptive else min(st.spec.num_gpus, a.num_gpus)
            for batch in (b for b in batches if b > 0):
                self.belief.record_run(st.spec.name, st.spec.application, Configuration(a.gpu_type, a.num_nodes,
                                       used), self._local_batch(st, a, batch), batch, st.done / st.m0)

    def _retire(self, run: _Run, done: list[JobState]) -> None:
        for st in done:
            if st.spec.name in run.finished:
                raise SimulationError(f"round {run.k} (t={run.now:.0f} s): job {st.spec.name}: finished twice")
            run.finished.add(st.spec.name)
            st.status = "done"
            st.alloc = None
            del run.active[st.spec.name]

    def _log_round(self, run: _Run, views: Mapping[str, Job], decision: RoundDecision, placement: Placement,
                   policy_s: float, shares: Mapping[str, float], restarts: int, completed: int) -> None:
        by_job, unplaced = decision.by_job(), set(placement.unplaced)
        running = sum(1 for n in views if n in by_job and n not in unplaced)
        R = self.config.round_s
        run.round_rows.append({
            "round": run.k, "time_s": run.now, "active": len(views), "running": running,
            "waiting": len(views) - running, "unplaced": len(unplaced), "gpus_busy": sum(decision.gpus_used().values()),
            "gpu_s": shares["busy"], "utilization": shares["busy"] / (self.cluster.total_gpus * R),
            "packed_jobs": int(shares["packed_jobs"]), "packed_gpu_s": shares["packed"],
            "triple_jobs": int(shares["triple_jobs"]), "triple_gpu_s": shares["triple"], "restarts": restarts,
            "completed": completed, "solver": decision.solver.name, "status": decision.solver.status,
            "fallback": decision.solver.fallback or "", "objective": float(decision.objective), "policy_s": policy_s,
        })
        run.previous = Placement({n: jp for n, jp in placement.jobs.items() if n in run.active}, ())


# --------------------------------------------------------------------------------------------------
# The entry point used by the CLI, the comparison and the demo
# --------------------------------------------------------------------------------------------------

def resolve_policy(policy_name: str | Policy, seed: int = 0, adaptive: bool | None = None,
                   ilp: IlpConfig | None = None) -> tuple[Policy, bool, bool]:
    """``(policy, adaptive, packs)``: the one place that decides whether jobs are adaptive.

    A named policy says it in the registry (:mod:`scheduler.policies`), a Policy object in its traits;
    ``adaptive`` overrides either. ``ilp``: a named ILP policy's settings (default: its own).
    """
    from scheduler.policies import make_policy, policy_spec

    if isinstance(policy_name, str):
        spec = policy_spec(policy_name)
        policy = make_policy(spec.name, seed=seed, ilp=ilp)
        is_adaptive, packs = spec.adaptive, spec.packing
    else:
        policy, packs = policy_name, True
        is_adaptive = policy.traits.adaptive
    return policy, (is_adaptive if adaptive is None else adaptive), packs


def simulate(cluster: Cluster | str | Path, workload: Workload | str | Path, policy_name: str | Policy,
             colocation: ColocationTable | str | Path | None = None, round_s: float = 60.0, seed: int = 0, *,
             profiles: str | Path | GoodputModel | None = None, adaptive: bool | None = None,
             config: SimConfig | None = None, progress: ProgressCallback | None = None,
             ilp: IlpConfig | None = None) -> SimulationResult:
    """Simulate ``policy_name`` on ``workload`` over ``cluster`` and return the :class:`SimulationResult`.

    ``colocation``: a table, a CSV path, or None — then packing policies use the bundled table transferred
    from Gavel's measurements (:mod:`scheduler.formats.transfer`). ``profiles``: a goodput model, a profile CSV or
    Sia traces directory (default: Sia's traces in the shared data folder). ``adaptive``: see
    :func:`resolve_policy`. ``config`` (default: Sia's behaviour, ``round_s`` and ``seed`` as given). ``ilp``:
    the round-ILP settings of a named ILP policy (default: the policy's own, :mod:`scheduler.policies`).
    """

    cluster_obj = cluster if isinstance(cluster, Cluster) else load_cluster(cluster)
    work = load_workload(workload)
    cfg = config if config is not None else SimConfig(round_s=round_s, seed=seed)
    policy, is_adaptive, packs = resolve_policy(policy_name, cfg.seed, adaptive, ilp)
    if isinstance(colocation, (str, Path)):
        table: ColocationTable | None = load_colocation_table(colocation)
    elif colocation is None and packs:
        from scheduler.formats.transfer import default_table

        table = default_table()
    else:
        table = colocation
    if profiles is None or isinstance(profiles, (str, Path)):
        model = simulation_goodput_model(profiles, applications=work.applications, gpu_types=cluster_obj.type_names,
                                   efficiency=cfg.efficiency, step_times=cfg.step_times)
    else:
        model = profiles
    sim = Simulator(cluster_obj, work, policy, model, table, cfg, adaptive=is_adaptive)
    return sim.run(progress)
