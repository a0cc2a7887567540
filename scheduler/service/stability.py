"""How ``colocate serve`` holds its decisions and shares GPUs fairly: one frozen config and the rules using it.

A live round differs from a simulated one: a restart costs real seconds (process start, model build,
checkpoint restore) that no goodput estimate shows, and a round may come before a job that just started has
run a step. Four rules keep decisions stable (docs/serve-live.md):

1. **Minimum run.** A job that (re)started keeps its allocation (the policy sees it *pinned*) until it has run
   ``min_run_s`` and is past its warm-up; by default ``min_run_s = max(round_s, 3 × start-up)``, the start-up
   being the measured time from a group's start to its job's first measured steps (per application). The
   members of a pair measured to hurt are not held (:func:`hurting_members`): it is split at once.
2. **A change must pay for its restarts.** Every job a change moves pays Sia's restart factor
   ``max(T − N·S, 0) / (T + S)`` (T: seconds since its first start, N: its restarts, S: the restart cost);
   a stopped job pays it again to resume (at least ``resume_floor``, so idle GPUs are still used); a new
   partner restarts every member of the group (serve starts a group whole), so each member pays it, and so
   does a member left alone on its GPU when its group is split.
3. **Ties keep what runs.** A running job's current configuration counts ``1 + keep_bonus`` times its goodput.
4. **A new batch pays for its restarts** too (:mod:`scheduler.service.batch_hold`): on its current GPUs a running
   adaptive job keeps its batch unless the best batch's goodput gain pays for restarting its group.
5. **A job about to finish stays put** (:func:`finishing_groups`): a running job expected to end within two rounds
   (its remaining steps at its last measured rate) is held with its group, as in rule 1 (not in a group of three,
   which the ILP cannot keep with a held member); the simulator applies the same rule
   (:func:`scheduler.model.jobs.finishing`).

Rules 2-4 and fairness are knobs of the round ILP (:class:`scheduler.ilp.config.IlpConfig`) that a live scheduler
sets (:data:`scheduler.service.config.LIVE_ILP`).

Fairness: the round objective is Sia's ``Σ G^p`` with ``p = −0.5`` and a penalty ``λ`` per waiting job. With
``λ = 2`` (the serve default, Sia's simulator uses 1.1) allocating a waiting job gains ``λ − G^−0.5 ≥ 1``
while growing an allocated job gains ``1 − G^−0.5 < 1``: no adaptive job grows beyond its minimum while a job
that fits waits, so rigid jobs are never starved by adaptive ones (a pair counts as allocating both).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from common.bounds import check_number
from common.options import option
from common.safe_load import stored_json
from scheduler.model.colocation import ColocationTable
from scheduler.model.jobs import Job, finishing
from scheduler.service.state.store import JobRow


@dataclass(frozen=True)
class StabilityConfig:
    """How long a (re)started job keeps its allocation (rule 1). Rules 2-4 are the round ILP's own knobs, set for
    a live scheduler by :data:`scheduler.service.config.LIVE_ILP`."""

    min_run_s: float | None = option(None, "Seconds a (re)started job keeps its allocation.", flag="--min-run",
                                     show_default="max(--round-s, 3 x its measured start-up)")
    startup_factor: float = option(3.0, "A job runs at least this many times its measured start-up before it can "
                                        "be moved.", experimental=True)

    def __post_init__(self) -> None:
        if self.min_run_s is not None:
            check_number(self.min_run_s, field="min_run_s", low=0, high=86400, valid="seconds in [0, 86400]")
        check_number(self.startup_factor, field="startup_factor", low=0, high=100)

    def min_run(self, round_s: float, startup_s: float | None) -> float:
        """Seconds a (re)started job keeps its allocation."""
        if self.min_run_s is not None:
            return self.min_run_s
        return max(round_s, self.startup_factor * (startup_s or 0.0))


def pinned_jobs(running: Sequence[tuple[str, str, float, bool]], now: float, config: StabilityConfig,
                round_s: float, startups: Mapping[str, float], start_timeout_s: float) -> set[str]:
    """Jobs that must keep their allocation this round.

    ``running``: (job, application, when its current run started, whether it is past its warm-up). A job is
    held while it warms up (bounded by the start timeout: a hung start is not held forever) and until it has
    run its minimum time.
    """
    held = set()
    for name, app, since, warm in running:
        ran = now - since
        if ran < config.min_run(round_s, startups.get(app)) or (not warm and ran < start_timeout_s):
            held.add(name)
    return held


def remaining_s(row: JobRow) -> float | None:
    """Seconds a running job's remaining steps (or samples) take at its last measured rate; None before one.

    A job that reported its whole target has none left, rate or not (a short job may end before it was ever
    measured): it is finishing its epilogue (a last checkpoint, its results) and a change must not stop it."""
    if row.target and row.done >= row.target:
        return 0.0
    if not row.samples_per_s or not row.target:
        return None
    per_s = row.samples_per_s / max(row.batch_size or row.spec.batch_size, 1) if row.spec.steps else row.samples_per_s
    return max(row.target - row.done, 0) / per_s


def finishing_groups(rows: Sequence[JobRow], round_s: float) -> set[str]:
    """Running jobs expected to end within :data:`scheduler.model.jobs.FINISHING_ROUNDS` rounds (rule 5,
    :func:`scheduler.model.jobs.finishing`, the simulator's rule too), with every other member of their groups: the
    whole group keeps its placement, since serve restarts a group whole and a new partner or a split would restart
    the finishing job as well."""
    keys = {r.group_key for r in rows if r.group_key and finishing(remaining_s(r), round_s, 1 + len(r.others))}
    return {r.name for r in rows if r.group_key in keys}


def hurting_members(groups: Iterable[tuple[str, Sequence[Job]]], table: ColocationTable | None) -> set[str]:
    """Members of running groups ``(GPU type, members)`` that the round's table plans as infeasible — a pair
    measured to hurt (:func:`scheduler.learning.explore.hurts`). They are not held: the minimum run protects
    the cost of a start, not a group known to do less than one job alone, which is split in the round that
    learns it (held, two partners on one GPU would have no feasible column)."""
    out: set[str] = set()
    if table is None:
        return out
    for gpu_type, members in groups:
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                ratios = table.lookup(gpu_type, a, b)
                if ratios is not None and min(ratios) <= 0:
                    out.update(m.name for m in members)
    return out


def fold_startup(startups: dict[str, list[float]], app: str, seconds: float) -> None:
    """Fold one measured start-up into its application's running mean ``[mean, count]``."""
    mean, count = startups.get(app, [0.0, 0])
    startups[app] = [(mean * count + seconds) / (count + 1), count + 1]


def load_startups(text: str | None) -> dict[str, list[float]]:
    """The start-ups stored in the state's meta (a restarted server keeps what it measured)."""
    return {str(k): [float(v[0]), int(v[1])] for k, v in stored_json(text, dict).items()
            if isinstance(v, list) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v)}
