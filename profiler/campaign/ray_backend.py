"""Distributed campaigns on Ray: one whole-GPU task per run, routed by GPU type; the driver keeps the store.

The driver (the ``colocate profile --backend ray`` process) plans the runs exactly as the local backend
does, leaves out the runs already in the results directory, and submits the rest as Ray tasks:

* every task asks for ``num_gpus=1`` — a whole GPU, never a fraction: with fractional GPUs Ray itself would
  choose who shares the device, and co-location is exactly what a run measures;
* when the spec lists ``gpu_types``, each run's cell carries one of them and its task also asks for a sliver
  (0.001) of the custom resource ``accelerator_type:<NAME>`` that Ray puts on every node with that GPU
  (``H100``, ``A100``, ... — see :func:`ray_accelerator_name`), so the run lands on a node of its type;
* inside the task the same :func:`profiler.campaign.runner.execute_run` as the local backend runs (MPS when the cell
  asks for it, one process per job, NVML sampling) on the GPU Ray assigned (Ray narrows
  ``CUDA_VISIBLE_DEVICES`` to it, so the spec's ``cuda``/``cuda:N`` means "this task's GPU"), and the task
  returns the rows;
* the driver appends each result to the one :class:`~profiler.results.store.ResultsStore` as it arrives, so
  resuming, the progress bar and the summary work as they do locally.

Solo runs first: a group run needs its members' solo baselines *of its own GPU type*, so a group run is
submitted only once every solo run of its job types on its type has been committed (finer than "all solos
first": pairs of small batch sizes can start while large solos still run).

Failures: a task whose worker process or node dies is retried by Ray (``task_retries``); if Ray gives up
(``WorkerCrashedError``, ``NodeDiedError``, ...) the driver re-queues the run up to ``requeues`` times and
otherwise leaves it unrecorded, so the next invocation retries it. A run is appended only when its one
result arrives, and the store is keyed by ``run_id``: nothing is recorded twice. Job failures inside a run
(OOM, crashed worker) are results like locally (rows with status infeasible/failed), not task failures.

``ray`` is an optional extra: it is imported inside the functions only.
"""

from __future__ import annotations

import socket
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.errors import InputError
from common.signals import python_signal_handlers_kept, sigterm_as_interrupt
from profiler.campaign.cells import JobType, Run, plan_runs
from profiler.campaign.driver import (
    Progress,
    SessionTally,
    baselines_from,
    build_meta,
    check_resumable,
    open_session,
)
from profiler.campaign.runner import RunRecord, SoloBaseline, execute_run, not_run_record
from profiler.campaign.spec import CampaignSpec
from profiler.gpu.devices import DeviceTarget, resolve_device
from profiler.gpu.sharing import SHARING_SOLO
from profiler.results.schema import STATUS_SKIPPED
from profiler.results.store import ResultsStore

# Ray's accelerator type names (ray.util.accelerators) for the project's short GPU type names where the
# two differ by more than case. Anything else is upper-cased: 'h100' -> 'H100', 'l40s' -> 'L40S'.
_RAY_ACCELERATOR_NAMES = {"a10g": "A10G", "2080": "RTX-2080-Ti", "3090": "RTX-3090", "4090": "RTX-4090"}
ROUTING_FRACTION = 0.001  # how much of the node's accelerator_type resource a task asks for (Ray's own)
TASK_NAME_PREFIX = "colocate-run"  # Ray workers show "ray::colocate-run <run_id>" in ps while a run executes


def require_ray() -> Any:
    """The ``ray`` module, or a one-line :class:`InputError` saying how to install the extra."""
    try:
        import ray
    except ImportError as exc:
        raise InputError(f"the ray backend is unavailable ({exc})", field="backend",
                         valid="local, or install Ray (the 'ray' extra of colocate: pip install ray)") from None
    return ray


def ray_accelerator_name(gpu_type: str) -> str:
    """Ray's accelerator type for a short GPU type ('h100' -> 'H100'), as in ``accelerator_type:<NAME>``."""
    return _RAY_ACCELERATOR_NAMES.get(gpu_type, gpu_type.upper())


def routing_resource(gpu_type: str) -> str:
    """The custom resource that marks nodes with GPUs of ``gpu_type`` (Ray sets it on GPU nodes itself)."""
    return f"accelerator_type:{ray_accelerator_name(gpu_type)}"


@dataclass(frozen=True)
class TaskResult:
    """What one task sends back: the run's rows and where it ran."""

    record: RunRecord
    node_id: str
    hostname: str
    gpu_ids: tuple[str, ...]


def execute_on_worker(run: Run, spec: CampaignSpec, baselines: Mapping[JobType, SoloBaseline]) -> TaskResult:
    """Body of one Ray task: measure ``run`` on the GPU Ray assigned to this task and return its rows."""
    import ray

    # Ray has narrowed CUDA_VISIBLE_DEVICES to this task's GPU: the spec's cuda:N is "our" GPU here.
    target = resolve_device("cuda" if spec.is_cuda else spec.device)
    wanted = run.cell.gpu_type
    if wanted and spec.is_cuda and target.gpu_type != wanted:
        # A node whose accelerator_type resource does not match its GPU: measure nothing, retry on resume.
        record = not_run_record(run, spec, target, STATUS_SKIPPED,
                          f"routed to a node whose GPU is '{target.gpu_type}' ({target.name}), not '{wanted}': "
                          f"check the node's {routing_resource(wanted)} resource")
    else:
        record = execute_run(run, spec, target, baselines)
    context = ray.get_runtime_context()
    return TaskResult(record, context.get_node_id(), socket.gethostname(),
                      tuple(str(g) for g in ray.get_gpu_ids()))


@dataclass
class _Ledger:
    """Driver-side bookkeeping: what is blocked on baselines, in flight, re-queued or given up."""

    solo_left: Counter[tuple[str | None, JobType]] = field(default_factory=Counter)
    requeued: Counter[str] = field(default_factory=Counter)
    lost: dict[str, str] = field(default_factory=dict)
    placements: dict[str, dict[str, Any]] = field(default_factory=dict)

    def ready(self, run: Run) -> bool:
        if run.cell.sharing == SHARING_SOLO:
            return True
        return all(self.solo_left[(run.cell.gpu_type, job)] == 0 for job in run.cell.jobs)

    def resolved(self, run: Run) -> None:
        if run.cell.sharing == SHARING_SOLO:
            self.solo_left[(run.cell.gpu_type, run.cell.jobs[0])] -= 1


@dataclass
class _Dispatcher:
    """Submits runs as Ray tasks, at most ``cap`` at a time, and commits each result as it arrives."""

    ray: Any
    remote: Any
    spec: CampaignSpec
    store: ResultsStore
    num_cpus: float
    task_retries: int
    requeues: int
    tally: SessionTally
    ledger: _Ledger = field(default_factory=_Ledger)
    baselines: dict[str | None, dict[JobType, SoloBaseline]] = field(default_factory=dict)
    waiting: deque[Run] = field(default_factory=deque)
    in_flight: dict[Any, Run] = field(default_factory=dict)

    def baselines_of(self, gpu_type: str | None) -> dict[JobType, SoloBaseline]:
        if gpu_type not in self.baselines:
            self.baselines[gpu_type] = baselines_from(self.store, gpu_type)
        return self.baselines[gpu_type]

    def submit(self, run: Run) -> Any:
        resources = {routing_resource(run.cell.gpu_type): ROUTING_FRACTION} if run.cell.gpu_type else {}
        return self.remote.options(
            num_gpus=1, num_cpus=self.num_cpus, resources=resources, max_retries=self.task_retries,
            retry_exceptions=False, name=f"{TASK_NAME_PREFIX} {run.run_id}",
        ).remote(run, self.spec, self.baselines_of(run.cell.gpu_type))

    def drive(self, todo: list[Run], cap: int) -> None:
        """Run every run of ``todo``; on any exception (Ctrl-C included) cancel what is in flight."""
        self.waiting = deque(todo)  # plan order: solos first, then groups per batch size
        try:
            with sigterm_as_interrupt():
                while self.waiting or self.in_flight:
                    self._fill(cap)
                    ready_refs, _ = self.ray.wait(list(self.in_flight), num_returns=1, timeout=1.0)
                    for ref in ready_refs:
                        self._collect(ref)
        except BaseException:
            for ref in self.in_flight:  # force: the worker dies and its job processes with it (PDEATHSIG)
                self.ray.cancel(ref, force=True)
            raise

    def _fill(self, cap: int) -> None:
        for run in list(self.waiting):
            if len(self.in_flight) >= cap:
                break
            if self.ledger.ready(run):
                self.waiting.remove(run)
                self.in_flight[self.submit(run)] = run
        if not self.in_flight:  # only blocked runs left and nothing can unblock them: a bug
            raise RuntimeError(f"{len(self.waiting)} group runs wait for solo runs that never ran")

    def _collect(self, ref: Any) -> None:
        from ray.exceptions import RayError, RayTaskError, TaskCancelledError

        run = self.in_flight.pop(ref)
        ledger = self.ledger
        try:
            result: TaskResult = self.ray.get(ref)
        except (RayTaskError, TaskCancelledError) as exc:
            raise RuntimeError(f"run {run.run_id} raised on a Ray worker: "
                               f"{str(exc).strip().splitlines()[-1]}") from exc
        except RayError as exc:  # the worker or its node died and Ray's retries are spent
            if ledger.requeued[run.run_id] < self.requeues:
                ledger.requeued[run.run_id] += 1
                self.waiting.appendleft(run)
            else:
                ledger.lost[run.run_id] = f"{type(exc).__name__}: {exc}".splitlines()[0]
                ledger.resolved(run)
            return
        record = result.record
        self.store.append_run(record.run, record.jobs)
        ledger.placements[run.run_id] = {"node_id": result.node_id, "host": result.hostname,
                                         "gpu_ids": list(result.gpu_ids), "gpu_type": run.cell.gpu_type}
        if run.cell.sharing == SHARING_SOLO:
            self.baselines.pop(run.cell.gpu_type, None)  # re-read with this solo run committed
        ledger.resolved(run)
        self.tally.count(record)


def _connect(address: str | None) -> bool:
    """Connect to (or start) Ray unless this process already did; True when we must shut it down."""
    import ray

    if ray.is_initialized():
        return False
    with python_signal_handlers_kept():  # Ray's native handler would turn SIGTERM into a crash dump
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    return True


def _check_cluster(gpu_types: list[str]) -> dict[str, Any]:
    """Refuse a campaign the cluster cannot run (its tasks would wait forever); describe the nodes."""
    import ray

    resources = ray.cluster_resources()
    if resources.get("GPU", 0) < 1:
        raise InputError("the Ray cluster has no GPU (each run is a task with num_gpus=1)", field="address",
                         valid="a cluster whose nodes declare GPUs (ray start --num-gpus N; logical ones on CPU)")
    available = sorted(key.split(":", 1)[1] for key in resources if key.startswith("accelerator_type:"))
    for index, gpu_type in enumerate(gpu_types):
        if resources.get(routing_resource(gpu_type), 0) <= 0:
            raise InputError(f"no node of the Ray cluster has the resource '{routing_resource(gpu_type)}'",
                             field=f"gpu_types[{index}]",
                             valid="types present: " + (", ".join(t.lower() for t in available) or "none"))
    nodes = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        node_resources = node.get("Resources", {})
        nodes.append({"node_id": node["NodeID"], "host": node.get("NodeManagerHostname"),
                      "gpus": node_resources.get("GPU", 0),
                      "accelerator_types": sorted(k.split(":", 1)[1] for k in node_resources
                                                  if k.startswith("accelerator_type:"))})
    return {"gpus": resources.get("GPU", 0), "nodes": nodes}


def _driver_meta(spec: CampaignSpec, cluster: dict[str, Any], address: str | None) -> dict[str, Any]:
    """meta.json for a Ray campaign: versions from the driver; device facts are per task, so say so."""
    # The driver may have no GPU at all: describe the campaign, not this host's device.
    placeholder = DeviceTarget(spec.device, "cpu", None, None, "Ray cluster", "+".join(spec.gpu_types or ["any"]),
                               None)
    meta = build_meta(spec, placeholder)
    per_task = "measured on each Ray worker per run (see the NVML columns of runs.parquet)"
    meta["device"] = {"spec": spec.device, "backend": "ray", "address": address,
                      "gpu_types": list(spec.gpu_types or []), "cluster": cluster}
    meta["nvml"] = {"enabled": None, "why": per_task}
    meta["gpm"] = {"enabled": None, "why": per_task}
    meta["mps"] = {"available": None, "why": "checked on each Ray worker; runs without MPS there are skipped"}
    return meta


def run_campaign_on_ray(
    spec: CampaignSpec,
    out: str | Path,
    *,
    address: str | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    runs: list[Run] | None = None,
    num_cpus: float = 1.0,
    task_retries: int = 3,
    requeues: int = 2,
    max_in_flight: int | None = None,
) -> ResultsStore:
    """Measure every planned run not yet in ``out`` on a Ray cluster; returns the store. Safe to resume.

    ``address`` is passed to ``ray.init`` (None starts a local Ray, ``auto`` joins a running cluster); an
    already initialised Ray is used as it is and left running. ``num_cpus`` is what each task reserves
    besides its whole GPU, ``task_retries`` how often Ray re-executes a task whose worker or node died,
    ``requeues`` how often the driver resubmits a run after Ray gave up, ``max_in_flight`` how many tasks
    are submitted at once (default: twice the cluster's GPUs, so Ctrl-C has little to cancel).
    """
    ray = require_ray()
    out = Path(out)
    store = ResultsStore(out)
    check_resumable(store, spec, out)
    planned = runs if runs is not None else plan_runs(spec)
    finished = store.finished_run_ids()
    todo = [run for run in planned if run.run_id not in finished]
    resumed = len(planned) - len(todo)

    started_ray = _connect(address)
    try:
        cluster = _check_cluster(list(spec.gpu_types or ()))
        meta, session = open_session(store, _driver_meta(spec, cluster, address), backend="ray")
        dispatcher = _Dispatcher(ray, ray.remote(execute_on_worker), spec, store, num_cpus, task_retries,
                                 requeues, SessionTally(len(planned), resumed, on_progress))
        for run in todo:
            if run.cell.sharing == SHARING_SOLO:
                dispatcher.ledger.solo_left[(run.cell.gpu_type, run.cell.jobs[0])] += 1
        try:
            dispatcher.drive(todo, cap=max_in_flight or max(2 * int(cluster["gpus"]), 1))
        finally:
            ledger = dispatcher.ledger
            dispatcher.tally.close(session)
            session.update(requeued=dict(ledger.requeued), lost=ledger.lost, placements=ledger.placements)
            store.write_meta(meta)
    finally:
        if started_ray:
            ray.shutdown()
    return store
