"""Automatic probes: a job type the server never measured is profiled briefly on a spare GPU.

After a round has enacted its decision, GPUs it left idle may host one *probe*: for an active job of the zoo
(``model:`` in its job file) whose type (model at its batch, on a GPU type it may use) has no measured solo
iteration time, or no measured pair with its *likely partner* — the active job type the round's table (the
prior, measurements and the exploration rule: :mod:`scheduler.learning`) rates best beside it, when that
pair's ratio sum exceeds ``min_pair_gain`` — the server starts :mod:`.probe_run` through its executor as a
one-GPU group. The profiler's runner measures the type alone, the partner alone and the two together over
short windows; when the probe ends, its iteration times enter ``measurements`` as observations at one GPU
(solo, and each member against the other's type), so the next round's goodput model and pair belief use them
and ``colocate learned`` shows them with the source ``probe``.

Rules: a probe never blocks a round (it runs detached, like a group; :meth:`ProbeManager.poll` collects it);
its GPU counts as busy while it runs (a unit the policy places there waits for it, as for a stopping group);
at most ``max_running`` at once, each killed after ``timeout_s``; all probes of a state directory together
use at most ``budget_gpu_s`` GPU-seconds; a target (GPU type, job type, partner type) is tried once — a failed
probe is recorded with its reason and a job type that failed is not probed again; probes end with the server
(recorded as interrupted: the next server may try the target again; one a killed server left behind is killed
by the next one). Jobs with only a
``command`` cannot be probed (the profiler runs zoo models): their first runs measure them.

Records live in the ``meta`` table under ``probes`` (a JSON list: no schema change).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.bounds import MAX_SECONDS, check_number, in_range
from common.errors import InputError
from common.options import option
from scheduler.executor.base import Executor
from scheduler.executor.group_doc import GroupDoc, GroupMember
from scheduler.executor.plan import GpuGroup, JobLaunch
from scheduler.learning.measured import job_type
from scheduler.model.cluster import Cluster
from scheduler.model.colocation import ColocationTable
from scheduler.service.state.probe_records import META_KEY, load_records
from scheduler.service.state.rows import MIN_ITER_TIME_S
from scheduler.service.state.store import ACTIVE_STATES, JobRow, StateStore, Transaction

RUNNING, DONE, FAILED, INTERRUPTED = "running", "done", "failed", "interrupted"
Gpu = tuple[str, int, int]  # (GPU type, node within the type, GPU on the node)


@dataclass(frozen=True)
class ProbeConfig:
    """Knobs of the automatic probes (``colocate serve --probe/--no-probe``); the one source of their defaults."""

    enabled: bool | None = option(None, "Profile never-measured zoo job types briefly on spare GPUs.", flag="--probe",
                                  show_default="on with GPUs, off with --device cpu")
    budget_gpu_s: float = option(3600.0, "GPU-seconds all probes of this state directory may use.",
                                 flag="--probe-budget")
    warmup_iters: int = option(5, "Warm-up iterations of each probed job.", experimental=True)
    min_window_iters: int = option(10, "Iterations each probed job runs inside the measured window.",
                                   experimental=True)
    min_window_s: float = option(2.0, "Shortest measured window, seconds (the profiler's CUDA default).",
                                 experimental=True)
    timeout_s: float = option(300.0, "A probe still running after this many seconds is killed and recorded "
                                     "failed.", experimental=True)
    max_running: int = option(1, "Probes running at once.", experimental=True)
    pair: bool = option(True, "Also probe pairs of job types (not only solo runs).", experimental=True)
    min_pair_gain: float = option(1.0, "Probe a pair only when the round's table rates r_a + r_b above this.",
                                  experimental=True)

    def __post_init__(self) -> None:
        check_number(self.budget_gpu_s, field="budget_gpu_s", low=0, high=1e8, valid="GPU-seconds in [0, 1e8]")
        check_number(self.warmup_iters, field="warmup_iters", low=0, high=10000, integer=True)
        check_number(self.min_window_iters, field="min_window_iters", low=1, high=100000, integer=True)
        check_number(self.min_window_s, field="min_window_s", low=0, high=3600)
        check_number(self.timeout_s, field="timeout_s", low=0, high=86400, low_open=True, valid="seconds in (0, 86400]")
        check_number(self.max_running, field="max_running", low=1, high=64, integer=True)
        check_number(self.min_pair_gain, field="min_pair_gain", low=0, high=3)


def probing_enabled(config: ProbeConfig, device: str) -> bool:
    """Explicit ``--probe``/``--no-probe`` wins. By default probes run only where jobs train on GPUs: on
    ``--device cpu`` the "GPUs" are logical slots sharing the same cores, so a probe would slow the running jobs
    and measure their interference rather than an idle device."""
    if config.enabled is not None:
        return config.enabled
    if device == "cpu":
        return False
    from profiler.gpu.devices import visible_cuda_count

    return visible_cuda_count() > 0


@dataclass(frozen=True)
class Target:
    """What one probe measures: ``model`` at ``batch`` on ``gpu_type``, with ``partner`` (model, batch) or alone."""

    gpu_type: str
    app: str
    model: str
    batch: int
    image_size: int
    partner: tuple[str, str, int] | None = None  # (application, model, batch)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.gpu_type, job_type(self.app, self.batch),
                job_type(self.partner[0], self.partner[2]) if self.partner else "")


def all_gpus(cluster: Cluster) -> list[Gpu]:
    return [(t.name, n, g) for t in cluster for n in range(t.nodes) for g in range(t.gpus_per_node)]


def _ratio_sum(table: ColocationTable | None, gpu: str, a: tuple[str, int], b: tuple[str, int]) -> float | None:
    """The table's r_a + r_b for two (application, batch) types: ``app@batch`` keys first, then applications."""
    if table is None:
        return None
    for ka in (job_type(*a), a[0]):
        for kb in (job_type(*b), b[0]):
            hit = table.ratios.get((gpu, ka, kb))
            if hit is not None:
                return hit[0] + hit[1]
    return None


def plan_targets(rows: Sequence[JobRow], measurements: Sequence[Mapping[str, Any]], records: Sequence[Mapping[str, Any]],
                 idle_types: Iterable[str], table: ColocationTable | None, config: ProbeConfig) -> list[Target]:
    """The probes worth running now, in submission order of the jobs that need them (pure: no I/O)."""
    solo = {(m["application"], m["gpu_type"], int(m["batch_size"])) for m in measurements if not m["partner_type"]}
    paired = {(m["gpu_type"], job_type(m["application"], int(m["batch_size"])), m["partner_type"])
              for m in measurements if m["partner_type"]}
    tried = {(r["gpu_type"], r["type"], r["partner_type"]) for r in records if r["state"] != INTERRUPTED}
    failed = {(r["gpu_type"], r["type"]) for r in records if r["state"] == FAILED}
    types = [(r.spec.app, r.spec.model, r.batch_size or r.spec.batch_size, r.spec.image_size, r.spec.gpu_types)
             for r in rows if r.state in ACTIVE_STATES and r.spec.model and not r.invalid and not r.cancel_requested
             and r.spec.image_size >= 32]  # the profiler's smallest image
    out: list[Target] = []
    for gpu in dict.fromkeys(idle_types):
        for app, model, batch, size, allowed in dict.fromkeys(types):
            me = job_type(app, batch)
            if (allowed and gpu not in allowed) or (gpu, me) in failed:
                continue
            partner = _likely_partner(gpu, (app, model, batch, size), types, table, config) if config.pair else None
            if partner is not None and ((gpu, me, job_type(partner[0], partner[2])) in paired
                                        or (gpu, me, job_type(partner[0], partner[2])) in tried):
                partner = None  # that pair is measured (or was probed) already
            target = Target(gpu, app, model, batch, size, partner)
            if ((app, gpu, batch) not in solo or partner is not None) and target.key not in tried:
                tried.add(target.key)  # two jobs of one type: one probe
                out.append(target)
    return out


def _likely_partner(gpu: str, me: tuple[str, str, int, int], types: Sequence[tuple[Any, ...]],
                    table: ColocationTable | None, config: ProbeConfig) -> tuple[str, str, int] | None:
    """The active type (itself included) the table rates best beside ``me``, if it rates the pair above
    ``min_pair_gain``; same image size (one profiler campaign) and allowed on ``gpu``."""
    best, best_sum = None, config.min_pair_gain
    for app, model, batch, size, allowed in dict.fromkeys(types):
        if size != me[3] or (allowed and gpu not in allowed):
            continue
        gain = _ratio_sum(table, gpu, (me[0], me[2]), (app, batch))
        if gain is not None and gain > best_sum:
            best, best_sum = (app, model, batch), gain
    return best


class ProbeManager:
    """Starts, polls and records the probes of one server (see the module docstring)."""

    def __init__(self, state: StateStore, cluster: Cluster, executor: Executor, config: ProbeConfig, *,
                 device: str, sharing: str, threads: int, python: str) -> None:
        self.state, self.cluster, self.executor, self.config = state, cluster, executor, config
        self.device, self.sharing, self.threads, self.python = device, sharing, threads, python
        self.dir = state.dir / "probes"
        self.records = load_records(state.meta(META_KEY))
        self._drop_leftovers()

    def running(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r["state"] == RUNNING]

    def busy(self) -> set[Gpu]:
        """GPUs running probes hold."""
        return {(r["gpu_type"], r["node"], r["gpu"]) for r in self.running()}

    def spent_gpu_s(self) -> float:
        now = time.time()
        return sum(float(r["gpu_s"]) if r.get("gpu_s") is not None else now - r["started_at"] for r in self.records)

    # -- starting ----------------------------------------------------------------------------------------
    def after_round(self, rows: Sequence[JobRow], table: ColocationTable | None, taken: Iterable[Gpu]) -> int:
        """Start probes on GPUs nobody holds (``taken``: running and pending groups); returns how many."""
        from scheduler.service.rounds import busy_gpus

        free = slots = self.config.max_running - len(self.running())
        if slots <= 0 or self.spent_gpu_s() >= self.config.budget_gpu_s:
            return 0
        held = busy_gpus(rows) | set(taken) | self.busy()
        idle = [g for g in all_gpus(self.cluster) if g not in held]
        targets = plan_targets(rows, self.state.measurements(), self.records, [g[0] for g in idle], table,
                               self.config)
        for target in targets:
            gpu = next((g for g in idle if g[0] == target.gpu_type), None)
            if free <= 0:
                break
            if gpu is None:
                continue
            idle.remove(gpu)
            self._start(target, gpu)
            free -= 1
        return slots - free

    def _start(self, target: Target, gpu: Gpu) -> None:
        number = 1 + max((int(r["key"][1:]) for r in self.records if r["key"][1:].isdigit()), default=0)
        key = f"p{number:04d}"
        directory = self.dir / key
        directory.mkdir(parents=True, exist_ok=True)
        jobs = [[target.model, target.batch]] + ([[target.partner[1], target.partner[2]]] if target.partner else [])
        probe = {"device": "cpu" if self.device == "cpu" else "cuda", "sharing": self.sharing,
                 "image_size": target.image_size, "threads": self.threads, "warmup_iters": self.config.warmup_iters,
                 "min_window_iters": self.config.min_window_iters, "min_window_s": self.config.min_window_s,
                 "run_timeout_s": self.config.timeout_s / 3,  # three runs at most: the probe ends in timeout_s
                 "jobs": jobs, "out": str(directory / "result.json")}
        (directory / "probe.json").write_text(json.dumps(probe))
        argv = [self.python, "-m", "scheduler.service.probes.run", str(directory / "probe.json")]
        name = f"probe-{key}"
        group = GpuGroup(0, gpu[0], (gpu[1],), (gpu[2],), (JobLaunch(name, gpu[0], 1, target.batch, None,
                                                                     command=" ".join(argv)),), "none")
        doc = GroupDoc(key, "none", str(directory / "supervisor.pid"), (GroupMember(name, str(directory), tuple(argv)),),
                       gpu=self.device != "cpu", grace_s=5.0)
        gpu_type, me, partner_type = target.key
        record: dict[str, Any] = {"key": key, "gpu_type": gpu_type, "node": gpu[1], "gpu": gpu[2], "type": me,
                                  "partner_type": partner_type, "app": target.app, "batch": target.batch,
                                  "members": [[target.app, target.model, target.batch]]
                                  + ([list(target.partner)] if target.partner else []),
                                  "started_at": time.time(), "state": RUNNING, "error": "", "doc": doc.to_dict()}
        try:
            record["handle"] = self.executor.start(group, doc)
        except Exception as err:  # the backend could not start it: recorded, not retried
            record.update(state=FAILED, error=f"start failed: {type(err).__name__}: {err}"[:300], gpu_s=0.0)
        self.records.append(record)
        what = f"{key}: {me}" + (f" with {partner_type}" if partner_type else "") + f" on {gpu_type} node {gpu[1]} GPU {gpu[2]}"
        self._save(("probe-failed", f"{what}: {record['error']}") if record["state"] == FAILED else ("probe-started", what))

    # -- collecting --------------------------------------------------------------------------------------
    def poll(self) -> int:
        """Collect ended (or overdue) probes: their measurements into the state; returns how many ended."""
        ended = 0
        for record in self.running():
            poll = self.executor.poll(record["handle"], _doc(record))
            files = (poll.jobs.get(f"probe-{record['key']}") if poll is not None else None) or {}
            overdue = time.time() - record["started_at"] > self.config.timeout_s + 30.0
            if files.get("exit") is None and poll is not None and poll.alive and not overdue:
                continue
            self.executor.release(record["handle"], _doc(record))
            self._finish(record, files.get("exit"), "timed out" if overdue else "its group is gone")
            ended += 1
        return ended

    def _finish(self, record: dict[str, Any], exit: Mapping[str, Any] | None, lost: str) -> None:
        record["finished_at"] = time.time()
        record["gpu_s"] = round(record["finished_at"] - record["started_at"], 3)  # one GPU for its wall time
        result = _read_result(_doc(record).jobs[0].path)
        if result is None:
            reason = f"exit status {exit.get('returncode')}: {exit.get('last_line', '')}" if exit else lost
            record.update(state=FAILED, error=f"no result ({reason})"[:300])
            self._save(("probe-failed", f"{record['key']}: {record['error']}"))
            return
        wrote: list[list[Any]] = []
        bad = [r for r in result["runs"] if r["status"] != "ok"]
        with self.state.transaction() as db:
            for run in result["runs"]:
                if run["status"] == "ok":
                    wrote += _observe(db, record, run)
            record.update(state=FAILED if bad else DONE, wrote=wrote, window_s=sum(r["window_s"] for r in result["runs"]),
                          error="; ".join(f"{'+'.join(r['jobs'])}: {r['status']} {r['error']}" for r in bad)[:300])
            detail = f"{record['key']}: {len(wrote)} observation(s) in {record['gpu_s']:.1f} GPU-s"
            self._save(("probe-failed" if bad else "probe-done", detail + (f"; {record['error']}" if bad else "")), db=db)

    def shutdown(self) -> None:
        """Probes end with the server: kill the running ones (recorded as interrupted: tried again later)."""
        for record in self.running():
            self.executor.release(record["handle"], _doc(record))
        self._forget_running("stopped with the server")

    def _drop_leftovers(self) -> None:
        """Probes a killed server left behind: one that ended meanwhile is collected as usual, the others are
        killed (their targets may be tried again)."""
        usable = [r for r in self.running() if isinstance(r.get("handle"), dict) and isinstance(r.get("doc"), dict)]
        if len(usable) == len(self.running()):
            self.poll()
        for record in usable:
            if record["state"] == RUNNING:
                self.executor.release(record["handle"], _doc(record))
        self._forget_running("left behind by an earlier server")

    def _forget_running(self, why: str) -> None:
        """Running records become ``interrupted``: their GPU time counts, their target may be tried again."""
        gone = self.running()
        now = time.time()
        for r in gone:
            r.update(state=INTERRUPTED, error=why, finished_at=now, gpu_s=round(now - r["started_at"], 3))
        if gone:
            self._save(*[("probe-interrupted", f"{r['key']}: {why}") for r in gone])

    def _save(self, *events: tuple[str, str], db: Transaction | None = None) -> None:
        if db is None:
            with self.state.transaction() as tx:
                self._save(*events, db=tx)
            return
        db.set_meta(META_KEY, json.dumps(self.records))
        for kind, detail in events:
            db.event(None, kind, detail)


def _doc(record: Mapping[str, Any]) -> GroupDoc:
    """A running probe's group document (checked when its record was read: :func:`.probe_records.valid_record`)."""
    return GroupDoc.from_dict(record["doc"])


def _read_result(directory: Path) -> dict[str, Any] | None:
    """A probe's ``result.json``, read bounded and checked (runs of ``jobs``, ``status``, finite iteration times);
    None when there is none usable."""
    from common.safe_load import parse_json
    from common.untrusted import UntrustedFile, read_regular

    try:
        data = read_regular(directory, "result.json", max_bytes=1024 * 1024)
        result = parse_json(data.decode("utf-8"), source="result.json") if data is not None else None
    except (UntrustedFile, InputError, UnicodeDecodeError):
        return None
    runs = result.get("runs") if isinstance(result, dict) else None
    good = isinstance(runs, list) and all(
        isinstance(r, dict) and isinstance(r.get("jobs"), list) and isinstance(r.get("status"), str)
        and isinstance(r.get("error", ""), str)
        and isinstance(r.get("window_s", 0), (int, float)) and (r.get("status") != "ok" or (
            isinstance(r.get("iter_time_s"), list) and len(r["iter_time_s"]) == len(r["jobs"])
            and all(in_range(t, MIN_ITER_TIME_S, MAX_SECONDS) for t in r["iter_time_s"]))) for r in runs)
    return result if good else None


def _observe(db: Transaction, record: Mapping[str, Any], run: Mapping[str, Any]) -> list[list[Any]]:
    """One run's iteration times as observations at one GPU: solo (partner type ''), or each member against
    the other's type; returns the measurement keys written."""
    apps = {f"{model}@{batch}": (app, int(batch)) for app, model, batch in record["members"]}  # runner's labels
    if not all(label in apps for label in run["jobs"]):
        return []  # not what this probe ran: nothing learned from it
    members = [apps[label] for label in run["jobs"]]
    wrote = []
    for i, ((app, batch), iter_time) in enumerate(zip(members, run["iter_time_s"])):
        partner = job_type(*members[1 - i]) if len(members) == 2 else ""
        gpu_type = str(record["gpu_type"])
        db.add_measurement(app, gpu_type, 1, batch, partner, float(iter_time))
        wrote.append([app, gpu_type, 1, batch, partner])
    return wrote
