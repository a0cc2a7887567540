"""The policy interface shared by `colocate schedule`, the simulator and the executors.

A policy is pure (AdaptDL/SkyPilot style): plain values in (jobs, cluster, what the caller knows this
round), allocations out. It never touches processes, files or clocks; the caller applies the decision and
hands the result of the *placement* stage (:func:`scheduler.model.placement.place`) back in the next round's
:class:`RoundContext`.

Every policy returns a :class:`RoundDecision` that satisfies, for every GPU type ``t``::

    sum over allocations a with a.gpu_type == t, counting a pair once, of a.num_gpus <= capacity(t)

and every job appears exactly once, either in ``allocations`` or in ``unallocated``. Partners are
symmetric: if ``a.partner == b`` then ``b``'s allocation names ``a`` as partner, with the same GPU type
and count (:func:`check_decision` checks all of this and raises :class:`InvalidDecision`; the simulator
calls it every round).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.model.cluster import Cluster
    from scheduler.model.colocation import ColocationTable
    from scheduler.model.goodput import GoodputModel
    from scheduler.model.jobs import Job


@dataclass(frozen=True)
class JobPlacement:
    """Where one job runs: ``nodes`` (indices within ``gpu_type``) and the GPU indices used on each of them.

    A single-node job has one node; a multi-node job uses whole nodes, so ``gpus`` lists every GPU of a node.
    A packed job shares exactly these GPUs with ``partner`` (a group of three: with both ``partners``).
    ``layout`` (set only by ``place(..., split=True)``, Sia's Gavel) lists the GPUs used on each node when
    they differ from node to node; ``gpus`` then holds the first node's.
    """

    job: str
    gpu_type: str
    nodes: tuple[int, ...]
    gpus: tuple[int, ...]
    partner: str | None = None
    partners: tuple[str, ...] = ()
    layout: tuple[tuple[int, ...], ...] = ()

    @property
    def node(self) -> int:
        """The first (for single-node jobs: the only) node."""
        return self.nodes[0]

    @property
    def num_gpus(self) -> int:
        return sum(self.per_node)

    @property
    def per_node(self) -> tuple[int, ...]:
        """GPUs used on each node, in node order (Sia's "placement")."""
        if self.layout:
            return tuple(len(g) for g in self.layout)
        return (len(self.gpus),) * len(self.nodes)

    def slots(self) -> list[tuple[str, int, int]]:
        """Every ``(gpu_type, node, gpu)`` this job occupies."""
        if self.layout:
            return [(self.gpu_type, n, g) for n, gs in zip(self.nodes, self.layout) for g in gs]
        return [(self.gpu_type, n, g) for n in self.nodes for g in self.gpus]


@dataclass(frozen=True)
class Placement:
    """Result of the placement stage: job name -> :class:`JobPlacement`, plus jobs that did not fit."""

    jobs: Mapping[str, JobPlacement] = field(default_factory=dict)
    unplaced: tuple[str, ...] = ()

    def __hash__(self) -> int:
        return id(self)

    def of(self, job: str) -> JobPlacement | None:
        return self.jobs.get(job)

    def occupants(self) -> dict[tuple[str, int, int], tuple[str, ...]]:
        """``(gpu_type, node, gpu)`` -> names of the jobs on that GPU (one, or two for a pair)."""
        out: dict[tuple[str, int, int], list[str]] = {}
        for jp in self.jobs.values():
            for slot in jp.slots():
                out.setdefault(slot, []).append(jp.job)
        return {k: tuple(sorted(v)) for k, v in out.items()}


@dataclass(frozen=True)
class Allocation:
    """What one job gets this round.

    ``batch_size`` is the global batch; ``num_nodes`` follows from the configuration (powers of two inside
    one node, then whole nodes). ``partner`` names the job sharing the same GPUs (packing), else None; in a
    group of three (``IlpConfig.max_group_size=3``) ``partners`` names both others and ``partner`` the first.
    ``expected_goodput`` is the job's own goodput in samples/s, including its co-location ratio if packed.
    """

    job: str
    gpu_type: str
    num_gpus: int
    batch_size: int
    partner: str | None = None
    expected_goodput: float = 0.0
    num_nodes: int = 1
    partners: tuple[str, ...] = ()

    @property
    def others(self) -> tuple[str, ...]:
        """Every other job on the same GPUs: ``partners`` for a group of three, else ``(partner,)`` or ()."""
        if self.partners:
            return self.partners
        return (self.partner,) if self.partner is not None else ()


@dataclass(frozen=True)
class SolverInfo:
    """How the decision was reached. ``status`` is the solver's word ("Optimal", "TimeLimit", ...).

    ``fallback`` is None when the solver's answer was used, "incumbent" when a time-limited run's best
    feasible solution was used, "greedy" when the greedy allocation replaced a failed solve.
    ``bound`` and ``gap`` are the solver's best bound and relative gap when it reports them.
    """

    name: str
    status: str
    objective: float
    time_s: float
    bound: float | None = None
    gap: float | None = None
    fallback: str | None = None
    num_variables: int = 0
    num_constraints: int = 0


@dataclass(frozen=True)
class RoundDecision:
    """A policy's answer for one round."""

    allocations: tuple[Allocation, ...]
    unallocated: tuple[str, ...]
    objective: float
    solver: SolverInfo

    def by_job(self) -> dict[str, Allocation]:
        return {a.job: a for a in self.allocations}

    def gpus_used(self) -> dict[str, int]:
        """GPUs used per type, a packed pair counted once."""
        used: dict[str, int] = {}
        for a in self.allocations:
            if any(other < a.job for other in a.others):
                continue  # the group was counted with its first member
            used[a.gpu_type] = used.get(a.gpu_type, 0) + a.num_gpus
        return used


@dataclass(frozen=True)
class RoundContext:
    """What the caller knows this round.

    ``goodput`` answers throughput/goodput questions (:class:`scheduler.model.goodput.GoodputModel`);
    ``colocation`` holds pair ratios (None: no packing possible); ``previous_placement`` is last round's
    placement so the placement stage can keep jobs where they were; ``calibration_slowdown``: the factor by
    which each application runs slower than its profile says (the simulator's Sia calibration; Gavel's LP
    divides throughputs by it, as Sia's simulator does).
    """

    goodput: "GoodputModel"
    time_s: float = 0.0
    colocation: "ColocationTable | None" = None
    previous_placement: "Placement | None" = None
    round_duration_s: float = 60.0
    calibration_slowdown: Mapping[str, float] | None = None


@dataclass(frozen=True)
class PolicyTraits:
    """What a policy declares about itself; the simulator and the server read these, never probe for them.

    ``adaptive``: it chooses GPU counts and batch sizes (Sia's jobs) rather than running jobs as submitted.
    ``max_group_size``: jobs that may share one GPU group (1: no packing). ``splits_across_nodes``: a rigid
    job may be placed on GPUs of several nodes in any layout (Sia's Gavel mechanism,
    :func:`scheduler.model.placement.place` with ``split=True``). ``max_slowdown``: the slowdown bound it keeps
    for members of a group (``IlpConfig.max_slowdown``; None: it keeps none — the simulator then measures its
    groups against the cluster-wide default).
    """

    adaptive: bool = False
    max_group_size: int = 1
    splits_across_nodes: bool = False
    max_slowdown: float | None = None


@runtime_checkable
class Policy(Protocol):
    """Every scheduling policy (the packing ILP, Sia without packing, baselines) implements this."""

    @property
    def name(self) -> str:
        """The policy's registry name (a plain class attribute or a frozen dataclass field satisfies this)."""
        ...

    @property
    def traits(self) -> PolicyTraits:
        """What the policy is (adaptive, how many jobs share a GPU group, how its jobs are placed)."""
        ...

    def allocate(self, jobs: Sequence["Job"], cluster: "Cluster", context: RoundContext) -> RoundDecision:
        """Decide every job's GPU type, GPU count, batch size and partner for this round."""
        ...


class InvalidDecision(AssertionError):
    """A decision breaks an invariant. Raised explicitly (never by ``assert``, which ``python -O`` strips);
    an AssertionError subclass so callers that catch broken invariants keep working."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise InvalidDecision(message)


def check_decision(decision: RoundDecision, jobs: Sequence["Job"], cluster: "Cluster") -> None:
    """Raise :class:`InvalidDecision` if ``decision`` breaks an invariant (capacity, one choice per job, pairing)."""
    names = [j.name for j in jobs]
    alloc = decision.by_job()
    _require(len(alloc) == len(decision.allocations), "a job has two allocations")
    seen = set(alloc) | set(decision.unallocated)
    _require(len(decision.unallocated) == len(set(decision.unallocated)), "a job is unallocated twice")
    _require(not (set(alloc) & set(decision.unallocated)), "a job is both allocated and unallocated")
    _require(seen == set(names), f"jobs missing or unknown: {sorted(seen ^ set(names))}")
    for a in decision.allocations:
        _require(a.gpu_type in cluster, f"{a.job}: unknown GPU type {a.gpu_type}")
        _require(a.num_gpus >= 1, f"{a.job}: {a.num_gpus} GPUs")
        group = {a.job, *a.others}
        _require(len(group) == len(a.others) + 1 and len(group) <= 3, f"{a.job}: bad group {sorted(group)}")
        for other in a.others:
            b = alloc.get(other)
            if b is None or {b.job, *b.others} != group:
                raise InvalidDecision(f"{a.job}: partner {other} is not paired back")
            _require((b.gpu_type, b.num_gpus) == (a.gpu_type, a.num_gpus), f"{a.job}: group configs differ")
    for gpu_type, used in decision.gpus_used().items():
        cap = cluster.capacity(gpu_type)
        _require(used <= cap, f"{gpu_type}: {used} GPUs used > capacity {cap}")
