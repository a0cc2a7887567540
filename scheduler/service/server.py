"""``colocate serve``: the round loop around the shared policy code, enacting each decision on an executor.

Every round (``round_s`` apart):

1. **collect** — poll every live group (:meth:`Executor.poll`): fold progress into the jobs' rows, every
   measured iteration time into ``measurements`` (solo or next to its partner; :mod:`.learning`), and
   settle jobs that ended: completed (target reached), stopped (asked to, for a change: back to the queue,
   its checkpoint keeps its progress), cancelled, or crashed (retried up to the job's ``max_retries``, then
   failed with its last log line). A group whose runner is gone counts as a crash of its jobs.
2. **decide** — the policy (by name, from :mod:`scheduler.policies`) gets the active jobs, the cluster and
   the learned goodput model and colocation table; placement keeps running groups where they are.
3. **enact the difference** — groups whose jobs keep exactly their GPUs, batch and partner go on untouched;
   the others are stopped (SIGTERM: checkpoint, exit) and waited for; then new groups start, data-parallel
   over their GPUs, pairs sharing them (MPS when asked).

Every state change is one SQLite transaction (:mod:`.state`); groups run detached, so ``kill -9`` of the
server loses nothing, and a restarted server polls the stored groups and carries on (re-adoption).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.errors import InputError
from scheduler.executor.base import Executor
from scheduler.formats.colocation_table import load_colocation_table
from scheduler.formats.profiles import load_goodput_model
from scheduler.model.cluster import Cluster
from scheduler.model.colocation import ColocationTable
from scheduler.model.goodput import GoodputModel
from scheduler.service import rounds
from scheduler.service.config import ServeConfig
from scheduler.service.learning import LearnedGoodputModel, job_type, learned_ratios, policy_table
from scheduler.service.state import CANCELLED, COMPLETED, FAILED, QUEUED, RUNNING, JobRow, StateStore

WARMUP_STEPS = 3  # steps of a fresh process not measured (the trainer's own warm-up)


@dataclass(frozen=True)
class RoundStats:
    """One round's timing: ``policy_s`` is the policy's own call, ``bookkeeping_s`` the rest but enacting."""

    round: int
    active_jobs: int
    total_s: float
    policy_s: float
    bookkeeping_s: float
    enact_s: float
    stopped: int
    started: int
    policy_cpu_s: float = 0.0  # CPU time of this process: what the figures are on a loaded machine
    bookkeeping_cpu_s: float = 0.0


class Server:
    """One scheduler instance over one state directory."""

    def __init__(self, state: StateStore, cluster: Cluster, executor: Executor, config: ServeConfig = ServeConfig(),
                 *, profiles: GoodputModel | None = None, colocation: ColocationTable | None = None) -> None:
        from scheduler.policies import make_policy

        self.state, self.cluster, self.executor, self.config = state, cluster, executor, config
        self.profiles, self.colocation = profiles, colocation
        try:
            self.policy = make_policy(config.policy, **config.policy_options)
        except TypeError as err:
            raise InputError(f"policy {config.policy!r} does not take these options ({err})", field="--policy",
                             valid="options only for the colocate and sia policies") from None
        self.runs = state.dir / "runs"
        self.runs.mkdir(exist_ok=True)
        self._lock: Any = None  # the open lock file, held for the server's lifetime
        self._stopping: set[str] = set()  # groups this server asked to stop

    # -- lifetime ----------------------------------------------------------------------------------------
    def acquire(self) -> None:
        """One server per state directory (the lock dies with the process, ``kill -9`` included)."""
        handle = open(self.state.dir / "server.lock", "w")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError("another colocate serve runs on this state directory", source=self.state.dir,
                             field="--state", valid="one server per state directory") from None
        self._lock = handle
        adopted = self.state.groups()
        with self.state.transaction() as db:
            db.set_meta("server_pid", str(os.getpid()))
            db.event(None, "server-started", f"pid {os.getpid()}, {len(adopted)} group(s) to re-adopt")

    def serve(self, should_stop: Callable[[], bool], max_rounds: int | None = None,
              on_round: Callable[[RoundStats], None] | None = None) -> None:
        """Run rounds until ``should_stop()`` (checked often) or ``max_rounds``."""
        done = 0
        while not should_stop() and (max_rounds is None or done < max_rounds):
            began = time.monotonic()
            stats = self.round()
            done += 1
            if on_round is not None:
                on_round(stats)
            while not should_stop() and time.monotonic() - began < self.config.round_s:
                time.sleep(0.1)

    # -- one round ---------------------------------------------------------------------------------------
    def round(self) -> RoundStats:
        from scheduler.model.placement import place
        from scheduler.model.policy import RoundContext

        began, began_cpu = time.perf_counter(), time.process_time()
        self.collect()
        self._cancel_queued()
        everyone = self.state.jobs()
        rows = [r for r in everyone if r.state in (QUEUED, RUNNING) and not r.cancel_requested]
        model, table = self.learned(everyone)
        now = time.time()
        previous = rounds.current_placement(rows)
        context = RoundContext(goodput=model, time_s=now, colocation=table, previous_placement=previous,
                               round_duration_s=self.config.round_s)
        policy_jobs = rounds.policy_jobs(rows, now)
        decided, decided_cpu = time.perf_counter(), time.process_time()
        decision = self.policy.allocate(policy_jobs, self.cluster, context) if rows else None
        policy_s, policy_cpu = time.perf_counter() - decided, time.process_time() - decided_cpu
        desired = rounds.desired_units(decision, place(decision, self.cluster, previous)) if decision else []
        plan = rounds.plan_changes(rounds.current_units(everyone), desired, set())
        enacting, enacting_cpu = time.perf_counter(), time.process_time()
        self.stop_groups(plan.stop)
        started = self.start_units(plan.start)
        enact_s, enact_cpu = time.perf_counter() - enacting, time.process_time() - enacting_cpu
        number = int(self.state.meta("rounds") or 0) + 1
        total, total_cpu = time.perf_counter() - began, time.process_time() - began_cpu
        with self.state.transaction() as db:
            db.set_meta("rounds", str(number))
            db.set_meta("heartbeat", str(time.time()))
            db.set_meta("last_round", f"{total:.4f} s total, {policy_s:.4f} s policy, {enact_s:.4f} s enacting")
        return RoundStats(number, len(rows), total, policy_s, total - policy_s - enact_s, enact_s, len(plan.stop),
                          started, policy_cpu, total_cpu - policy_cpu - enact_cpu)

    def learned(self, rows: list[JobRow]) -> tuple[LearnedGoodputModel, ColocationTable | None]:
        """The goodput model and colocation table of this round, measurements on top of the priors."""
        measurements = self.state.measurements()
        model = LearnedGoodputModel(measurements, {r.name: r.spec for r in rows}, base=self.profiles)
        return model, policy_table(self.colocation, learned_ratios(measurements, model))

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
        """Poll every live group; settle ended jobs; release groups whose jobs all ended (one transaction)."""
        groups = self.state.groups()
        if not groups:
            return
        polls = {key: self.executor.poll(g["handle"]["handle"], g["handle"]["doc"]) for key, g in groups.items()}
        rows = {r.name: r for r in self.state.jobs()}
        finished: list[str] = []
        with self.state.transaction() as db:
            for key, group in groups.items():
                if self._collect_group(db, key, group, polls[key], rows, key in self._stopping):
                    db.drop_group(key)
                    finished.append(key)
        for key in finished:
            self.executor.release(groups[key]["handle"]["handle"], groups[key]["handle"]["doc"])

    def _collect_group(self, db: Any, key: str, group: dict[str, Any], poll: Any, rows: dict[str, JobRow],
                       stopping: bool) -> bool:
        """Fold one group's poll into its jobs' rows; True when every member has ended.

        A group asked to stop that vanished without exit records (killed before its supervisor could
        handle the signal, or after the grace) was stopped, not crashed: its jobs keep their checkpoints.
        """
        ended: list[str] = []
        for name in group["jobs"]:
            files = (poll.jobs.get(name) if poll is not None else None) or {}
            row = rows[name]
            if row.state != RUNNING or row.group_key != key:
                ended.append(name)
                continue
            self._progress(db, row, files.get("progress"), rows)
            if files.get("exit") is None and self._finished_but_lingering(db, row, files.get("progress")):
                self._ended(db, row, {"returncode": 0, "stop_requested": False}, files.get("progress"))
                ended.append(name)
            elif files.get("exit") is not None:
                self._ended(db, row, files["exit"], files.get("progress"))
                ended.append(name)
            elif (poll is None or not poll.alive) and stopping:
                self._ended(db, row, {"returncode": None, "stop_requested": True}, files.get("progress"))
                ended.append(name)
            elif poll is None or not poll.alive:
                self._crashed(db, row, "its group is gone (supervisor, runner or node died)")
                ended.append(name)
        alone = [n for n in group["jobs"] if n not in ended]
        if ended:
            for name in alone:  # a member ended: the survivors share these GPUs with fewer jobs (or none)
                db.update_job(name, partner=",".join(o for o in rows[name].others if o in alone) or None)
        return not alone

    def _finished_but_lingering(self, db: Any, row: JobRow, progress: dict[str, Any] | None) -> bool:
        """A job that reported "finished" but has not exited within the grace (a hung process-group teardown)
        is complete: its group is then released (killed) so it does not hold its GPUs."""
        if not progress or progress.get("state") != "finished":
            return False
        if row.finished_at is None:
            db.update_job(row.name, finished_at=time.time())  # first seen finished; still running
            return False
        return time.time() - row.finished_at > self.config.stop_grace_s

    def _progress(self, db: Any, row: JobRow, progress: dict[str, Any] | None, rows: dict[str, JobRow]) -> None:
        if not progress:
            return
        step, elapsed = int(progress.get("step", 0)), float(progress.get("elapsed_s", 0.0))
        own = step - int(progress.get("restored_step", 0) or 0)
        fields: dict[str, Any] = {"step": step, "samples": int(progress.get("samples", 0) or 0)}
        if own >= WARMUP_STEPS:
            if (row.sample_step is not None and row.sample_elapsed is not None and step - row.sample_step >= 2
                    and elapsed > row.sample_elapsed):
                iter_time = (elapsed - row.sample_elapsed) / (step - row.sample_step)
                partner_type = group_type([rows[o] for o in row.others if o in rows])
                db.add_measurement(row.spec.app, row.gpu_type or "", row.num_gpus, row.batch_size or 0, partner_type,
                                   iter_time)
                fields["samples_per_s"] = (row.batch_size or 0) / iter_time
            if row.sample_step is None or step - row.sample_step >= 2:
                fields.update(sample_step=step, sample_elapsed=elapsed)
        db.update_job(row.name, **fields)

    def _ended(self, db: Any, row: JobRow, exit: dict[str, Any], progress: dict[str, Any] | None) -> None:
        finished = (progress or {}).get("state") == "finished" or (row.target and (row.done >= row.target)) or (
            exit.get("returncode") == 0 and not exit.get("stop_requested"))
        cleared = {"group_key": None, "sample_step": None, "sample_elapsed": None}
        if finished:
            db.update_job(row.name, state=COMPLETED, finished_at=time.time(), **cleared)
            db.event(row.name, "completed", f"step {(progress or {}).get('step', row.step)}")
        elif row.cancel_requested:
            db.update_job(row.name, state=CANCELLED, finished_at=time.time(), **cleared)
            db.event(row.name, "cancelled", f"at step {row.step}")
        elif exit.get("stop_requested"):
            db.update_job(row.name, state=QUEUED, restarts=row.restarts + 1, **cleared)
            db.event(row.name, "stopped", f"checkpointed at step {(progress or {}).get('step', row.step)}")
        else:
            self._crashed(db, row, f"exit status {exit.get('returncode')}: {exit.get('last_line', '')}")

    def _crashed(self, db: Any, row: JobRow, reason: str) -> None:
        crashes = row.crashes + 1
        cleared = {"group_key": None, "sample_step": None, "sample_elapsed": None}
        if crashes > row.spec.max_retries:
            db.update_job(row.name, state=FAILED, crashes=crashes, finished_at=time.time(), error=reason, **cleared)
            db.event(row.name, "failed", reason)
        else:
            db.update_job(row.name, state=QUEUED, crashes=crashes, error=reason, **cleared)
            db.event(row.name, "crashed", f"retry {crashes} of {row.spec.max_retries}: {reason}")

    # -- enacting ----------------------------------------------------------------------------------------
    def stop_groups(self, keys: tuple[str, ...]) -> None:
        """Ask the groups to stop, then wait (collecting) until each has ended or the grace is over."""
        if not keys:
            return
        groups = self.state.groups()
        self._stopping.update(keys)
        for key in keys:
            if key in groups:
                self.executor.stop(groups[key]["handle"]["handle"], groups[key]["handle"]["doc"])
        deadline = time.monotonic() + self.config.stop_grace_s + 15.0
        while time.monotonic() < deadline:
            self.collect()
            if not set(keys) & set(self.state.groups()):
                return
            time.sleep(0.2)
        for key, group in self.state.groups().items():  # past the grace: kill, count as stopped
            if key in keys:
                self.executor.release(group["handle"]["handle"], group["handle"]["doc"])
        self.collect()

    def start_units(self, units: tuple[rounds.Unit, ...]) -> int:
        started = 0
        rows = {r.name: r for r in self.state.jobs()}
        for unit in units:
            if any(rows[s.job].state != QUEUED or rows[s.job].cancel_requested for s in unit):
                continue  # a member did not stop in time, or was cancelled meanwhile: next round
            started += self._start_unit(unit, rows)
        return started

    def _start_unit(self, unit: rounds.Unit, rows: dict[str, JobRow]) -> int:
        from scheduler.service.groups import build_group, group_document

        with self.state.transaction() as db:
            number = int(self.state.meta("groups") or 0) + 1
            db.set_meta("groups", str(number))
            key = f"g{number:05d}"
            group = build_group(unit, rows, self.config)
            doc = group_document(key, group, rows, self.config, self.state.dir)
            db.put_group(key, self.executor.name, {"doc": doc, "handle": {}}, [s.job for s in unit])
            for slot in unit:
                before = rows[slot.job]
                db.update_job(slot.job, state=RUNNING, group_key=key, gpu_type=slot.gpu_type, num_gpus=slot.num_gpus,
                              batch_size=slot.batch_size, partner=slot.partner, nodes=slot.nodes, gpus=slot.gpus,
                              started_at=before.started_at or time.time(), sample_step=None, sample_elapsed=None)
                db.event(slot.job, rounds.change_kind(slot, before), _describe(slot, key))
        try:
            handle = self.executor.start(group, doc)
        except Exception as err:  # the backend could not start it: back to the queue, not a crash
            with self.state.transaction() as db:
                db.drop_group(key)
                for slot in unit:
                    db.update_job(slot.job, state=QUEUED, group_key=None)
                    db.event(slot.job, "start-failed", f"{type(err).__name__}: {err}"[:300])
            return 0
        with self.state.transaction() as db:
            db.put_group(key, self.executor.name, {"doc": doc, "handle": handle}, [s.job for s in unit])
        return 1


def _describe(slot: rounds.Slot, key: str) -> str:
    partner = f" with {slot.partner}" if slot.partner else ""
    return (f"{slot.num_gpus}×{slot.gpu_type} (node {','.join(map(str, slot.nodes))}, GPU "
            f"{','.join(map(str, slot.gpus))}), batch {slot.batch_size}{partner}, group {key}")


def serve_forever(*, cluster_path: Any, state_dir: Any, backend: str = "ray", policy: str = "colocate",
                  round_s: float = 60.0, colocation: Any = None, profiles: Any = None, address: str | None = None,
                  device: str = "auto", sharing: str = "timeslice", restart_cost: float | None = None,
                  time_limit: float | None = None, grace: float = 30.0, threads: int = 1,
                  max_rounds: int | None = None, should_stop: Callable[[], bool] = lambda: False,
                  on_round: Callable[[RoundStats], None] | None = None) -> None:
    """Validate the options of ``colocate serve``, build the server and run its rounds."""
    import uuid

    from profiler.gpu.sharing import sharing_mode_names
    from scheduler.executor.registry import make_executor
    from scheduler.model.cluster import load_cluster
    from scheduler.policies import policy_spec

    checks = [(device in ("auto", "cpu", "cuda"), "--device", device, "auto, cpu, cuda"),
              (sharing in sharing_mode_names(), "--sharing", sharing, ", ".join(sharing_mode_names())),
              (round_s > 0, "--round-s", round_s, "seconds > 0"), (grace > 0, "--grace", grace, "seconds > 0"),
              (threads >= 1, "--threads", threads, "an integer >= 1"),
              (max_rounds is None or max_rounds >= 1, "--max-rounds", max_rounds, "an integer >= 1")]
    for ok, name, value, valid in checks:
        if not ok:
            raise InputError(f"{value!r}", field=name, valid=valid)
    spec = policy_spec(policy)
    options: dict[str, Any] = {}
    for value, key, flag in ((restart_cost, "restart_cost_s", "--restart-cost"), (time_limit, "time_limit_s",
                                                                                   "--time-limit")):
        if value is None:
            continue
        if spec.name not in ("colocate", "sia") or value <= 0:
            raise InputError(f"{value!r} with --policy {spec.name}", field=flag,
                             valid="seconds > 0, for the colocate and sia policies")
        options[key] = value
    cluster = load_cluster(cluster_path)
    base = None
    if profiles is not None:

        base = load_goodput_model(profiles)
    table = load_colocation_table(colocation) if colocation is not None else None
    state = StateStore(state_dir)
    instance = state.meta("instance")
    if instance is None:
        instance = uuid.uuid4().hex[:8]
        with state.transaction() as db:
            db.set_meta("instance", instance)
    executor = make_executor(backend, address=address, instance=instance)
    config = ServeConfig(round_s=round_s, policy=spec.name, policy_options=options, device=device, sharing=sharing,
                         threads=threads, stop_grace_s=grace)
    server = Server(state, cluster, executor, config, profiles=base, colocation=table)
    server.acquire()
    server.serve(should_stop, max_rounds=max_rounds, on_round=on_round)


def group_type(others: list[JobRow]) -> str:
    """What a measurement is recorded against: ``""`` alone, the partner's job type in a pair, and in a group
    of three both others' types joined by ``+`` (sorted), so each member's ratio is kept against its group."""
    return "+".join(sorted(job_type(o.spec.app, o.batch_size or 0) for o in others))
