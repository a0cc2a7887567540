"""``colocate serve`` as a function: check its options, build the cluster, state, executor and server, run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from common.errors import InputError
from scheduler.formats.colocation_table import load_colocation_table
from scheduler.formats.profiles import load_goodput_model
from scheduler.model.colocation import ColocationTable
from scheduler.service import admission
from scheduler.service import lock as server_lock
from scheduler.service.config import ServeConfig
from scheduler.service.probes import ProbeConfig
from scheduler.service.server import RoundStats, Server
from scheduler.service.stability import StabilityConfig
from scheduler.service.store import StateStore


def serve_colocation(colocation: Any, gpu_types: Sequence[str], sharing: str) -> tuple[ColocationTable | None, str]:
    """The pair ratios the server starts from, and where they come from: the user's table (``--colocation``);
    else the pairs this project measured on the cluster's GPU types under ``sharing``
    (:func:`scheduler.formats.bundled.measured_table`); else none (the δ predictor's prior, learned online)."""
    from scheduler.formats.bundled import measured_table

    if colocation is not None:
        return load_colocation_table(colocation), str(colocation)
    table = measured_table(tuple(gpu_types), sharing)
    if table is None:
        return None, "no measured pairs for this cluster's GPU types; the δ predictor's prior, learned online"
    return table, (f"the bundled pairs measured on {', '.join(sorted(table.gpu_types))} under {sharing} "
                   f"({len(table.ratios) // 2} pairs), learned online")


def check_sharing_device(sharing: str, device: str, backend: str) -> None:
    """Refuse a sharing mode the jobs' device cannot run (``--sharing mps`` with jobs on the CPU): every packed
    group would fail at its start, and its jobs with it. Jobs are on the CPU with ``--device cpu``, or with
    ``auto`` on the local backend of a node without a GPU (a Ray cluster's workers decide for themselves)."""
    from profiler.gpu.nvml import gpu_inventory
    from profiler.gpu.sharing import sharing_mode, sharing_mode_names

    on_cpu = device == "cpu" or (device == "auto" and backend == "local" and not gpu_inventory())
    reason = sharing_mode(sharing).unavailable_reason("cpu") if on_cpu else None
    if reason is not None:
        usable = [m for m in sharing_mode_names() if sharing_mode(m).unavailable_reason("cpu") is None]
        raise InputError(f"{sharing!r} with jobs on the CPU: {reason}", field="--sharing",
                         valid=f"{', '.join(usable)} on the CPU; {sharing} with --device cuda (or auto on a GPU node)")


def serve_forever(*, cluster_path: Any, state_dir: Any, backend: str = "ray", policy: str = "colocate",
                  round_s: float = 60.0, colocation: Any = None, profiles: Any = None, address: str | None = None,
                  device: str = "auto", sharing: str = "timeslice", restart_cost: float | None = None,
                  time_limit: float | None = None, grace: float = 30.0, threads: int = 1,
                  max_rounds: int | None = None, should_stop: Callable[[], bool] = lambda: False,
                  on_round: Callable[[RoundStats], None] | None = None, min_run: float | None = None,
                  metrics_port: int | None = None, probe: bool | None = None,
                  probe_budget: float | None = None, announce: Callable[[str], None] | None = None) -> None:
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
              (max_rounds is None or max_rounds >= 1, "--max-rounds", max_rounds, "an integer >= 1"),
              (metrics_port is None or 1 <= metrics_port <= 65535, "--metrics-port", metrics_port,
               "a TCP port in 1..65535"),
              (probe_budget is None or probe_budget >= 0, "--probe-budget", probe_budget, "GPU-seconds >= 0")]
    for ok, name, value, valid in checks:
        if not ok:
            raise InputError(f"{value!r}", field=name, valid=valid)
    check_sharing_device(sharing, device, backend)
    stability = StabilityConfig(min_run_s=min_run)
    probes = ProbeConfig(enabled=probe)
    if probe_budget is not None:
        probes = replace(probes, budget_gpu_s=probe_budget)
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
    base = load_goodput_model(profiles) if profiles is not None else None
    table, origin = serve_colocation(colocation, cluster.type_names, sharing)
    if announce is not None:
        announce(f"colocation: {origin}")
    state = StateStore(state_dir, lock_wait_s=60.0)  # the server outwaits a reader's lock
    lock = server_lock.take(state.dir)  # before any write: a second server refused here changed nothing
    instance = state.meta("instance")
    if instance is None:
        instance = uuid.uuid4().hex[:8]
        with state.transaction() as db:
            db.set_meta("instance", instance)
    admission.record_cluster(state, cluster)  # submit refuses what this cluster can never run
    executor = make_executor(backend, address=address, instance=instance)
    config = ServeConfig(round_s=round_s, policy=spec.name, policy_options=options, device=device, sharing=sharing,
                         threads=threads, stop_grace_s=grace, stability=stability, probe=probes)
    server = Server(state, cluster, executor, config, profiles=base, colocation=table)
    server.acquire(lock)
    if metrics_port is not None:
        from scheduler.service.metrics import ServeMetrics

        metrics = ServeMetrics()
        metrics.serve(metrics_port)
        server.on_round_end = metrics.update
    try:
        server.serve(should_stop, max_rounds=max_rounds, on_round=on_round)
    finally:
        if server.probes is not None:
            server.probes.shutdown()  # probes end with the server (groups of jobs run on)
