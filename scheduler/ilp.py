r"""One ILP per round for heterogeneity, adaptivity and packing: Sia's formulation plus pair variables.

Notation
--------
* ``J`` jobs; GPU types ``t`` with capacity ``K_t`` GPUs; configurations ``c`` (``n_c`` GPUs of one type,
  powers of two inside a node, then whole nodes: :mod:`scheduler.configs`).
* ``C_i`` — configurations valid for job ``i``: the goodput model knows the job there, its memory fits
  (``m_i ≤ M_t``), rigid jobs only at their own GPU count, a pinned job (checkpoint-restore) only at its
  current configuration.
* ``g_ic`` — goodput (samples/s × statistical efficiency) of job ``i`` alone on ``c``.
* Normalised goodput (Sia): ``G_ic = g_ic / min_{c' ∈ C_i} g_ic' · R_ic``, with the restart factor
  ``R_ic = max(T_i − N_i·S, 0) / (T_i + S)`` when job ``i`` runs now on another configuration (``T_i`` its
  age, ``N_i`` its restarts, ``S`` the restart cost), else ``R_ic = 1``. Columns with ``G_ic = 0`` are dropped.
* Pair restart (a partner move is a checkpoint-restore too): in a pair column ``(i, k, c)`` the member
  values are ``G'_ic = G_ic · M_ikc`` and ``G'_kc = G_kc · M_kic``, where ``M = 1`` except when ``i`` and
  ``k`` are not already partners of each other and *both* run now on ``c``'s type and GPU count (each
  alone or with someone else): then one of them must move onto the other's GPUs, and the mover pays its
  restart factor once more — ``M_kic = R_k`` if ``G_ic ≥ G_kc`` (the member of lower ``G`` moves; on a
  tie the second, ``k``), else ``M_ikc = R_i``. A member that runs on another configuration already
  pays ``R`` through ``G``; a job that is not running pays nothing, and a member already on ``c`` stays.
  Pair columns with ``G' = 0`` are dropped.
* Pair candidates ``P``: ``(i, k, c)`` with ``c`` single-node and in ``C_i ∩ C_k``, co-location ratios
  ``ρ_i, ρ_k > 0`` on type(c) from the colocation table (``ρ = t / t'``), ``m_i + m_k + 2·m_ctx ≤ M_t`` when
  memory is known, ``ρ_i + ρ_k ≥ 1 + β`` (minimum benefit ``β``), and ``(i, k)`` adjacent in the networkx
  compatibility graph of job classes. Not every such pair gets a variable: see "Keeping it small".

Variables ``x_ic ∈ {0, 1}`` (job ``i`` alone on ``c``), ``y_ikc ∈ {0, 1}`` (``i`` and ``k`` share ``c``).

For ``p < 0`` (Sia's default ``p = −0.5``)::

    minimise   Σ_ic G_ic^p · x_ic  +  Σ_(i,k,c)∈P [ (ρ_i G'_ic)^p + (ρ_k G'_kc)^p ] · y_ikc  +  λ Σ_i u_i
    where      u_i = 1 − Σ_c x_ic − Σ_(k,c) y_ikc                      (job i unallocated; λ = 1.1)

For ``p > 0`` (``p = 1``: the plain sum of normalised goodputs)::

    maximise   Σ_ic G_ic^p · x_ic  +  Σ_(i,k,c)∈P [ (ρ_i G'_ic)^p + (ρ_k G'_kc)^p ] · y_ikc

subject to::

    (1)  Σ_c x_ic + Σ_(k,c) y_ikc  ≤ 1          for every job i   (= 1 for a pinned job)
    (2)  Σ_(i, c of type t) n_c x_ic + Σ_((i,k,c), c of type t) n_c y_ikc  ≤ K_t     for every type t
                                                    (a pair uses its n_c GPUs once)

With ``P = ∅`` (``--no-packing``) this is exactly Sia's ILP. Because ``u_i`` is linear in the other
variables, it is substituted: the solver minimises ``Σ (cost − λ·|members|) · z`` and ``λ·|J|`` is the
objective's constant.

Keeping it small
----------------
All compatible pairs would be O(|J|²·|C|) variables (Gavel's packed LP: 1,837 s at 1,024 jobs). Instead:

1. *Seed*: each job's ``top_k`` partners from the compatibility graph (:func:`pair_candidates`).
2. *Price* (column generation, :func:`price_pair_columns`): solve the LP relaxation, read the duals ``y_i``
   (constraint 1) and ``μ_t`` (constraint 2), and add, per job, the ``top_k`` partners whose pair column
   has negative reduced cost ``w(ρ_i G_ic) − y_i + w(ρ_k G_kc) − y_k − n_c μ_t``. For one configuration
   and one pair of job classes the ratios are constants, so the reduced cost separates into
   ``a_i + b_k``; its minimum over all pairs is a rank-aligned pair of the two sorted lists, found with
   a sort instead of a pass over all pairs (:func:`dual_ranked_partners`). Repeated until no negative
   column is left, this solves the *all-pairs* LP relaxation exactly (a test checks it); by default a
   few passes are made (``pricing_passes``), within a third of the time limit. Pricing uses ``G``, not
   ``G'`` (``M`` depends on the pair, which would break the separation): as ``M ≤ 1`` the priced reduced
   cost is a lower bound of the true one, so no improving column is priced out for its restart; a priced
   column may turn out not to improve, and the exactness above is exact only for pairs with ``M = 1``.
3. *Round*: the LP is nearly integral; its rounding (:func:`greedy_selection` in LP order) is accepted
   when it is within ``mip_gap`` of the LP bound, which then bounds the whole round. Otherwise the
   columns the LP sets to 1 are fixed and the small rest is solved exactly (LP-and-fix); failing that,
   branch and bound on everything, started from the best solution so far.

Configurations dominated for a job, pair columns dominated by a smaller shape for both jobs, and pairs
beaten by running both jobs alone on the same GPUs split between them are never generated; none of these
can change the optimum.

Solver: HiGHS by default — the column-wise matrix handed to highspy in one call, since building the same
model through ``pulp.HiGHS`` costs more than solving it — and CBC through PuLP as the fallback
(``solver="pulp-highs"`` runs HiGHS through PuLP). Always a time limit and a relative gap. The answer's
solution status is read as well as its model status: a time-limited run can report "Optimal"/"Time limit
reached" with an integer-feasible, not proven-optimal incumbent (used, and reported as such). When no
feasible solution comes back, a greedy allocation is used, so a round always yields a decision.
"""

from __future__ import annotations

import gc
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

import numpy as np

from scheduler.cluster import Cluster
from scheduler.configs import Configuration, configurations
from scheduler.goodput import GoodputEstimate, GoodputModel, estimate_arrays
from scheduler.jobs import Job
from scheduler.policy import Allocation, RoundContext, RoundDecision, SolverInfo

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.colocation import ColocationTable


@dataclass(frozen=True)
class IlpConfig:
    """Knobs of the round ILP (all have the defaults used in the README and benchmarks).

    ``p``: goodput power (Sia −0.5; must not be 0). ``lambda_unallocated``: penalty λ per unallocated job
    (used when p < 0). ``restart_cost_s``: Sia's S. ``packing``: add pair variables. ``top_k``: partners
    per job, seeded from the compatibility graph and added per pricing pass; ``min_benefit``: β, a pair
    needs ``ρ_a + ρ_b ≥ 1 + β``. ``pair_candidates``: "top-k" (ours) or "all" (every compatible pair, as
    in Gavel's packed LP; for comparisons). ``pricing_passes``: column-generation passes (0: seeds only);
    ``seed_partners``: start from the graph's top-k partners (else from singles only). ``time_limit_s`` and
    ``mip_gap`` (relative gap of the objective above; rounds of ≤ 5,000 variables use at most 0.01 %)
    always go to the solver. ``solver``: "highs" (highspy),
    "pulp-highs" (HiGHS through PuLP) or "cbc" (through PuLP). ``max_gpus_per_job`` caps multi-node
    shapes of adaptive jobs (None: the job's own ``max_gpus`` or the cluster). ``context_memory_gb``: per
    process CUDA context added when checking a pair's memory.
    """

    p: float = -0.5
    lambda_unallocated: float = 1.1
    restart_cost_s: float = 25.0
    packing: bool = True
    top_k: int = 3
    min_benefit: float = 0.05
    pair_candidates: Literal["top-k", "all"] = "top-k"
    pricing_passes: int = 2
    seed_partners: bool = True
    time_limit_s: float = 10.0
    mip_gap: float = 5e-3
    solver: Literal["highs", "pulp-highs", "cbc"] = "highs"
    threads: int | None = 1
    max_gpus_per_job: int | None = None
    context_memory_gb: float = 0.5

    def __post_init__(self) -> None:
        if self.p == 0 or not math.isfinite(self.p):
            raise ValueError("p must be a finite non-zero number (Sia uses -0.5; 1 = sum of goodputs)")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0")
        if self.time_limit_s <= 0 or self.mip_gap < 0:
            raise ValueError("time_limit_s must be > 0 and mip_gap >= 0")


@dataclass
class RoundProblem:
    """The ILP of one round as plain arrays, independent of any solver.

    Column ``j`` puts the jobs ``members[j]`` (one, or two for a pair) on configuration ``configs[conf[j]]``,
    taking ``gpus[j]`` GPUs of that type; ``values[j]`` are the members' normalised goodputs (times their
    co-location ratio for a pair) and ``weight[j]`` the column's coefficient in the minimisation form.
    """

    jobs: tuple[Job, ...]
    cluster: Cluster
    configs: tuple[Configuration, ...]
    p: float
    lam: float
    members: list[tuple[int, ...]] = field(default_factory=list)
    conf: list[int] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    values: list[tuple[float, ...]] = field(default_factory=list)
    estimates: list[tuple[GoodputEstimate, ...]] = field(default_factory=list)
    ratios: list[tuple[float, ...]] = field(default_factory=list)
    weight: list[float] = field(default_factory=list)
    pinned: list[bool] = field(default_factory=list)
    num_pairs: int = 0
    num_pair_candidates: int = 0
    single_node_g: list[dict[int, float]] = field(default_factory=list)  # per job: config -> G (for bounds)
    pricing: "_PricingData | None" = None
    pricing_passes: int = 0
    lp_values: "np.ndarray | None" = None  # LP relaxation values of the first len(lp_values) columns
    lp_weight: float | None = None          # LP optimum (minimisation form) when lp_values covers every column
    build_time_s: float = 0.0

    @property
    def num_columns(self) -> int:
        return len(self.members)

    def job_columns(self) -> list[list[int]]:
        cols: list[list[int]] = [[] for _ in self.jobs]
        for j, mem in enumerate(self.members):
            for i in mem:
                cols[i].append(j)
        return cols

    def add(self, members: tuple[int, ...], conf_index: int, gpus: int, values: tuple[float, ...],
            estimates: tuple[GoodputEstimate, ...], ratios: tuple[float, ...] | None = None) -> None:
        self.members.append(members)
        self.ratios.append(ratios if ratios is not None else (1.0,) * len(members))
        self.conf.append(conf_index)
        self.gpus.append(gpus)
        self.values.append(values)
        self.estimates.append(estimates)
        self.weight.append(column_weight(values, self.p, self.lam))

    def objective(self, selected: Sequence[int]) -> float:
        """The natural objective of a selection (p < 0: Σ G^p + λ·unallocated, minimised; p > 0: maximised)."""
        allocated = sum(len(self.members[j]) for j in selected)
        total = sum(v ** self.p for j in selected for v in self.values[j])
        if self.p < 0:
            return total + self.lam * (len(self.jobs) - allocated)
        return total

    def objective_from_weights(self, weight_sum: float) -> float:
        """Natural objective from the minimisation form's value."""
        return weight_sum + self.lam * len(self.jobs) if self.p < 0 else -weight_sum

    def check(self, selected: Sequence[int]) -> None:
        """AssertionError if a selection breaks (1) or (2)."""
        used: dict[int, int] = {}
        per_type: dict[str, int] = {}
        for j in selected:
            for i in self.members[j]:
                used[i] = used.get(i, 0) + 1
            t = self.configs[self.conf[j]].gpu_type
            per_type[t] = per_type.get(t, 0) + self.gpus[j]
        assert all(v == 1 for v in used.values()), "a job is chosen twice"
        for t, n in per_type.items():
            assert n <= self.cluster.capacity(t), f"{t}: {n} GPUs > capacity"


def column_weight(values: Sequence[float], p: float, lam: float) -> float:
    """Coefficient in the minimisation form: ``Σ v^p − λ·|members|`` (p < 0) or ``−Σ v^p`` (p > 0)."""
    total = 0.0
    for v in values:  # a plain loop: this runs for every column, tens of thousands per round
        total += v ** p
    return total - lam * len(values) if p < 0 else -total


def restart_factor(job: Job, restart_cost_s: float) -> float:
    """Sia's ``max(T − N·S, 0) / (T + S)``: how much of a move's goodput survives the restart (S: the job's
    own ``restart_cost_s`` when set)."""
    restart_cost_s = job.restart_cost_s if job.restart_cost_s is not None else restart_cost_s
    denom = job.age_s + restart_cost_s
    if denom <= 0:
        return 1.0
    return max(job.age_s - job.restarts * restart_cost_s, 0.0) / denom


def pair_move_values(a: Job, b: Job, c: Configuration, ga: float, gb: float, restart_cost_s: float
                     ) -> tuple[float, float]:
    """Normalised goodputs ``(G'_a, G'_b)`` of ``a`` and ``b`` sharing ``c`` after the partner-move restart.

    Joining a partner keeps a job's configuration but moves one job onto the other's GPUs: a
    checkpoint-restore. When the two are not already partners and both run now on c's type and GPU count,
    one must move; the member of lower ``G`` does (``b`` on a tie) and its value takes its restart factor.
    A member on another configuration already carries the factor in ``G``; one not running pays nothing.
    """
    if a.current_partner == b.name and b.current_partner == a.name:
        return ga, gb
    here = (c.gpu_type, c.num_gpus)
    if not (a.is_running and b.is_running and (a.current_gpu_type, a.current_num_gpus) == here
            and (b.current_gpu_type, b.current_num_gpus) == here):
        return ga, gb
    if ga >= gb:
        return ga, gb * restart_factor(b, restart_cost_s)
    return ga * restart_factor(a, restart_cost_s), gb


def _shape_for(job: Job, gpu_type: str, per_node: int) -> tuple[Configuration, Configuration] | None:
    """A rigid job's (reserved, used) shapes on a type: its own count; multi-node jobs take whole nodes."""
    n = job.num_gpus
    if n <= per_node:
        return Configuration(gpu_type, 1, n), Configuration(gpu_type, 1, n)
    nodes = -(-n // per_node)
    return Configuration(gpu_type, nodes, nodes * per_node), Configuration(gpu_type, nodes, n)


@dataclass
class _JobColumns:
    """Per job: columns to offer alone (after dominance) and every valid single-node configuration (for pairs).

    Both map a configuration index to (normalised G after the restart factor, estimate).
    """

    alone: dict[int, tuple[float, GoodputEstimate]] = field(default_factory=dict)
    single: dict[int, tuple[float, GoodputEstimate]] = field(default_factory=dict)
    pinned: bool = False
    split_cache: dict[str, dict[int, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Shapes:
    """The configurations one kind of job may use: reserved (capacity) and used (goodput) shapes.

    Shapes are sorted by (GPU type, size) so dominance is one running maximum over the array.
    """

    reserved: "np.ndarray"          # indices into the round's configuration list
    used: tuple[Configuration, ...]
    type_of: "np.ndarray"           # small int per shape: its GPU type
    size: "np.ndarray"              # reserved GPUs
    single_node: "np.ndarray"       # bool
    segment_start: "np.ndarray"     # bool: first shape of its GPU type


def _shapes_for(job: Job, cluster: Cluster, configs: tuple[Configuration, ...], index: dict[Configuration, int],
                cfg: IlpConfig, sia_shapes: frozenset[Configuration]) -> _Shapes:
    entries: list[tuple[int, int, int, Configuration]] = []  # (type, size, reserved index, used shape)
    types = {name: n for n, name in enumerate(cluster.type_names)}
    for t in cluster:
        if job.memory_gb is not None and job.memory_gb > t.memory_gb:
            continue
        if job.adaptive:
            cap = job.max_gpus if job.max_gpus is not None else cfg.max_gpus_per_job
            for c in configs:
                if c.gpu_type == t.name and (cap is None or c.num_gpus <= cap) and c in sia_shapes:
                    entries.append((types[t.name], c.num_gpus, index[c], c))
        else:
            shapes = _shape_for(job, t.name, t.gpus_per_node)
            if shapes is None or shapes[0] not in index:
                continue
            entries.append((types[t.name], shapes[0].num_gpus, index[shapes[0]], shapes[1]))
    entries.sort(key=lambda e: (e[0], e[1]))
    type_of = np.array([e[0] for e in entries], dtype=int)
    start = np.ones(len(entries), dtype=bool)
    if len(entries) > 1:
        start[1:] = type_of[1:] != type_of[:-1]
    return _Shapes(
        reserved=np.array([e[2] for e in entries], dtype=int), used=tuple(e[3] for e in entries),
        type_of=type_of, size=np.array([e[1] for e in entries], dtype=int),
        single_node=np.array([configs[e[2]].single_node for e in entries], dtype=bool), segment_start=start,
    )


def _job_options(jobs: Sequence[Job], shapes: _Shapes, configs: tuple[Configuration, ...], goodput: GoodputModel,
                 cfg: IlpConfig, type_index: Mapping[str, int]) -> list[_JobColumns]:
    """Valid configurations of jobs sharing one set of shapes, with Sia's normalised, restart-adjusted
    goodput, dominance-filtered: one :class:`_JobColumns` per job.

    The jobs' estimates are stacked into (jobs × shapes) arrays so each step is one numpy operation for
    the whole group rather than one per job (shapes number ~30, so per-job calls cost mostly overhead).
    """
    outs = [_JobColumns() for _ in jobs]
    if not shapes.used or not jobs:
        return outs
    per_job = [estimate_arrays(goodput, job, shapes.used) for job in jobs]
    raw = np.array([a.goodput for a in per_job], dtype=float)
    g = np.nan_to_num(raw, nan=0.0)
    valid = g > 0
    running = np.array([job.is_running for job in jobs], dtype=bool)
    current_type = np.array([type_index.get(job.current_gpu_type, -1) if job.is_running else -1 for job in jobs])
    current_size = np.array([job.current_num_gpus if job.is_running else -1 for job in jobs])
    is_current = (running[:, None] & (shapes.type_of[None, :] == current_type[:, None])
                  & (shapes.size[None, :] == current_size[:, None]))
    # a pinned job that can run on its current configuration is held there
    pinned = np.array([job.pinned for job in jobs], dtype=bool) & (valid & is_current).any(axis=1)
    valid = np.where(pinned[:, None], valid & is_current, valid)
    smallest = np.where(valid, g, np.inf).min(axis=1)
    G = np.where(valid, g / smallest[:, None], 0.0)
    factor = np.array([restart_factor(job, cfg.restart_cost_s) for job in jobs])
    G = np.where(is_current | ~running[:, None], G, G * factor[:, None])
    valid &= G > 0
    G = np.where(valid, G, 0.0)
    # dominance inside each GPU type: shapes are sorted by (type, size); lifting each type's values above
    # the previous types' lets one running maximum serve every segment
    lifted = G + shapes.type_of[None, :] * (G.max(axis=1)[:, None] + 1.0)
    running_max = np.maximum.accumulate(lifted, axis=1)
    prev = np.empty_like(running_max)
    prev[:, 0] = -np.inf
    prev[:, 1:] = running_max[:, :-1]
    prev[:, shapes.segment_start] = -np.inf
    keep = valid & (lifted > prev + 1e-12 * np.abs(lifted))
    rows, cols = np.nonzero((keep | (valid & shapes.single_node[None, :])) & (raw > 0))
    # plain Python lists for the per-entry loop: indexing numpy scalars one by one costs more than the
    # estimates themselves
    g_l = G[rows, cols].tolist()
    batch_l = np.array([a.batch_size for a in per_job], dtype=float)[rows, cols].tolist()
    thr_l = np.array([a.throughput for a in per_job], dtype=float)[rows, cols].tolist()
    eff_l = np.array([a.efficiency for a in per_job], dtype=float)[rows, cols].tolist()
    keep_l, single_l = keep[rows, cols].tolist(), shapes.single_node[cols].tolist()
    ci_l, row_l = shapes.reserved[cols].tolist(), rows.tolist()
    for n in range(len(row_l)):
        out = outs[row_l[n]]
        entry = (g_l[n], GoodputEstimate(int(batch_l[n]), thr_l[n], eff_l[n]))
        if keep_l[n]:
            out.alone[ci_l[n]] = entry
        if single_l[n]:
            out.single[ci_l[n]] = entry
    for out, is_pinned in zip(outs, pinned.tolist()):
        out.pinned = is_pinned
    return outs


def _split_beats_pair(a: _JobColumns, b: _JobColumns, c: Configuration, configs: tuple[Configuration, ...],
                      va: float, vb: float, cfg: IlpConfig) -> bool:
    """True when ``a`` and ``b`` alone on two shapes of c's type with n_a + n_b ≤ n_c do at least as well.

    Such a pair column can never improve the optimum (it uses as many GPUs of the same type for no more
    objective), so it is not generated. Only single-node shapes can fit inside a single-node pair.
    """
    if c.num_gpus < 2:
        return False
    pair_w = column_weight((va, vb), cfg.p, cfg.lambda_unallocated)
    best_a = a.split_cache.get(c.gpu_type)
    if best_a is None:
        best_a = _best_weight_by_size(a, c.gpu_type, configs, cfg)
    best_b = b.split_cache.get(c.gpu_type)
    if best_b is None:
        best_b = _best_weight_by_size(b, c.gpu_type, configs, cfg)
    n = c.num_gpus
    for na, wa in best_a.items():
        for nb, wb in best_b.items():
            if na + nb <= n and wa + wb <= pair_w:
                return True
    return False


def _best_weight_by_size(opts: _JobColumns, gpu_type: str, configs: tuple[Configuration, ...], cfg: IlpConfig
                         ) -> dict[int, float]:
    """Single-node size -> the best (lowest) weight of running the job alone on at most that many GPUs."""
    cached = opts.split_cache.get(gpu_type)
    if cached is not None:
        return cached
    weights: dict[int, float] = {}
    for ci, (g, _) in opts.single.items():
        c = configs[ci]
        if c.gpu_type == gpu_type:
            weights[c.num_gpus] = min(weights.get(c.num_gpus, math.inf), column_weight((g,), cfg.p, cfg.lambda_unallocated))
    best: dict[int, float] = {}
    running = math.inf
    for n in sorted(weights):
        running = min(running, weights[n])
        best[n] = running
    opts.split_cache[gpu_type] = best
    return best


def _class_key(job: Job) -> tuple[str, str]:
    return (job.application, job.job_type)


def pair_candidates(jobs: Sequence[Job], options: Sequence[_JobColumns], configs: tuple[Configuration, ...],
                    colocation: "ColocationTable", cfg: IlpConfig) -> tuple[set[tuple[int, int]], "object"]:
    """Unordered job pairs worth a pair variable, and the class-level compatibility graph.

    Jobs are grouped into classes (application, job type): ratios depend only on the class and GPU type.
    The networkx graph has one node per class and an edge where some GPU type gives ``ρ_a, ρ_b > 0`` and
    ``ρ_a + ρ_b ≥ 1 + β`` (weight = the best such sum). Each job takes up to ``top_k`` partners from its
    classes' neighbours, best edge first; within a partner class, partners are spread by rank (job j of
    class A meets jobs near rank j·|B|/|A| of class B, both sorted by preferred shape) so that many
    disjoint pairs exist, instead of every job naming the same few partners.
    With ``pair_candidates="all"`` every pair of jobs in adjacent classes is a candidate.
    """
    import networkx as nx

    classes: dict[tuple[str, str], list[int]] = {}
    for i, job in enumerate(jobs):
        if any(configs[ci].single_node for ci in options[i].single):
            classes.setdefault(_class_key(job), []).append(i)
    graph = nx.Graph()
    graph.add_nodes_from(classes)
    keys = list(classes)
    types = sorted(colocation.gpu_types)
    for a_pos, a in enumerate(keys):
        rep_a = jobs[classes[a][0]]
        for b in keys[a_pos:]:
            rep_b = jobs[classes[b][0]]
            if a == b and len(classes[a]) < 2:
                continue
            best = 0.0
            for t in types:
                r = colocation.lookup(t, rep_a, rep_b)
                if r is None or r[0] <= 0 or r[1] <= 0:
                    continue
                best = max(best, r[0] + r[1])
            if best >= 1 + cfg.min_benefit:
                graph.add_edge(a, b, weight=best)
    pairs: set[tuple[int, int]] = set()
    if cfg.pair_candidates == "all":
        for a, b in graph.edges:
            for i in classes[a]:
                for k in classes[b]:
                    if i != k:
                        pairs.add((min(i, k), max(i, k)))
        return pairs, graph
    if cfg.top_k == 0:
        return pairs, graph

    def shape_key(i: int) -> tuple:
        opts = options[i].single
        best_ci = max(opts, key=lambda ci: opts[ci][0])
        c = configs[best_ci]
        return (c.gpu_type, c.num_gpus, -opts[best_ci][0], jobs[i].name)

    ordered = {key: sorted(members, key=shape_key) for key, members in classes.items()}
    rank = {i: r for members in ordered.values() for r, i in enumerate(members)}
    for a, members in ordered.items():
        neighbours = sorted(graph[a].items(), key=lambda kv: (-kv[1]["weight"], kv[0]))
        for i in members:
            # round-robin over the neighbouring classes, best edge first: one partner from each of the
            # top classes before a second from any, so a job's candidates are not all of one kind
            chosen: list[int] = []
            offset = {b: 0 for b, _ in neighbours}
            while len(chosen) < cfg.top_k:
                progressed = False
                for b, _ in neighbours:
                    if len(chosen) >= cfg.top_k:
                        break
                    pool = ordered[b]
                    start = rank[i] + 1 if a == b else (rank[i] * len(pool)) // len(members)
                    while offset[b] < len(pool):
                        k = pool[(start + offset[b]) % len(pool)]
                        offset[b] += 1
                        if k != i and k not in chosen:
                            chosen.append(k)
                            progressed = True
                            break
                if not progressed:
                    break
            for k in chosen:
                pairs.add((min(i, k), max(i, k)))
    return pairs, graph


@dataclass
class _PricingData:
    """What pricing needs beyond the columns: per-job options, the class graph, the table."""

    options: Sequence[_JobColumns]
    graph: object
    colocation: "ColocationTable"
    plan: list[tuple] | None = None


def _pricing_plan(problem: RoundProblem, options: Sequence[_JobColumns], configs: tuple[Configuration, ...],
                  colocation: "ColocationTable", graph: "object", cfg: IlpConfig) -> list[tuple]:
    """What pricing loops over, computed once per round: per (class pair, single-node configuration) the
    ratios and the member jobs valid there (ids ascending) with their normalised goodputs."""
    data = problem.pricing
    if data is not None and data.plan is not None:
        return data.plan
    jobs = problem.jobs
    class_of: dict[tuple[str, str], list[int]] = {}
    for i, job in enumerate(jobs):
        if options[i].single and not options[i].pinned:
            class_of.setdefault(_class_key(job), []).append(i)
    single_node = [ci for ci, c in enumerate(configs) if c.single_node]
    members_at: dict[tuple[tuple[str, str], int], tuple["np.ndarray", "np.ndarray"]] = {}
    for key, members in class_of.items():
        for ci in single_node:
            ids = [i for i in members if ci in options[i].single]
            if ids:
                members_at[(key, ci)] = (np.array(ids, dtype=int),
                                         np.array([options[i].single[ci][0] for i in ids]))
    plan: list[tuple] = []
    for a_key, b_key in graph.edges:  # type: ignore[attr-defined]
        if a_key not in class_of or b_key not in class_of:
            continue
        rep_a, rep_b = jobs[class_of[a_key][0]], jobs[class_of[b_key][0]]
        ratios: dict[str, tuple[float, float] | None] = {}
        for ci in single_node:
            c = configs[ci]
            r = _beneficial_ratio(colocation, ratios, c.gpu_type, rep_a, rep_b, cfg.min_benefit)
            if r is None:
                continue
            got_a, got_b = members_at.get((a_key, ci)), members_at.get((b_key, ci))
            if got_a is None or got_b is None:
                continue
            plan.append((a_key, b_key, ci, r, got_a[0], got_a[1], got_b[0], got_b[1]))
    if data is not None:
        data.plan = plan
    return plan


def _beneficial_ratio(colocation: "ColocationTable", cache: dict[str, tuple[float, float] | None], gpu_type: str,
                      a: Job, b: Job, min_benefit: float) -> tuple[float, float] | None:
    """The pair's ratios on ``gpu_type`` if both are positive and sum to ≥ 1 + min_benefit, else None (cached)."""
    if gpu_type not in cache:
        cache[gpu_type] = colocation.lookup(gpu_type, a, b)
    r = cache[gpu_type]
    if r is None or r[0] <= 0 or r[1] <= 0 or r[0] + r[1] < 1 + min_benefit:
        return None
    return r


def dual_ranked_partners(problem: RoundProblem, options: Sequence[_JobColumns], configs: tuple[Configuration, ...],
                         colocation: "ColocationTable", graph: "object", cfg: IlpConfig,
                         prices: "tuple[np.ndarray, dict[str, float]]",
                         exclude: "set[tuple[int, int]] | None" = None) -> set[tuple[int, int]]:
    """Top-k partners per job with negative LP reduced cost (pricing for column generation).

    With duals ``y_i`` (jobs) and ``μ_t`` (capacity), the reduced cost of pair (i, k, c) is
    ``w(ρ_i G_ic) − y_i + w(ρ_k G_kc) − y_k − n_c μ_t`` (``w`` = the column weight of one member). For a
    fixed configuration and pair of classes (A, B) the ratios are fixed, so it separates into
    ``a_i + b_k + const``: the best pairs match A's jobs sorted by ``a`` with B's sorted by ``b``, rank
    by rank (any matching of the best ranks is equally good, and rank alignment keeps them disjoint).
    That costs a sort per (configuration, class pair) instead of a pass over all job pairs. Each job then
    keeps its ``top_k`` partners of most negative reduced cost. Because the minimum of ``a_i + b_k`` is
    always a rank-aligned pair, an empty answer proves no pair column anywhere has negative reduced cost:
    iterating this to the end solves the all-pairs LP relaxation exactly.
    """
    y, mu = prices
    jobs = problem.jobs
    p, lam = cfg.p, cfg.lambda_unallocated
    mem = [j.memory_gb for j in jobs]
    cap_mem = {t.name: t.memory_gb for t in problem.cluster}
    best: dict[int, list[tuple[float, int]]] = {}

    def weight(v: "np.ndarray") -> "np.ndarray":
        return v ** p - lam if p < 0 else -(v ** p)

    for a_key, b_key, ci, r, ia, ga, ib, gb in _pricing_plan(problem, options, configs, colocation, graph, cfg):
        c = configs[ci]
        ia0, ga0 = ia, ga  # job ids ascending, as planned
        score_a = weight(ga * r[0]) - y[ia]
        score_b = weight(gb * r[1]) - y[ib]
        const = -c.num_gpus * mu.get(c.gpu_type, 0.0)
        ia, score_a = ia[np.argsort(score_a, kind="stable")], np.sort(score_a, kind="stable")
        ib, score_b = ib[np.argsort(score_b, kind="stable")], np.sort(score_b, kind="stable")
        if a_key == b_key:  # same class: pair neighbouring ranks (0,1), (1,2), (2,3), ...
            # a table may give the two copies of one job type different ratios (the column's first
            # member, the lower index, gets ratio_a): cost each pair with its real orientation
            left, right = ia[:-1], ia[1:]
            lo, hi = np.minimum(left, right), np.maximum(left, right)
            g_lo = ga0[np.searchsorted(ia0, lo)]
            g_hi = ga0[np.searchsorted(ia0, hi)]
            cost = weight(g_lo * r[0]) - y[lo] + weight(g_hi * r[1]) - y[hi] + const
            left, right = lo, hi
        else:  # rank r of A with ranks r and r+1 of B (two partners each, still nearly disjoint)
            m = min(len(ia), len(ib))
            left = np.concatenate([ia[:m], ia[:m - 1] if m > 1 else ia[:0]])
            right = np.concatenate([ib[:m], ib[1:m]])
            cost = np.concatenate([score_a[:m] + score_b[:m], score_a[:m - 1] + score_b[1:m]]) + const
        keep = cost < -1e-9
        for i, k, value in zip(left[keep], right[keep], cost[keep]):
            i, k = int(i), int(k)
            if exclude is not None and (min(i, k), max(i, k)) in exclude:
                continue  # already a candidate: do not let it use up one of the job's top-k slots
            if mem[i] is not None and mem[k] is not None:
                if mem[i] + mem[k] + 2 * cfg.context_memory_gb > cap_mem[c.gpu_type]:
                    continue
            best.setdefault(i, []).append((float(value), k))
            best.setdefault(k, []).append((float(value), i))
    pairs: set[tuple[int, int]] = set()
    for i, found in best.items():
        chosen: list[int] = []
        for _, k in sorted(found):
            if k not in chosen:
                chosen.append(k)
                if len(chosen) >= cfg.top_k:
                    break
        for k in chosen:
            pairs.add((min(i, k), max(i, k)))
    return pairs


def _add_pair_columns(problem: RoundProblem, candidates: Sequence[tuple[int, int]], options: Sequence[_JobColumns],
                      colocation: "ColocationTable", cfg: IlpConfig) -> None:
    """Pair columns for candidate job pairs: every common single-node configuration that is not dominated."""
    jobs, configs_t = problem.jobs, problem.configs
    mem_of = {t.name: t.memory_gb for t in problem.cluster}
    single_node = [c.single_node for c in configs_t]
    order_key = [(c.gpu_type, c.num_gpus) for c in configs_t]
    for i, k in candidates:
        a, b = jobs[i], jobs[k]
        if options[i].pinned or options[k].pinned:
            # a pinned job keeps its configuration; it may keep (not gain) a partner
            if not (a.current_partner == b.name and b.current_partner == a.name):
                continue
        ratio_cache: dict[str, tuple[float, float] | None] = {}
        kept: dict[str, list[tuple[float, float]]] = {}
        single_k = options[k].single
        common = sorted(
            (ci for ci in options[i].single if ci in single_k and single_node[ci]), key=order_key.__getitem__,
        )
        for ci in common:
            c = configs_t[ci]
            r = _beneficial_ratio(colocation, ratio_cache, c.gpu_type, a, b, cfg.min_benefit)
            if r is None:
                continue
            if a.memory_gb is not None and b.memory_gb is not None:
                if a.memory_gb + b.memory_gb + 2 * cfg.context_memory_gb > mem_of[c.gpu_type]:
                    continue
            gi, ei = options[i].single[ci]
            gk, ek = options[k].single[ci]
            gi, gk = pair_move_values(a, b, c, gi, gk, cfg.restart_cost_s)
            if gi <= 0 or gk <= 0:
                continue  # the mover's restart leaves it nothing (as for G_ic = 0, the column is dropped)
            vi, vk = gi * r[0], gk * r[1]
            seen = kept.setdefault(c.gpu_type, [])
            if any(pi >= vi and pk >= vk for pi, pk in seen):
                continue  # a smaller shape of this type is at least as good for both jobs
            if _split_beats_pair(options[i], options[k], c, configs_t, vi, vk, cfg):
                continue  # running both alone on the same GPUs, split, is at least as good
            seen.append((vi, vk))
            problem.add((i, k), ci, c.num_gpus, (vi, vk), (ei, ek), (r[0], r[1]))
            problem.num_pairs += 1


@contextmanager
def _gc_paused():
    """Pause Python's cyclic garbage collector for one round's build or solve.

    A round allocates ~10^5 small tuples and estimates that form no cycles; in a long-lived process (the
    simulator, the benchmark) each allocation burst triggers full collections over everything else alive,
    which cost more than the work itself. Nothing is lost: collection resumes (and catches up) afterwards.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def build_problem(jobs: Sequence[Job], cluster: Cluster, goodput: GoodputModel,
                  colocation: "ColocationTable | None" = None, cfg: IlpConfig = IlpConfig()) -> RoundProblem:
    """Columns of the round ILP (see the module docstring)."""
    with _gc_paused():
        return _build_problem(jobs, cluster, goodput, colocation, cfg)


def _build_problem(jobs: Sequence[Job], cluster: Cluster, goodput: GoodputModel,
                   colocation: "ColocationTable | None", cfg: IlpConfig) -> RoundProblem:
    started = time.perf_counter()
    jobs = tuple(jobs)
    configs = list(configurations(cluster))
    sia_shapes = frozenset(configs)
    index = {c: i for i, c in enumerate(configs)}
    for job in jobs:  # rigid multi-node shapes that are not in Sia's list (e.g. 12 GPUs on 8-GPU nodes)
        if not job.adaptive:
            for t in cluster:
                shapes = _shape_for(job, t.name, t.gpus_per_node)
                if shapes and shapes[0] not in index and shapes[0].num_gpus <= t.total_gpus:
                    index[shapes[0]] = len(configs)
                    configs.append(shapes[0])
    configs_t = tuple(configs)
    problem = RoundProblem(jobs, cluster, configs_t, cfg.p, cfg.lambda_unallocated)
    shape_cache: dict[tuple, _Shapes] = {}
    type_index = {name: n for n, name in enumerate(cluster.type_names)}
    groups: dict[tuple, list[int]] = {}  # jobs by the shapes they may use
    for i, job in enumerate(jobs):
        kind = (job.adaptive, job.max_gpus, job.memory_gb) if job.adaptive else (False, job.num_gpus, job.memory_gb)
        if kind not in shape_cache:
            shape_cache[kind] = _shapes_for(job, cluster, configs_t, index, cfg, sia_shapes)
        groups.setdefault(kind, []).append(i)
    options: list[_JobColumns] = [_JobColumns() for _ in jobs]
    for kind, members in groups.items():
        found = _job_options([jobs[i] for i in members], shape_cache[kind], configs_t, goodput, cfg, type_index)
        for i, opts in zip(members, found):
            options[i] = opts
    problem.pinned = [o.pinned for o in options]
    problem.single_node_g = [{ci: g for ci, (g, _) in o.single.items()} for o in options]
    # single columns, list by list: the same as problem.add per column, without its per-call overhead
    p, lam = cfg.p, cfg.lambda_unallocated
    num_gpus = [c.num_gpus for c in configs_t]
    singles = [(i, ci, g, est) for i, opt in enumerate(options) for ci, (g, est) in opt.alone.items()]
    problem.members.extend((i,) for i, _, _, _ in singles)
    problem.ratios.extend((1.0,) for _ in singles)
    problem.conf.extend(ci for _, ci, _, _ in singles)
    problem.gpus.extend(num_gpus[ci] for _, ci, _, _ in singles)
    problem.values.extend((g,) for _, _, g, _ in singles)
    problem.estimates.extend((est,) for _, _, _, est in singles)
    if p < 0:
        problem.weight.extend(g ** p - lam for _, _, g, _ in singles)
    else:
        problem.weight.extend(-(g ** p) for _, _, g, _ in singles)
    if cfg.packing and colocation is not None and len(colocation):
        candidates, graph = pair_candidates(jobs, options, configs_t, colocation, cfg)
        if not cfg.seed_partners and cfg.pair_candidates == "top-k" and cfg.pricing_passes > 0:
            candidates = set()
        _add_pair_columns(problem, sorted(candidates), options, colocation, cfg)
        problem.num_pair_candidates = len(candidates)
        if cfg.pair_candidates == "top-k" and cfg.top_k > 0 and cfg.pricing_passes > 0:
            problem.pricing = _PricingData(options, graph, colocation)
    problem.build_time_s = time.perf_counter() - started
    return problem


# --------------------------------------------------------------------------------------------------
# Solving
# --------------------------------------------------------------------------------------------------

def greedy_selection(problem: RoundProblem, lp_values: "np.ndarray | None" = None) -> list[int]:
    """A feasible selection without a solver: pinned jobs first, then the best weight per GPU.

    With ``lp_values`` (an LP relaxation's solution) columns are taken in decreasing LP value first — LP
    rounding, which on these nearly integral LPs lands close to the optimum — and the rest greedily.
    Used as the solver's starting incumbent and when the solver fails; never empty-handed.
    """
    n = problem.num_columns
    if n == 0:
        return []
    pinned_job = np.asarray(problem.pinned, dtype=bool)
    first = np.fromiter((m[0] for m in problem.members), dtype=int, count=n)
    second = np.fromiter((m[1] if len(m) > 1 else m[0] for m in problem.members), dtype=int, count=n)
    has_pin = pinned_job[first] | pinned_job[second]
    lp = np.zeros(n)
    if lp_values is not None:
        m = min(n, len(lp_values))
        lp[:m] = np.round(np.asarray(lp_values[:m], dtype=float), 6)
    weight = np.asarray(problem.weight, dtype=float)
    per_gpu = weight / np.asarray(problem.gpus, dtype=float)
    # np.lexsort sorts by the last key first: pinned, then LP value (descending), weight per GPU, weight
    order = np.lexsort((weight, per_gpu, -lp, ~has_pin))
    # columns worse than leaving their jobs unallocated are never taken (unless pinned): drop them up front
    order = order[(weight[order] < 0) | has_pin[order]].tolist()
    free = {t.name: t.total_gpus for t in problem.cluster}
    type_of_conf = [c.gpu_type for c in problem.configs]
    members, conf, gpus = problem.members, problem.conf, problem.gpus
    taken: set[int] = set()
    chosen: list[int] = []
    for j in order:
        mem = members[j]
        if mem[0] in taken or (len(mem) > 1 and mem[1] in taken):
            continue
        t = type_of_conf[conf[j]]
        if free[t] < gpus[j]:
            continue
        free[t] -= gpus[j]
        taken.update(mem)
        chosen.append(j)
    return chosen


@dataclass(frozen=True)
class Solution:
    selected: tuple[int, ...]
    info: SolverInfo


def _highs_available() -> bool:
    try:
        import highspy  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class _RawResult:
    """What one solver run returned: a selection (None: no feasible solution), its status words and bound."""

    selected: list[int] | None
    status: str
    proven_optimal: bool
    bound_weight: float | None = None
    num_constraints: int = 0


def _rows(problem: RoundProblem, all_capacity_rows: bool = False
          ) -> tuple[list[list[int]], list[tuple[str, list[int]]]]:
    """Constraint (1) rows (jobs with columns) and constraint (2) rows that can bind (or all of them)."""
    job_cols = problem.job_columns()
    type_cols: dict[str, list[int]] = {}
    for j in range(problem.num_columns):
        type_cols.setdefault(problem.configs[problem.conf[j]].gpu_type, []).append(j)
    capacity = [(t, cols) for t, cols in type_cols.items()
                if all_capacity_rows or sum(problem.gpus[j] for j in cols) > problem.cluster.capacity(t)]
    return job_cols, capacity


def highs_lp(problem: RoundProblem, minimise_form: bool = False, all_capacity_rows: bool = False
             ) -> tuple["object", dict[int, int], dict[str, int]]:
    """The round ILP as a ``highspy.HighsLp`` (column-wise), with the row of each job and capacity.

    For p < 0 the objective is ``Σ weight·z + λ·|J|`` (minimised; the constant is the offset), for p > 0
    ``Σ v^p·z`` (maximised), so HiGHS's objective, bound and relative gap are those of the natural objective.
    ``minimise_form=True`` gives ``min Σ weight·z`` without offset for any p (used for dual prices).
    """
    import highspy

    n = problem.num_columns
    job_cols, capacity = _rows(problem, all_capacity_rows)
    job_row: dict[int, int] = {}
    row_lower: list[float] = []
    row_upper: list[float] = []
    for i, cols in enumerate(job_cols):
        if cols:
            job_row[i] = len(row_lower)
            row_lower.append(1.0 if problem.pinned[i] else -highspy.kHighsInf)
            row_upper.append(1.0)
    cap_row: dict[str, int] = {}
    for t, _ in capacity:
        cap_row[t] = len(row_lower)
        row_lower.append(-highspy.kHighsInf)
        row_upper.append(float(problem.cluster.capacity(t)))
    # column j's entries, in order: its members' job rows, then its type's capacity row (if that row exists);
    # laid out with numpy as a (columns × 3) grid whose unused cells are masked out
    row_of_job = np.full(len(problem.jobs), -1, dtype=np.int64)
    for i, row in job_row.items():
        row_of_job[i] = row
    first = np.fromiter((m[0] for m in problem.members), dtype=np.int64, count=n)
    second = np.fromiter((m[1] if len(m) > 1 else -1 for m in problem.members), dtype=np.int64, count=n)
    cap_of_conf = np.array([cap_row.get(c.gpu_type, -1) for c in problem.configs], dtype=np.int64)
    cap = cap_of_conf[np.asarray(problem.conf, dtype=np.int64)] if n else np.zeros(0, dtype=np.int64)
    grid_index = np.stack([row_of_job[first], np.where(second >= 0, row_of_job[second], -1), cap], axis=1)
    grid_value = np.stack([np.ones(n), np.ones(n), np.asarray(problem.gpus, dtype=float)], axis=1)
    used = np.stack([np.ones(n, dtype=bool), second >= 0, cap >= 0], axis=1)
    starts = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(used.sum(axis=1), out=starts[1:])
    index = grid_index[used]
    value = grid_value[used]
    lp = highspy.HighsLp()
    lp.num_col_ = n
    lp.num_row_ = len(row_lower)
    maximise = problem.p > 0 and not minimise_form
    weights = np.asarray(problem.weight, dtype=float)
    lp.col_cost_ = -weights if maximise else weights
    lp.offset_ = 0.0 if maximise or minimise_form else problem.lam * len(problem.jobs)
    lp.sense_ = highspy.ObjSense.kMaximize if maximise else highspy.ObjSense.kMinimize
    lp.col_lower_ = np.zeros(n)
    lp.col_upper_ = np.ones(n)
    lp.row_lower_ = np.asarray(row_lower, dtype=float)
    lp.row_upper_ = np.asarray(row_upper, dtype=float)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = starts
    lp.a_matrix_.index_ = index.astype(np.int32)
    lp.a_matrix_.value_ = value.astype(float)
    return lp, job_row, cap_row


def price_pair_columns(problem: RoundProblem, cfg: IlpConfig, deadline: float | None = None) -> int:
    """Column generation on the LP relaxation: add priced-in pair columns to ``problem``; returns passes.

    Each pass solves the LP (warm-started: new columns are appended to the same HiGHS model), reads the
    row duals, and asks :func:`dual_ranked_partners` for pairs with negative reduced cost. It stops when
    none is left (the LP then equals the all-pairs LP relaxation), after ``cfg.pricing_passes`` passes, or
    at ``deadline`` (``time.perf_counter()`` seconds).
    """
    import highspy

    data = problem.pricing
    if data is None or problem.num_columns == 0:
        return 0
    lp, job_row, cap_row = highs_lp(problem, minimise_form=True, all_capacity_rows=True)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.passModel(lp)
    type_names = problem.cluster.type_names
    for t in type_names:  # types without any column get a row too, so new columns can reference it
        if t not in cap_row:
            cap_row[t] = h.getNumRow()
            h.addRow(-highspy.kHighsInf, float(problem.cluster.capacity(t)), 0, np.array([], dtype=np.int32),
                     np.array([], dtype=float))
    seen: set[tuple[int, int]] = {m for m in problem.members if len(m) == 2}
    passes = 0
    while passes < cfg.pricing_passes:
        if deadline is not None and time.perf_counter() > deadline:
            break
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            break
        passes += 1
        solution = h.getSolution()
        problem.lp_values = np.asarray(solution.col_value)
        duals = np.asarray(solution.row_dual)
        y = np.zeros(len(problem.jobs))
        for i, row in job_row.items():
            y[i] = duals[row]
        mu = {t: float(duals[row]) for t, row in cap_row.items()}
        fresh = dual_ranked_partners(problem, data.options, problem.configs, data.colocation, data.graph, cfg,
                                     prices=(y, mu), exclude=seen) - seen
        fresh = {pair for pair in fresh if pair[0] in job_row and pair[1] in job_row}
        if not fresh:
            break
        seen |= fresh
        first = problem.num_columns
        _add_pair_columns(problem, sorted(fresh), data.options, data.colocation, cfg)
        problem.num_pair_candidates += len(fresh)
        new = range(first, problem.num_columns)
        if not len(new):
            break
        starts, index, value = [0], [], []
        for j in new:
            for i in problem.members[j]:
                index.append(job_row[i])
                value.append(1.0)
            index.append(cap_row[problem.configs[problem.conf[j]].gpu_type])
            value.append(float(problem.gpus[j]))
            starts.append(len(index))
        h.addCols(len(new), np.asarray([problem.weight[j] for j in new], dtype=float), np.zeros(len(new)),
                  np.ones(len(new)), len(index), np.asarray(starts[:-1], dtype=np.int32),
                  np.asarray(index, dtype=np.int32), np.asarray(value, dtype=float))
        problem.lp_weight = None
    if problem.lp_values is not None and len(problem.lp_values) < problem.num_columns:
        h.run()  # warm start: the LP over the final columns, for rounding and as the round's bound
        if h.getModelStatus() == highspy.HighsModelStatus.kOptimal:
            problem.lp_values = np.asarray(h.getSolution().col_value)
            problem.lp_weight = float(h.getInfo().objective_function_value)
    elif problem.lp_values is not None:
        problem.lp_weight = float(h.getInfo().objective_function_value)
    problem.pricing_passes = passes
    return passes


SMALL_ROUND_COLUMNS = 5000  # rounds up to this many variables are solved to a 0.01 % gap whatever mip_gap says


def _run_from(h: Any, start: Sequence[int]) -> None:
    """Solve the model in ``h`` with the 0/1 selection ``start`` handed to HiGHS as its first incumbent."""
    import highspy

    guess = highspy.HighsSolution()
    values = np.zeros(h.getNumCol())
    values[list(start)] = 1.0
    guess.col_value = values
    h.setSolution(guess)
    h.run()


def _solve_highspy(problem: RoundProblem, cfg: IlpConfig) -> _RawResult:
    """HiGHS through highspy, the matrix passed in one call (column-wise, from numpy arrays).

    This is the model ``pulp.HiGHS`` would build, without its per-variable Python calls (≈1.5 s at 1,000
    jobs on the dev machine, more than the solve itself). The constant ``λ·|J|`` goes in as the objective
    offset so the relative gap HiGHS enforces is the gap of the natural objective.
    """
    import highspy

    n = problem.num_columns
    started = time.perf_counter()
    if n <= SMALL_ROUND_COLUMNS:  # small rounds are cheap to solve (nearly) exactly: do that
        cfg = replace(cfg, mip_gap=min(cfg.mip_gap, 1e-4))
    maximise = problem.p > 0
    offset = 0.0 if maximise else problem.lam * len(problem.jobs)

    def to_weight(natural: float) -> float:  # HiGHS's objective (natural form) -> minimisation form
        return -natural if maximise else natural - offset

    def model() -> tuple["highspy.Highs", int]:
        lp, _, _ = highs_lp(problem)
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        if cfg.threads is not None:
            h.setOptionValue("threads", int(cfg.threads))
        h.passModel(lp)
        return h, lp.num_row_

    # 1. the LP relaxation (reused from column generation when it covers every column)
    h = None
    num_rows = len({i for m in problem.members for i in m}) + len({problem.configs[c].gpu_type for c in problem.conf})
    if problem.lp_values is not None and len(problem.lp_values) == n and problem.lp_weight is not None:
        lp_values, lp_weight = problem.lp_values, problem.lp_weight
    else:
        h, num_rows = model()
        h.setOptionValue("time_limit", float(cfg.time_limit_s))
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            lp_values, lp_weight = None, None
        else:
            lp_values = np.asarray(h.getSolution().col_value)
            lp_weight = to_weight(h.getInfo().objective_function_value)
    # 2. round it: on these nearly integral LPs that is usually within the gap already, and proves it
    start = greedy_selection(problem, lp_values)
    if lp_weight is not None:
        rounded = sum(problem.weight[j] for j in start)
        natural = problem.objective_from_weights(rounded)
        if abs(rounded - lp_weight) <= cfg.mip_gap * max(abs(natural), 1e-9):
            return _RawResult(start, "Optimal (LP rounding within gap)", True, lp_weight, num_rows)
    if h is None:
        h, num_rows = model()
    h.changeColsIntegrality(n, np.arange(n, dtype=np.int32), [highspy.HighsVarType.kInteger] * n)
    # 3. LP-and-fix: keep the columns the LP already sets to 1, solve the small rest exactly; accept it
    #    when it is within the gap of the LP bound (a bound for the whole problem)
    if lp_values is not None and lp_weight is not None:
        fixed = np.nonzero(lp_values > 1 - 1e-6)[0]
        busy = {i for j in fixed for i in problem.members[j]}
        blocked = [j for j in range(n) if lp_values[j] <= 1 - 1e-6 and any(i in busy for i in problem.members[j])]
        h.changeColsBounds(len(fixed), fixed.astype(np.int32), np.ones(len(fixed)), np.ones(len(fixed)))
        if blocked:
            h.changeColsBounds(len(blocked), np.asarray(blocked, dtype=np.int32), np.zeros(len(blocked)),
                               np.zeros(len(blocked)))
        h.setOptionValue("presolve", "on")  # removes the fixed part; what is left is small
        h.setOptionValue("mip_rel_gap", 0.0)
        h.setOptionValue("time_limit", max((float(cfg.time_limit_s) - (time.perf_counter() - started)) / 3, 0.01))
        _run_from(h, start)
        if h.getInfo().primal_solution_status == 2:
            fixed_sel = [int(j) for j in np.nonzero(np.asarray(h.getSolution().col_value) > 0.5)[0]]
            fixed_weight = sum(problem.weight[j] for j in fixed_sel)
            if fixed_weight < sum(problem.weight[j] for j in start):
                start = fixed_sel
            natural = problem.objective_from_weights(fixed_weight)
            if abs(fixed_weight - lp_weight) <= cfg.mip_gap * max(abs(natural), 1e-9):
                return _RawResult(fixed_sel, "Optimal (LP-and-fix within gap)", True, lp_weight, num_rows)
        h.changeColsBounds(n, np.arange(n, dtype=np.int32), np.zeros(n), np.ones(n))
    # 4. otherwise branch and bound on everything, starting from the best solution so far
    h.setOptionValue("time_limit", max(float(cfg.time_limit_s) - (time.perf_counter() - started), 0.01))
    h.setOptionValue("mip_rel_gap", float(cfg.mip_gap))
    # presolve costs more than it saves on these assignment-shaped models (1.5 s vs 0.6 s at 1,000 jobs):
    # the root LP is nearly integral and HiGHS's rounding closes the gap from there
    h.setOptionValue("presolve", "off")
    # the cheap rounding heuristics find near-optimal incumbents from that LP (300 jobs: 0.14 s vs 1.2 s
    # spent in sub-MIPs without them)
    h.setOptionValue("mip_heuristic_run_zi_round", True)
    h.setOptionValue("mip_heuristic_run_shifting", True)
    _run_from(h, start)
    model_status = h.getModelStatus()
    status = h.modelStatusToString(model_status)
    info = h.getInfo()
    bound = None
    if math.isfinite(info.mip_dual_bound):
        bound = to_weight(info.mip_dual_bound)
    if info.primal_solution_status != 2:  # 2 = feasible (kSolutionStatusFeasible)
        return _RawResult(None, status, False, bound, num_rows)
    values = np.asarray(h.getSolution().col_value)
    selected = [int(j) for j in np.nonzero(values > 0.5)[0]]
    return _RawResult(selected, status, model_status == highspy.HighsModelStatus.kOptimal, bound, num_rows)


def _solve_pulp(problem: RoundProblem, cfg: IlpConfig, backend: str) -> _RawResult:
    """The same model through PuLP: ``backend`` "cbc" (PULP_CBC_CMD) or "pulp-highs" (pulp.HiGHS)."""
    import pulp

    n = problem.num_columns
    job_cols, capacity = _rows(problem)
    prob = pulp.LpProblem("colocate_round", pulp.LpMinimize)
    xs = [prob.add_variable(f"z{j}", 0, 1, cat=pulp.LpBinary) for j in range(n)]
    prob.setObjective(pulp.LpAffineExpression(zip(xs, problem.weight)))
    for i, cols in enumerate(job_cols):
        if cols:
            expr = pulp.LpAffineExpression((xs[j], 1) for j in cols)
            sense = pulp.LpConstraintEQ if problem.pinned[i] else pulp.LpConstraintLE
            prob.addConstraint(pulp.LpConstraint(expr, sense=sense, rhs=1), name=f"job{i}")
    for t, cols in capacity:
        expr = pulp.LpAffineExpression((xs[j], problem.gpus[j]) for j in cols)
        prob.addConstraint(pulp.LpConstraint(expr, sense=pulp.LpConstraintLE, rhs=problem.cluster.capacity(t)),
                           name=f"cap_{t}")
    num_rows = sum(1 for cols in job_cols if cols) + len(capacity)
    if backend == "pulp-highs":
        solver = pulp.HiGHS(msg=False, timeLimit=cfg.time_limit_s, gapRel=cfg.mip_gap, threads=cfg.threads,
                            presolve="off")
    else:
        solver = _cbc(cfg)
    prob.solve(solver)
    status = pulp.LpStatus.get(prob.status, str(prob.status))
    bound = None
    if backend == "pulp-highs" and getattr(prob, "solverModel", None) is not None:
        model = prob.solverModel
        status = model.modelStatusToString(model.getModelStatus())
        raw = model.getInfo().mip_dual_bound
        bound = raw if math.isfinite(raw) else None
    # a time-limited run reports status "Optimal" with sol_status "integer feasible": read both
    if prob.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        return _RawResult(None, status, False, bound, num_rows)
    selected = [j for j in range(n) if (xs[j].varValue or 0.0) > 0.5]
    return _RawResult(selected, status, prob.sol_status == pulp.LpSolutionOptimal, bound, num_rows)


def _cbc(cfg: IlpConfig):
    """CBC: a system ``cbc`` (COIN_CMD) if installed, else the binary bundled with PuLP (PULP_CBC_CMD)."""
    import warnings

    import pulp

    options = dict(msg=False, timeLimit=cfg.time_limit_s, gapRel=cfg.mip_gap, threads=cfg.threads)
    coin = pulp.COIN_CMD(**options)
    if coin.available():
        return coin
    with warnings.catch_warnings():  # PuLP 3 deprecates the bundled binary in favour of pulp[cbc]
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD(**options)


SOLVER_NAMES = {"highs": "HiGHS", "pulp-highs": "HiGHS (PuLP)", "cbc": "CBC (PuLP)"}


def solve_problem(problem: RoundProblem, cfg: IlpConfig = IlpConfig()) -> Solution:
    """Solve the round ILP; fall back to CBC, then to the greedy selection. Never raises for solver trouble.

    ``cfg.solver``: "highs" (highspy, default), "pulp-highs" (the same solver through PuLP's interface) or
    "cbc" (PuLP's bundled CBC). If HiGHS is missing or errors, CBC is tried; if no solver returns a
    feasible selection (e.g. the time limit struck before the first incumbent), :func:`greedy_selection`
    is used and ``SolverInfo.fallback`` says so.
    """
    with _gc_paused():
        return _solve_problem(problem, cfg)


def _solve_problem(problem: RoundProblem, cfg: IlpConfig) -> Solution:
    started = time.perf_counter()
    if problem.num_columns == 0:
        objective = problem.objective([])
        info = SolverInfo("none", "Empty", objective, 0.0, objective, 0.0)
        return Solution((), info)
    if problem.pricing is not None and _highs_available():
        # spend at most a third of the time limit pricing; the MIP gets the rest
        price_pair_columns(problem, cfg, deadline=started + cfg.time_limit_s / 3)
        cfg = replace(cfg, time_limit_s=max(cfg.time_limit_s - (time.perf_counter() - started), 0.05))
    chain = [cfg.solver] if cfg.solver == "cbc" else [cfg.solver, "cbc"]
    if not _highs_available():
        chain = ["cbc"]
    result: _RawResult | None = None
    used = chain[0]
    errors: list[str] = []
    for backend in chain:
        used = backend
        try:
            result = _solve_highspy(problem, cfg) if backend == "highs" else _solve_pulp(problem, cfg, backend)
        except Exception as err:  # noqa: BLE001 - a broken solver install must not break the round
            errors.append(f"{backend}: {type(err).__name__}: {err}".split("\n")[0])
            result = None
            continue
        break
    selected = result.selected if result is not None else None
    fallback: str | None = None
    if selected is not None:
        try:
            problem.check(selected)
            job_cols = problem.job_columns()
            chosen = set(selected)
            assert not [i for i, c in enumerate(job_cols) if problem.pinned[i] and c
                        and not chosen.intersection(c)], "pinned job left out"
        except AssertionError:
            selected = None
        else:
            if not result.proven_optimal:
                fallback = "incumbent"
    if selected is None:
        selected = greedy_selection(problem)
        fallback = "greedy"
    objective = problem.objective(selected)
    bound = None
    if result is not None and result.bound_weight is not None:
        bound = problem.objective_from_weights(result.bound_weight)
    gap = abs(objective - bound) / max(abs(objective), 1e-9) if bound is not None else None
    status = result.status if result is not None else "; ".join(errors) or "Error"
    info = SolverInfo(name=SOLVER_NAMES.get(used, used), status=status, objective=objective,
                      time_s=time.perf_counter() - started, bound=bound, gap=gap, fallback=fallback,
                      num_variables=problem.num_columns,
                      num_constraints=result.num_constraints if result is not None else 0)
    return Solution(tuple(sorted(selected)), info)


def decision_from(problem: RoundProblem, solution: Solution) -> RoundDecision:
    """Turn selected columns into a :class:`RoundDecision` (expected goodput includes pair ratios)."""
    allocations: list[Allocation] = []
    placed: set[int] = set()
    for j in solution.selected:
        c = problem.configs[problem.conf[j]]
        mem = problem.members[j]
        for pos, i in enumerate(mem):
            est = problem.estimates[j][pos]
            goodput = est.goodput
            partner = None
            if len(mem) == 2:
                other = mem[1 - pos]
                partner = problem.jobs[other].name
                goodput = est.goodput * problem.ratios[j][pos]
            allocations.append(Allocation(job=problem.jobs[i].name, gpu_type=c.gpu_type, num_gpus=problem.gpus[j],
                                          batch_size=int(est.batch_size), partner=partner,
                                          expected_goodput=float(goodput), num_nodes=c.num_nodes))
            placed.add(i)
    unallocated = tuple(job.name for i, job in enumerate(problem.jobs) if i not in placed)
    return RoundDecision(tuple(allocations), unallocated, solution.info.objective, solution.info)


# --------------------------------------------------------------------------------------------------
# The policy
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PackingPolicy:
    """The packing-aware Sia policy: ``allocate`` builds the round ILP, solves it, returns the decision.

    ``PackingPolicy(IlpConfig(packing=False), name="sia")`` is Sia without packing.
    """

    config: IlpConfig = IlpConfig()
    name: str = "colocate"

    def allocate(self, jobs: Sequence[Job], cluster: Cluster, context: RoundContext) -> RoundDecision:
        problem = build_problem(jobs, cluster, context.goodput, context.colocation, self.config)
        solution = solve_problem(problem, self.config)
        return decision_from(problem, solution)

    def with_config(self, **changes: object) -> "PackingPolicy":
        return replace(self, config=replace(self.config, **changes))


def sia_policy(**changes: object) -> PackingPolicy:
    """Sia's policy (no pair variables) with optional :class:`IlpConfig` changes."""
    return PackingPolicy(replace(IlpConfig(packing=False), **changes), name="sia")
