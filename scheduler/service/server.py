"""``colocate serve``: the round loop around the shared policy code, enacting each decision on an executor.

Every round (``round_s`` after the previous one's enacting ended):

1. **collect** — poll every live group (:meth:`Executor.poll`): fold progress into the jobs' rows, every
   measured iteration time into ``measurements`` (solo or next to its partner; :mod:`scheduler.learning`), and
   settle jobs that ended: completed (target reached), stopped (asked to, for a change: back to the queue,
   its checkpoint keeps its progress), cancelled, or crashed (retried up to the job's ``max_retries``, then
   failed with its last log line). A group whose runner is gone counts as a crash of its jobs.
2. **decide** — the policy (by name, from :mod:`scheduler.policies`) gets the active jobs, the cluster and
   the learned goodput model and colocation table; placement keeps running groups where they are. Jobs
   within their minimum run are held (:mod:`.stability`).
3. **enact the difference** — groups whose jobs keep exactly their GPUs, batch and partner go on untouched;
   the others are asked to stop (SIGTERM: checkpoint, exit) *in the background*: their GPUs count as busy
   until they are free, and a new group waiting for them starts as soon as they are (between rounds). A
   cancelled member of a pair is stopped alone; its partner runs on. Each waiting job's reason is stored
   (:mod:`.waiting`).

GPUs a round leaves idle may run an automatic probe of a never-measured job type (:mod:`.probes`; busy while it
runs, collected between rounds).

Every state change is one SQLite transaction (:mod:`.state`); groups run detached, so ``kill -9`` of the
server loses nothing, and a restarted server polls the stored groups and carries on (re-adoption).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

from scheduler.executor.base import Executor, GroupPoll
from scheduler.executor.job_files import checked_files
from scheduler.learning import gradient_noise
from scheduler.learning.measured import learned_ratios
from scheduler.learning.online import LearnedGoodputModel, policy_table, round_job_types
from scheduler.model.cluster import Cluster
from scheduler.model.colocation import ColocationTable
from scheduler.model.goodput import GoodputModelBase
from scheduler.model.jobs import Job
from scheduler.service import admission, contract, rounds, settle, waiting
from scheduler.service.batch_hold import HeldBatchModel, batch_holds
from scheduler.service.config import ServeConfig
from scheduler.service.groups import StartRetries, owner_planning, remove_group_files
from scheduler.service.probes.manager import ProbeManager, probing_enabled
from scheduler.service.rounds import RoundStats
from scheduler.service.stability import finishing_groups, fold_startup, hurting_members, load_startups, pinned_jobs
from scheduler.service.state import health
from scheduler.service.state import lock as server_lock
from scheduler.service.state.rows import GroupRecord
from scheduler.service.state.store import CANCELLED, QUEUED, RUNNING, JobRow, StateStore, Transaction
from scheduler.sim.job_state import cluster_bound

BAD_FILE_GRACE_S = 2.0  # how long a job's records may stay unreadable before it misbehaves


class Server:
    """One scheduler instance over one state directory."""

    def __init__(self, state: StateStore, cluster: Cluster, executor: Executor, config: ServeConfig = ServeConfig(),
                 *, profiles: GoodputModelBase | None = None, colocation: ColocationTable | None = None) -> None:
        from scheduler.policies import make_policy, policy_spec

        self.state, self.cluster, self.executor, self.config = state, cluster, executor, config
        self.profiles, self.colocation = profiles, colocation
        # what a restart costs when a batch change must pay for one: the ILP's S, whatever the policy
        self._restart_cost_s = config.ilp.restart_cost_s
        self.policy = make_policy(config.policy, ilp=config.ilp if policy_spec(config.policy).solves_ilp else None)
        self.runs = state.dir / "runs"
        self.runs.mkdir(exist_ok=True)
        self._lock: Any = None  # the open lock file, held for the server's lifetime
        self._stopping: dict[str, float] = {}  # groups this server asked to stop -> when to kill them
        self._pending: tuple[rounds.Unit, ...] = ()  # decided units waiting for GPUs still being freed
        self.retries = StartRetries()  # jobs whose group the backend could not start: tried again after a backoff
        self._unstarted: dict[str, str] = {}  # groups the backend has not started yet (Slurm's queue) -> why
        self._queued_at: dict[str, float] = {}  # such groups -> when last seen waiting there
        self._startups = load_startups(state.meta("startup_s"))  # application -> [mean start-up s, count]
        self._startups_changed = False
        self.on_round_end: Callable[[Server, RoundStats], None] | None = None  # e.g. metrics
        self.on_round_failed: Callable[[Server], None] | None = None  # a round's error was logged and recorded
        self.idle: Callable[[float], None] = time.sleep  # the wait between rounds: the API's calls run in it
        self._watch = health.DatabaseWatch(state.path)  # the database file this server opened
        self.probes: ProbeManager | None = None  # automatic probes (:mod:`.probes`), made by acquire()
        self._recorded: set[tuple[str, str, str]] = set()  # set-aside rows already recorded as events
        # job -> when its files were first seen bad: still bad BAD_FILE_GRACE_S later is misbehaviour (a first bad
        # look may be a record caught half written by a command that does not write it atomically)
        self._bad_look: dict[str, float] = {}
        self._memory = contract.memory_records(state)  # job -> what its out-of-memory failures taught
        self.splits = 0  # groups this server split because a member was measured past its slowdown bound
        self.ooms_at_start = contract.oom_totals(self._memory)  # the metrics count those after this
        # the slowdown a member accepts unless it says otherwise: the policy's own bound, else the cluster's
        self._default_bound = cluster_bound(self.policy, config.ilp.max_slowdown)
        self.owners = owner_planning(cluster, config, executor.name)  # how jobs of several owners may share

    # -- lifetime ----------------------------------------------------------------------------------------
    def acquire(self, lock: Any = None) -> None:
        """One server per state directory (:mod:`.lock`; ``lock``: taken already, before anything was written)."""
        self._lock = lock if lock is not None else server_lock.take(self.state.dir)
        if probing_enabled(self.config.probe, self.config.device):
            self.probes = ProbeManager(self.state, self.cluster, self.executor, self.config.probe,
                                       device=self.config.device, sharing=self.config.sharing,
                                       threads=self.config.threads, python=self.config.python)
        adopted = self.state.groups()
        with self.state.transaction() as db:
            db.set_meta("server_pid", str(os.getpid()))
            db.event(None, "server-started", f"pid {os.getpid()}, {len(adopted)} group(s) to re-adopt")

    def serve(self, should_stop: Callable[[], bool], max_rounds: int | None = None,
              on_round: Callable[[RoundStats], None] | None = None) -> None:
        """Run rounds until ``should_stop()`` (checked often) or ``max_rounds`` (it returns once the last one ends).
        Before each round the state database must still be the file this server opened (:mod:`.state.health`)."""
        done = 0
        while not should_stop():
            self._watch.check()
            stats = admission.guarded_round(self.round, self.state)
            done += 1
            if stats is None and self.on_round_failed is not None:
                self.on_round_failed(self)
            if on_round is not None and stats is not None:
                on_round(stats)
            if max_rounds is not None and done >= max_rounds:
                return
            ended = time.monotonic()  # the next round comes round_s after this one's enacting ended
            while not should_stop() and time.monotonic() - ended < self.config.round_s:
                self.between_rounds()
                self.idle(0.25)

    def between_rounds(self) -> None:
        """While stopped groups (or probes) free their GPUs: collect them, and start the units that waited."""
        if self.probes is not None and self.probes.running():
            self.probes.poll()
        if not self._stopping and not self._pending:
            return
        self.collect()
        self._reap_overdue()
        self._start_pending()

    # -- one round ---------------------------------------------------------------------------------------
    def round(self) -> RoundStats:
        from scheduler.model.placement import place
        from scheduler.model.policy import RoundContext

        began, began_cpu = time.perf_counter(), time.process_time()
        self.collect()
        self._reap_overdue()
        # the last round's decision first: units that waited for GPUs this collect freed start before the round
        # re-plans, as between rounds. Re-planned instead, a job stopped for a change would pay its restart a
        # second time (it counts as resumed) and the change it was stopped for could be reversed.
        early = self._start_pending()
        self._cancel_queued()
        everyone = self.state.jobs()
        leaving = self._stop_cancelled_members(everyone)
        active = rounds.without(
            [r for r in everyone if r.state in (QUEUED, RUNNING) and not r.cancel_requested], leaving)
        rows = admission.screen(self.state, active, self.cluster)  # invalid jobs fail, infeasible ones wait
        kept = {r.name for r in rows}
        held_back = [r for r in active if r.name not in kept and r.state == QUEUED and not r.invalid]
        model, table, measurements = self.learned(everyone)
        now = time.time()
        previous = rounds.current_placement(rows)
        breaks = contract.broken_bounds(self._running_groups(rows), measurements, self._default_bound, model.solo_time)
        planned = contract.planned_memory(rows, self.cluster.type_names, self._memory)
        policy_jobs = rounds.policy_jobs(rows, now, self._held(rows, now, table, set(breaks)), planned,
                                         owners=self.owners.rule.restricts)
        context = RoundContext(goodput=self._batches_held(model, policy_jobs, rows), time_s=now,
                               colocation=self.owners.table(table),
                               previous_placement=previous, round_duration_s=self.config.round_s)
        decided, decided_cpu = time.perf_counter(), time.process_time()
        decision = self.policy.allocate(policy_jobs, self.cluster, context) if rows else None
        policy_s, policy_cpu = time.perf_counter() - decided, time.process_time() - decided_cpu
        placement = place(decision, self.cluster, previous) if decision else None
        desired = rounds.desired_units(decision, placement) if decision and placement else []
        current = rounds.current_units(rounds.without(everyone, leaving))
        plan = rounds.plan_changes(current, desired, set(self._stopping))
        enacting, enacting_cpu = time.perf_counter(), time.process_time()
        self._record_splits([b for k in plan.stop if k not in self._stopping for b in breaks.get(k, ())])
        self.request_stops(tuple(k for k in plan.stop if k not in self._stopping))
        started, self._pending = self.start_units(plan.start)
        started += early
        if self.probes is not None:  # GPUs this round left idle may measure a never-measured job type
            self.probes.poll()
            taken = self._group_gpus().union(*(rounds.unit_gpus(u) for u in self._pending))
            self.probes.after_round(self.state.jobs(), table, taken)
        enact_s, enact_cpu = time.perf_counter() - enacting, time.process_time() - enacting_cpu
        reasons = waiting.reasons([*rows, *held_back], self.cluster, decision, placement, self._pending, table, policy_jobs,
                                  self.policy, model=context.goodput)
        number = (self.state.meta_value("rounds") or 0) + 1  # a damaged counter is set aside and restarts
        total, total_cpu = time.perf_counter() - began, time.process_time() - began_cpu
        with self.state.transaction() as db:
            admission.record_set_aside(db, self.state.set_aside, self._recorded)
            db.set_meta("rounds", str(number))
            db.set_meta("heartbeat", str(time.time()))
            db.set_meta("last_round", f"{total:.4f} s total, {policy_s:.4f} s policy, {enact_s:.4f} s enacting")
            db.set_meta("round_s", f"{total:.6f}")
            db.set_meta(health.IN_A_ROW, "0")  # rounds no longer fail
            db.set_meta(waiting.META_KEY, waiting.dumps({**reasons, **self.retries.reasons(rows, self._unstarted)}))
            db.set_meta(contract.SOLO_KEY, json.dumps(contract.solo_estimates(rows, measurements, model.solo_time)))
        stats = RoundStats(number, len(rows), total, policy_s, total - policy_s - enact_s, enact_s, len(plan.stop),
                           started, policy_cpu, total_cpu - policy_cpu - enact_cpu, len(self._pending))
        if self.on_round_end is not None:
            self.on_round_end(self, stats)
        return stats

    def _held(self, rows: list[JobRow], now: float, table: ColocationTable | None, breaking: set[str]) -> set[str]:
        """Running jobs within their minimum run (or still warming up): the policy keeps them where they are,
        unless their group is now known to hurt (``table`` plans it infeasible) or was measured to break a
        member's slowdown bound (``breaking``: group keys, :func:`contract.broken_bounds`)."""
        groups = self.state.groups()
        live = [r for r in rows if r.state == RUNNING and r.group_key in groups and r.group_key not in self._stopping
                and r.group_key not in breaking]
        # a group waiting in the backend's queue is held there; its run counts from when it left the queue
        running = [(r.name, r.spec.app, max(groups[r.group_key].created_at, self._queued_at.get(r.group_key or "", 0.0)),
                    r.sample_step is not None) for r in live]
        startups = {app: mean for app, (mean, _) in self._startups.items()}
        held = pinned_jobs(running, now, self.config.stability, self.config.round_s, startups,
                           self.config.start_timeout_s) | finishing_groups(live, self.config.round_s)
        members: dict[str, list[JobRow]] = {}
        for r in live:
            if r.name in held and r.others:
                members.setdefault(r.group_key or "", []).append(r)
        shared = [(g[0].gpu_type or "", [Job(r.name, r.spec.app, batch_size=r.batch_size) for r in g])
                  for g in members.values()]
        return held - hurting_members(shared, table)

    def _running_groups(self, rows: list[JobRow]) -> dict[str, list[JobRow]]:
        """Running groups the server is not stopping: key -> members."""
        groups: dict[str, list[JobRow]] = {}
        for r in rows:
            if r.state == RUNNING and r.group_key and r.group_key not in self._stopping:
                groups.setdefault(r.group_key, []).append(r)
        return groups

    def _record_splits(self, broken: list[contract.BrokenBound]) -> None:
        """The reason a group measured to break a member's bound is stopped (its members restart apart)."""
        if broken:
            with self.state.transaction() as db:
                for b in broken:
                    db.event(b.job, "split", b.text())
            self.splits += len({b.group for b in broken})

    def _batches_held(self, model: LearnedGoodputModel, jobs: list[Job], rows: list[JobRow]) -> HeldBatchModel:
        """The round's goodput model with running jobs' batches kept unless a change pays (:mod:`.batch_hold`)."""
        live = [r for r in rows if r.state == RUNNING and r.group_key not in self._stopping]
        holds = batch_holds(jobs, {r.name: r.batch_size for r in live if r.batch_size},
                            {r.name: r.others for r in live}, self._restart_cost_s, self.config.ilp.keep_bonus)
        return HeldBatchModel(model, holds)

    def _stop_cancelled_members(self, everyone: list[JobRow]) -> set[str]:
        """Cancelled running jobs: a whole group is stopped; a member of a pair is stopped alone (its partner
        runs on, untouched). Returns the members leaving their groups this way."""
        from scheduler.executor.supervise import request_job_stop

        by_group: dict[str, list[JobRow]] = {}
        for r in everyone:
            if r.state == RUNNING and r.group_key:
                by_group.setdefault(r.group_key, []).append(r)
        leaving: set[str] = set()
        for key, members in by_group.items():
            cancelled = [r for r in members if r.cancel_requested]
            if not cancelled or key in self._stopping:
                continue
            if len(cancelled) == len(members):
                self.request_stops((key,))
                continue
            for r in cancelled:
                request_job_stop(self._job_dir(r.name))
                leaving.add(r.name)
        return leaving

    def _start_pending(self) -> int:
        """Start the units a past round decided whose GPUs are free now; how many started."""
        started, self._pending = self.start_units(self._pending) if self._pending else (0, ())
        return started

    def _job_dir(self, name: str) -> Any:
        from scheduler.service.groups import job_dir

        return job_dir(self.state.dir, name)

    def learned(self, rows: list[JobRow]) -> tuple[LearnedGoodputModel, ColocationTable | None, list[dict[str, Any]]]:
        """The goodput model and colocation table of this round, measurements on top of the priors (the table
        carries the pairs' measured ratios too, for the slowdown bounds: :func:`contract.measured_table`), and the
        measurements they came from. Jobs that report gradient statistics get the efficiency they measure."""
        measurements = self.state.measurements()
        gradients = {job: gradient_noise.from_row(r) for job, r in self.state.gradients().items()}
        model = LearnedGoodputModel(measurements, {r.name: r.spec for r in rows}, base=self.profiles, gradients=gradients)
        active = [r for r in rows if r.state in (QUEUED, RUNNING)]
        types = round_job_types(self.cluster.type_names, [(r.spec.app, r.batch_size) for r in active])
        # unknown pairs are explored only while the jobs ask for the whole cluster (scheduler.learning.explore)
        table = policy_table(self.colocation, learned_ratios(measurements, model), types,
                             demands=[r.spec.min_gpus for r in active], gpus=self.cluster.total_gpus)
        return model, contract.measured_table(table, measurements, model.solo_time), measurements

    def _cancel_queued(self) -> None:
        names = self.state.cancel_requested(QUEUED)
        if not names:
            return
        with self.state.transaction() as db:
            for name in names:
                db.update_job(name, state=CANCELLED, finished_at=time.time())
                db.event(name, "cancelled", "while queued")

    # -- collecting --------------------------------------------------------------------------------------
    def collect(self) -> None:
        """Poll every live group; settle ended jobs; release groups whose jobs all ended (one transaction).

        A poll's job files were read bounded and are checked (:mod:`scheduler.executor.job_files`): a job with bad
        files misbehaves (stopped, counted as a crash). A running job whose group record is gone (set aside as
        damaged) crashed too: it is retried in a new group, which fences any copy still running. A group whose
        members' rows are all set aside is stopped (nothing could settle it); its GPUs stay busy until it ends."""
        groups = self.state.groups()
        polls = {key: self.executor.poll(g.handle, g.doc) for key, g in groups.items()}
        self._unstarted = {k: p.unstarted for k, p in polls.items() if p is not None and p.alive and p.unstarted}
        self._queued_at.update(dict.fromkeys(self._unstarted, time.time()))  # its start-up counts from after this
        rows = {r.name: r for r in self.state.jobs()}
        orphans = [r for r in rows.values() if r.state == RUNNING and r.group_key not in groups]
        if not groups and not orphans:
            return
        unreadable = tuple(k for k, g in groups.items() if not any(n in rows for n in g.jobs) and k not in self._stopping)
        if unreadable:
            self.request_stops(unreadable)
        finished: list[str] = []
        with self.state.transaction() as db:
            for key, group in groups.items():
                if self._collect_group(db, key, group, polls[key], rows, key in self._stopping):
                    db.drop_group(key)
                    finished.append(key)
            for row in orphans:
                settle.crashed(db, row, "its group's record is missing or was set aside")
            if self._startups_changed:
                db.set_meta("startup_s", json.dumps(self._startups))
                self._startups_changed = False
        for key in finished:
            self._stopping.pop(key, None)
            self._queued_at.pop(key, None)
            self.executor.release(groups[key].handle, groups[key].doc)

    def _collect_group(self, db: Transaction, key: str, group: GroupRecord, poll: GroupPoll | None,
                       rows: dict[str, JobRow], stopping: bool) -> bool:
        """Fold one group's poll into its jobs' rows; True when every member has ended.

        A group asked to stop that vanished without exit records (killed before its supervisor could
        handle the signal, or after the grace) was stopped, not crashed: its jobs keep their checkpoints.
        A group the backend ended itself (``poll.ended_by``: a Slurm time limit, an administrator's scancel)
        crashed with the backend's reason, even where its jobs checkpointed on the way out.
        """
        ended: list[str] = []
        ended_by = poll.ended_by if poll is not None and not stopping else None
        members = [n for n in group.jobs if n in rows]
        limits = {j.name: j.memory_limit_bytes for j in group.doc.jobs}
        if not members:  # every member's row is set aside: nothing can settle it, so it stops (GPUs busy till then)
            return poll is None or not poll.alive
        if poll is not None and poll.unstarted:  # not started by the backend: nothing ran, nothing to settle
            mine = [n for n in members if rows[n].state == RUNNING and rows[n].group_key == key]
            if not poll.alive:
                self.retries.requeue(db, mine, poll.unstarted, failed=not stopping)
            return not poll.alive
        for name in members:
            reported = poll.jobs.get(name) if poll is not None else None
            files = checked_files(reported) if reported is not None else {}
            row = rows[name]
            if row.state != RUNNING or row.group_key != key:
                ended.append(name)
                continue
            first_bad = self._bad_look.setdefault(name, time.monotonic()) if files.get("problem") else None
            if first_bad is not None and time.monotonic() - first_bad < BAD_FILE_GRACE_S:
                continue  # looked at mid-write, perhaps: judged again at a later look
            if files.get("problem"):  # still bad: it misbehaves, stopped alone and counted as a crash
                self._bad_look.pop(name, None)
                db.event(row.name, "bad-file", files["problem"][:1000])
                settle.crashed(db, row, f"misbehaved: {files['problem']}"[:1000])
                if len(members) > 1:  # alone, its group is released (killed) once this collect drops it
                    admission.stop_member(self._job_dir(name))
                ended.append(name)
                continue
            self._bad_look.pop(name, None)
            if row.sample_step is None and settle.fold_progress(db, row, files.get("progress"), rows):
                began = max(group.created_at, self._queued_at.get(key, 0.0))  # not the time in Slurm's queue
                fold_startup(self._startups, row.spec.app, time.time() - began)  # first warm steps
                self._startups_changed = True
            elif row.sample_step is not None:
                settle.fold_progress(db, row, files.get("progress"), rows)
            lingering = settle.finished_but_lingering(db, row, files.get("progress"), self.config.stop_grace_s)
            if files.get("exit") is None and lingering:
                settle.ended(db, row, {"returncode": 0, "stop_requested": False}, files.get("progress"), self._memory)
                ended.append(name)
            elif files.get("exit") is not None and ended_by and files["exit"].get("stop_requested") and not (
                    row.cancel_requested or (files.get("progress") or {}).get("state") == "finished"):
                settle.crashed(db, row, ended_by)
                ended.append(name)
            elif files.get("exit") is not None:
                gpu = self.cluster[row.gpu_type].memory_gb if row.gpu_type in self.cluster.type_names else None
                settle.ended(db, row, files["exit"], files.get("progress"), self._memory, files.get("oom"),
                             limits.get(name), gpu)
                ended.append(name)
            elif (poll is None or not poll.alive) and (stopping or row.cancel_requested):  # cancelled, not crashed
                settle.ended(db, row, {"returncode": None, "stop_requested": True}, files.get("progress"), self._memory)
                ended.append(name)
            elif poll is None or not poll.alive:
                settle.crashed(db, row, ended_by or "its group is gone (supervisor, runner or node died)")
                ended.append(name)
        alone = [n for n in members if n not in ended]
        if ended:
            for name in alone:  # a member ended: the survivors share these GPUs with fewer jobs (or none)
                db.update_job(name, partner=",".join(o for o in rows[name].others if o in alone) or None)
        return not alone

    # -- enacting ----------------------------------------------------------------------------------------
    def request_stops(self, keys: tuple[str, ...]) -> None:
        """Ask groups to stop (SIGTERM: checkpoint, exit) and return at once; :meth:`collect` settles them and
        :meth:`_reap_overdue` kills those still there after the grace. Their GPUs stay busy until then."""
        groups = self.state.groups()
        for key in keys:
            if key in groups and key not in self._stopping:
                self._stopping[key] = time.monotonic() + self.config.stop_grace_s + 15.0
                self.executor.stop(groups[key].handle, groups[key].doc)

    def stop_groups(self, keys: tuple[str, ...]) -> None:
        """Stop groups and wait until each has ended (or was killed after the grace): for shutdown and tests."""
        self.request_stops(keys)
        while set(keys) & set(self.state.groups()):
            self.collect()
            self._reap_overdue()
            time.sleep(0.2)

    def _reap_overdue(self) -> None:
        """Groups past their stop grace are killed and count as stopped (their jobs keep their checkpoints)."""
        now, groups = time.monotonic(), self.state.groups()
        overdue = [k for k, deadline in self._stopping.items() if now > deadline and k in groups]
        for key in overdue:
            self.executor.release(groups[key].handle, groups[key].doc)
            self._stopping[key] = now + 5.0  # collect sees it gone (a stopped group, not a crash)
        self._stopping = {k: d for k, d in self._stopping.items() if k in groups}

    def _group_gpus(self) -> set[tuple[str, int, int]]:
        """The GPUs every live group holds, by its own record: busy even where its members' rows are set aside."""
        return {gpu for group in self.state.groups().values() for gpu in group.gpus}

    def start_units(self, units: tuple[rounds.Unit, ...]) -> tuple[int, tuple[rounds.Unit, ...]]:
        """Start the units whose members wait and whose GPUs are free; returns how many started, and the
        units that wait for GPUs still held by a stopping group (or for a member still stopping)."""
        started, deferred = 0, []
        everyone = self.state.jobs()
        rows = {r.name: r for r in everyone}
        busy = rounds.busy_gpus(everyone) | self._group_gpus() | (self.probes.busy() if self.probes is not None else set())
        for unit in units:
            if any(rows[s.job].cancel_requested or rows[s.job].state not in (QUEUED, RUNNING) for s in unit):
                continue  # cancelled or ended meanwhile: the next round decides again
            if self.retries.waiting([s.job for s in unit]):
                continue  # its last start failed: tried again after its backoff (its waiting reason says when)
            if any(rows[s.job].state == RUNNING for s in unit) or rounds.unit_gpus(unit) & busy:
                deferred.append(unit)
                continue
            started += self._start_unit(unit, rows)
            busy |= rounds.unit_gpus(unit)
        return started, tuple(deferred)

    def _start_unit(self, unit: rounds.Unit, rows: dict[str, JobRow]) -> int:
        from scheduler.service.groups import build_group, group_document, group_sharing, last_group_number

        with self.state.transaction() as db:
            number = last_group_number(self.state) + 1
            db.set_meta("groups", str(number))
        key = f"g{number:05d}"
        try:
            # built outside any transaction (job directories, the executor's modules on a first start):
            # submitters and readers never wait behind it; a server killed here only skipped a group number
            with admission.unit_problems():  # a job its group cannot be built for fails, not the server
                group = build_group(unit, rows, self.config, self.owners)
                limits = contract.unit_limits(unit, rows, self.cluster[unit[0].gpu_type].memory_gb, self._memory,
                                              self.config.ilp.context_memory_gb)
                doc = group_document(key, group, rows, self.config, self.state.dir, limits,
                                     group_sharing(unit, rows, self.config, self.owners)[1])
            with self.state.transaction() as db:
                db.put_group(key, self.executor.name, {"doc": doc.to_dict(), "handle": {}}, [s.job for s in unit])
                for slot in unit:
                    before = rows[slot.job]
                    db.update_job(slot.job, state=RUNNING, group_key=key, gpu_type=slot.gpu_type,
                                  num_gpus=slot.num_gpus, batch_size=slot.batch_size, partner=slot.partner,
                                  nodes=slot.nodes, gpus=slot.gpus, started_at=before.started_at or time.time(),
                                  sample_step=None, sample_elapsed=None, samples_per_s=None,
                                  error="")  # a restarted job's last crash or OOM is in its events, not its row
                    db.event(slot.job, rounds.change_kind(slot, before), rounds.describe(slot, key))
        except admission.UnitProblem as problem:
            admission.fail_unit(self.state, [s.job for s in unit], problem.error)
            return 0
        try:
            handle = self.executor.start(group, doc)
        except Exception as err:  # the backend could not start it: back to the queue, not a crash; tried later
            remove_group_files(self.runs, key)
            with self.state.transaction() as db:
                db.drop_group(key)
                self.retries.requeue(db, [s.job for s in unit], f"{type(err).__name__}: {err}")
            return 0
        self.retries.started([s.job for s in unit])
        with self.state.transaction() as db:
            db.put_group(key, self.executor.name, {"doc": doc.to_dict(), "handle": handle}, [s.job for s in unit])
        return 1
