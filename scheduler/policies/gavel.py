r"""Gavel (OSDI'20) over time fractions, rigid jobs; and packed Gavel.

Registered as ``gavel-sia`` (Sia's mechanism, below), ``gavel-refill`` and ``gavel-packed`` (Gavel's own).

**Objective.** ``objective="max_sum_throughput"`` (the default: the policy Sia's simulator runs as
"gavel", ``max_sum_throughput_perf``) maximises the total throughput in iterations per second,
``Σ_c,t Σ_{j ∈ c} (T_jct / B_j) / s_j · x_ct`` (``B_j`` the job's batch, ``s_j`` its application's
calibration slowdown when the simulator passes ``RoundContext.calibration_slowdown``), under the same constraints as
below. ``objective="max_min"`` is Gavel's heterogeneity-aware max-min fairness:

**Allocation (max-min).** For the active rigid jobs ``j`` and GPU types ``t`` (throughput ``T_jt``: the job's goodput
alone at its own size), Gavel solves an LP for the fraction of time ``x_ct`` each *combination* ``c`` (a job
alone, or — packed variant — two jobs of the same size sharing GPUs) should spend on each type::

    maximise   z + ε Σ_j n_j
    where      n_j = Σ_{c ∋ j, t} T_jct x_ct / T̄_j          (normalised throughput of job j)
    subject to n_j ≥ z                                      for every job j
               Σ_{c ∋ j, t} x_ct ≤ 1                         for every job j (time fractions)
               Σ_{c, t} g_ct x_ct ≤ K_t                       for every type t (g_ct: GPUs c reserves on t)
               x_ct ≥ 0

``T_jct`` is ``T_jt`` for a job alone and ``T_jt · ρ_j`` in a pair (co-location ratio). ``T̄_j`` is the
throughput the job would get spread over the cluster in proportion to each type's capacity
(``Σ_t T_jt K_t / Σ_t K_t``), so every job is compared with its own fair reference. The tiny ε term
(default 1e-3) breaks ties toward using leftover capacity. The packed variant enumerates *every* pair of
same-size single-node jobs with a measured, feasible ratio on the type (Gavel's all-pairs formulation);
the LP is re-solved only when the set of jobs changes, as Gavel does.

**Mechanism.** Gavel decides in its own rounds (``round_s``, 6 minutes as in the Gavel paper; a shorter
round makes rigid jobs pay a checkpoint-restore nearly every simulator round). At each Gavel round,
combinations are ranked by ``x_ct / f_ct`` where ``f_ct`` is the fraction of
rounds (since its jobs arrived) the combination has received on ``t`` (never received: first), and admitted
greedily while capacity lasts, skipping combinations whose jobs are already placed; jobs in
checkpoint-restore keep their GPUs first (as in Sia's simulator). Between Gavel rounds running
combinations keep their GPUs and GPUs freed by finished jobs are refilled in priority order. The received
fractions are the policy's own bookkeeping of its decisions. That is ``mechanism="refill"`` (``gavel-refill``,
``gavel-packed``).

**Sia's mechanism** (``mechanism="sia"``, ``gavel-sia``: what Sia's simulator runs as "gavel"): decisions only at
multiples of ``round_s`` from time 0 (the first one round in);
in between every job keeps exactly what it got, GPUs freed by finished jobs stay idle and arrivals wait for
the next round. At a round each (job, type) is ranked by ``x_jt / f_jt`` with ``f_jt`` the job's seconds on
``t`` over all jobs' seconds on ``t`` (every job starts with half a round on every type, so nothing ranks
infinite); entries the LP gives nothing rank 0 but still fill leftover GPUs, in arrival order. A job
reserves exactly its GPUs, counted per type (the placement stage may split it over nodes), the LP's answer
is an interior point of its optimal face (Sia's solver, ECOS, is an interior-point one) rounded to 5
decimals, and no job is pinned while restoring.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from common.errors import InputError
from scheduler.ilp.solvers.quiet import native_stdout_to_devnull
from scheduler.model.cluster import Cluster
from scheduler.model.goodput import GoodputEstimate
from scheduler.model.jobs import Job
from scheduler.model.policy import Allocation, PolicyTraits, RoundContext, RoundDecision
from scheduler.policies.common import FreeGpus, Shape, current_shape, job_shapes, make_decision, pair, single

Combo = tuple[str, ...]
OBJECTIVES = ("max_sum_throughput", "max_min")
MECHANISMS = ("refill", "sia")


@dataclass(frozen=True)
class _Option:
    combo: Combo
    shape: Shape
    estimates: tuple[GoodputEstimate, ...]
    ratios: tuple[float, ...]

    @property
    def key(self) -> tuple[Combo, str]:
        return self.combo, self.shape.gpu_type


@dataclass
class GavelPolicy:
    """Max-min fairness LP + round-based priority mechanism (see the module docstring)."""

    packing: bool = False
    name: str = "gavel"
    objective: str = "max_sum_throughput"
    epsilon: float = 1e-3
    round_s: float = 360.0
    time_limit_s: float = 60.0
    mechanism: str = "refill"
    received_s: dict[tuple[Combo, str], float] = field(default_factory=dict)
    active_s: dict[str, float] = field(default_factory=dict)
    _round_start: float | None = field(default=None, repr=False)
    _cache_key: tuple = field(default=(), repr=False)
    _fractions: dict[tuple[Combo, str], float] = field(default_factory=dict, repr=False)
    _job_time: dict[str, dict[str, float]] = field(default_factory=dict, repr=False)  # Sia's bookkeeping
    _type_time: dict[str, float] = field(default_factory=dict, repr=False)
    _held: dict[str, Allocation] = field(default_factory=dict, repr=False)
    _last_round: int | None = field(default=None, repr=False)

    @property
    def traits(self) -> PolicyTraits:
        return PolicyTraits(max_group_size=2 if self.packing else 1, splits_across_nodes=self.mechanism == "sia")

    # ------------------------------------------------------------------ options
    def _options(self, jobs: Sequence[Job], cluster: Cluster, context: RoundContext) -> list[_Option]:
        singles = {j.name: job_shapes(j, cluster, context) for j in jobs}
        if self.mechanism == "sia":  # Sia reserves exactly the job's GPUs, on as few nodes as they need
            size = {j.name: j.num_gpus for j in jobs}
            singles = {n: {t: (Shape(t, min(s.gpus, size[n]), s.nodes), e) for t, (s, e) in opts.items()}
                       for n, opts in singles.items()}
        out = [_Option((j.name,), shape, (est,), (1.0,)) for j in jobs for shape, est in singles[j.name].values()]
        if not self.packing or context.colocation is None:
            return out
        ordered = sorted(jobs, key=lambda j: j.name)
        for i, a in enumerate(ordered):
            for b in ordered[i + 1:]:
                for t, (shape_a, est_a) in singles[a.name].items():
                    hit = singles[b.name].get(t)
                    if hit is None or hit[0] != shape_a or shape_a.nodes != 1:
                        continue
                    ratios = context.colocation.lookup(t, a, b)
                    if ratios is None or ratios[0] <= 0 or ratios[1] <= 0 or ratios[0] + ratios[1] < 1.0:
                        continue
                    out.append(_Option((a.name, b.name), shape_a, (est_a, hit[1]), ratios))
        return out

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise InputError(f"gavel objective {self.objective!r}", source="policy options", field="objective",
                             valid=", ".join(OBJECTIVES))
        if self.mechanism not in MECHANISMS:
            raise InputError(f"gavel mechanism {self.mechanism!r}", source="policy options", field="mechanism",
                             valid=", ".join(MECHANISMS))
        if self.mechanism == "sia" and self.packing:
            raise InputError("gavel mechanism 'sia' with packing", source="policy options", field="mechanism",
                             valid="refill (Sia's simulator has no packed Gavel)")

    # ------------------------------------------------------------------ the LP
    def _lp_options(self) -> dict[str, Any]:
        """Sia's mechanism takes an interior point of the optimal face, as its interior-point solver (ECOS)
        returns: jobs tied between types split their time rather than sit on one vertex."""
        if self.mechanism != "sia":
            return {}
        return {"solver": "ipm", "run_crossover": "off", "presolve": "off"}

    def _objective(self, prob: Any, xs: list, options: list[_Option], norm: dict[str, list], served: list[str],
                   z: Any, slowdown: Mapping[str, float], apps: Mapping[str, str]) -> None:
        import pulp

        if self.objective == "max_min":
            prob.setObjective(z + self.epsilon * pulp.lpSum(pulp.LpAffineExpression(norm[n]) for n in served))
            for n, name in enumerate(served):
                prob.addConstraint(pulp.LpAffineExpression(norm[name]) - z >= 0, name=f"minmax_{n}")
            return
        terms = []
        for x, o in zip(xs, options):
            value = 0.0  # one coefficient per variable: a pair's members add up
            for pos, name in enumerate(o.combo):
                est = o.estimates[pos]
                steps = est.throughput / est.batch_size if est.batch_size else est.throughput
                value += steps * o.ratios[pos] / slowdown.get(apps[name], 1.0)
            terms.append((x, value))
        prob.setObjective(pulp.LpAffineExpression(terms))

    def _solve(self, jobs: Sequence[Job], cluster: Cluster, options: list[_Option],
               slowdown: Mapping[str, float] | None = None) -> dict[tuple[Combo, str], float]:
        import pulp

        total = sum(t.total_gpus for t in cluster)
        solo = {(o.combo[0], o.shape.gpu_type): o.estimates[0].goodput for o in options if len(o.combo) == 1}
        ref = {}
        for j in jobs:
            ref[j.name] = sum(solo.get((j.name, t.name), 0.0) * t.total_gpus for t in cluster) / total
        prob = pulp.LpProblem("gavel_max_min", pulp.LpMaximize)
        z = prob.add_variable("z", None, None)
        xs = [prob.add_variable(f"x{k}", 0, None) for k in range(len(options))]
        norm: dict[str, list] = {j.name: [] for j in jobs}
        share: dict[str, list] = {j.name: [] for j in jobs}
        gpus: dict[str, list] = {t.name: [] for t in cluster}
        for x, o in zip(xs, options):
            for pos, name in enumerate(o.combo):
                if ref[name] > 0:
                    norm[name].append((x, o.estimates[pos].goodput * o.ratios[pos] / ref[name]))
                share[name].append((x, 1.0))
            gpus[o.shape.gpu_type].append((x, float(o.shape.gpus)))
        served = [name for name, terms in norm.items() if terms]
        self._objective(prob, xs, options, norm, served, z, slowdown or {}, {j.name: j.application for j in jobs})
        for n, name in enumerate(served):
            prob.addConstraint(pulp.LpAffineExpression(share[name]) <= 1, name=f"share_{n}")
        for t in cluster:
            if gpus[t.name]:
                prob.addConstraint(pulp.LpAffineExpression(gpus[t.name]) <= t.total_gpus, name=f"cap_{t.name}")
        fractions: dict[tuple[Combo, str], float] = {}
        try:
            with native_stdout_to_devnull():  # pulp.HiGHS builds its own Highs; some versions log to stdout
                prob.solve(pulp.HiGHS(msg=False, timeLimit=self.time_limit_s, threads=1, **self._lp_options()))
            ok = pulp.LpStatus.get(prob.status) == "Optimal"
        except pulp.PulpSolverError:
            ok = False
        if ok:
            for x, o in zip(xs, options):
                value = x.varValue or 0.0
                if self.mechanism == "sia":  # as Sia's simulator rounds the LP's answer
                    value = round(value, 5)
                if value > 1e-6:
                    fractions[o.key] = value
        else:  # never leave a round without an answer: each job on its fastest type
            best: dict[str, _Option] = {}
            for o in options:
                better = o.combo[0] not in best or o.estimates[0].goodput > best[o.combo[0]].estimates[0].goodput
                if len(o.combo) == 1 and better:
                    best[o.combo[0]] = o
            fractions = {o.key: 1.0 for o in best.values()}
        return fractions

    # ------------------------------------------------------------------ a round
    def allocate(self, jobs: Sequence[Job], cluster: Cluster, context: RoundContext) -> RoundDecision:
        started = time.perf_counter()
        live = {j.name for j in jobs}
        self.active_s = {k: v for k, v in self.active_s.items() if k in live}
        self.received_s = {k: v for k, v in self.received_s.items() if all(n in live for n in k[0])}
        options = self._options(jobs, cluster, context)
        key = (tuple(sorted(live)), hash(cluster), id(context.colocation))
        if key != self._cache_key:
            self._fractions = self._solve(jobs, cluster, options, context.calibration_slowdown)
            self._cache_key = key
        by_key = {o.key: o for o in options}
        by_name = {j.name: j for j in jobs}
        if self.mechanism == "sia":
            chosen_sia = self._sia_round(jobs, cluster, context, by_key)
            return make_decision(jobs, chosen_sia, self.name, time.perf_counter() - started, status="LP+priority")
        free = FreeGpus(cluster)
        chosen: dict[str, Allocation] = {}
        picked: list[_Option] = []

        def admit(o: _Option) -> bool:
            if any(n in chosen for n in o.combo) or not free.take(o.shape):
                return False
            if len(o.combo) == 1:
                chosen[o.combo[0]] = single(by_name[o.combo[0]], o.shape, o.estimates[0])
            else:
                a, b = pair(by_name[o.combo[0]], by_name[o.combo[1]], o.shape, o.estimates[0], o.estimates[1],
                            (o.ratios[0], o.ratios[1]))
                chosen[a.job], chosen[b.job] = a, b
            picked.append(o)
            return True

        # Between Gavel rounds every running combination keeps its GPUs; at a round boundary only jobs in
        # checkpoint-restore do (with their partner when both are restoring). Freed GPUs are refilled by
        # priority either way (work-conserving).
        new_round = self._round_start is None or context.time_s >= self._round_start + self.round_s - 1e-9
        if new_round:
            self._round_start = context.time_s
        for job in sorted(jobs, key=lambda j: j.name):
            if job.name in chosen or not job.is_running or (new_round and not job.pinned):
                continue
            partner = job.current_partner
            combo = tuple(sorted((job.name, partner))) if partner in live else (job.name,)
            o = by_key.get((combo, job.current_gpu_type or ""))
            if o is None:
                opts = job_shapes(job, cluster, context)
                keep = current_shape(job, opts)
                o = _Option((job.name,), keep[0], (keep[1],), (1.0,)) if keep else None
            if o is not None:
                admit(o)

        def priority(item: tuple[tuple[Combo, str], float]) -> tuple:
            (combo, t), x = item
            age = min(self.active_s.get(n, 0.0) for n in combo)
            got = self.received_s.get((combo, t), 0.0)
            rank = float("inf") if got <= 0 or age <= 0 else x / (got / age)
            return (-rank, -x, combo, t)

        for k, _x in sorted(self._fractions.items(), key=priority):
            o = by_key.get(k)
            if o is not None:
                admit(o)
        r = context.round_duration_s
        for name in live:
            self.active_s[name] = self.active_s.get(name, 0.0) + r
        for o in picked:
            self.received_s[o.key] = self.received_s.get(o.key, 0.0) + r
        return make_decision(jobs, chosen.values(), self.name, time.perf_counter() - started, status="LP+priority")

    # ------------------------------------------------------------------ Sia's mechanism
    def _sia_round(self, jobs: Sequence[Job], cluster: Cluster, context: RoundContext,
                   by_key: Mapping[tuple[Combo, str], _Option]) -> list[Allocation]:
        """This round's allocations under Sia's mechanism (module docstring): held between Gavel rounds."""
        live = {j.name for j in jobs}
        index = int(math.floor(context.time_s / self.round_s + 1e-9))
        if index == self._last_round or index < 1:  # Sia's first decision comes one round after time 0
            self._held = {n: a for n, a in self._held.items() if n in live}
            return list(self._held.values())
        self._last_round = index
        half = self.round_s / 2
        for j in jobs:
            if j.name not in self._job_time:
                self._job_time[j.name] = {t.name: half for t in cluster}
                for t in cluster:
                    self._type_time[t.name] = self._type_time.get(t.name, 0.0) + half
        order = sorted(jobs, key=lambda j: (j.arrival, j.name))
        queue = []
        for t in cluster:
            for j in order:
                x = self._fractions.get(((j.name,), t.name), 0.0)
                share = self._job_time[j.name][t.name] / self._type_time[t.name]
                queue.append((x / share if x > 0 else 0.0, x, j, t.name))
        queue.sort(key=lambda e: (e[0], e[1]), reverse=True)  # stable: ties keep type, then arrival order
        free = {t.name: t.total_gpus for t in cluster}  # Sia counts GPUs; placement may split a job over nodes
        chosen: dict[str, Allocation] = {}
        for _rank, _x, j, name in queue:
            o = by_key.get(((j.name,), name))
            if j.name in chosen or o is None or o.shape.gpus > free[name]:
                continue
            free[name] -= o.shape.gpus
            chosen[j.name] = single(j, o.shape, o.estimates[0])
            self._job_time[j.name][name] += self.round_s
            self._type_time[name] += self.round_s
        self._held = chosen
        return list(chosen.values())
