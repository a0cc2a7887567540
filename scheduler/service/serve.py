"""``colocate serve`` as a function: check every option and input, then build the server and run its rounds.

Every check that can refuse runs before the first write: a refused ``serve`` (a bad option, an unknown backend, a
busy metrics port, a cluster it cannot read, another server on the state directory) leaves the state directory
as it was, or does not create it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from common.bounds import check_number
from common.errors import InputError
from common.options import option, shared_option
from scheduler.formats.colocation_table import load_colocation_table
from scheduler.formats.profiles import load_goodput_model
from scheduler.model.colocation import ColocationTable
from scheduler.service import admission
from scheduler.service.api.web import ApiServer, listen_tcp, tls_context
from scheduler.service.config import ServeConfig
from scheduler.service.front.remote import socket_path
from scheduler.service.rounds import RoundStats
from scheduler.service.server import Server
from scheduler.service.state import lock as server_lock
from scheduler.service.state.store import StateStore


def _backend_names() -> tuple[str, ...]:
    from scheduler.executor.registry import EXECUTOR_NAMES

    return EXECUTOR_NAMES


@dataclass(frozen=True)
class ServeRequest:
    """What ``colocate serve`` runs: where, on what, and the server's knobs (:class:`ServeConfig`)."""

    cluster: Path = shared_option("cluster")
    state: Path = option(help="State directory (created if missing): database, job logs, checkpoints.")
    backend: str = option("ray", "Where groups run: ray (a Ray cluster; --address), slurm (a Slurm cluster: one "
                                 "batch job per group, the cluster file's slurm section) or local (this node).",
                          choices=_backend_names)
    address: str | None = option(None, "Ray cluster address.", show_default="RAY_ADDRESS, else start one")
    colocation: Path | None = shared_option("colocation", None, show_default="the bundled pairs measured on the "
                                                                      "cluster's GPU types under --sharing, if any")
    profiles: Path | None = shared_option("profiles", None, show_default="a prior that measurements calibrate")
    max_rounds: int | None = option(None, "Stop after this many rounds.", show_default="until stopped")
    metrics_port: int | None = option(None, "Expose Prometheus metrics on 127.0.0.1:PORT.")
    api_port: int | None = option(None, "Serve the API over HTTP(S) on --api-host:PORT, with bearer tokens (colocate "
                                        "token create), for callers on other machines.",
                                  show_default="the Unix socket next to --state only")
    api_host: str = option("127.0.0.1", "Address of --api-port; beyond loopback only with --tls-cert and --tls-key.")
    tls_cert: Path | None = option(None, "PEM certificate for HTTPS on --api-port.")
    tls_key: Path | None = option(None, "PEM private key of --tls-cert.")
    config: ServeConfig = field(default_factory=ServeConfig)
    # a results directory's measured pairs (gpu_type, type_a, type_b, ratio_a, ratio_b), read by the command line
    # when --colocation names one: the analysis that reads results directories sits above this package
    colocation_rows: tuple[tuple[str, str, str, float, float], ...] | None = None

    def __post_init__(self) -> None:
        if self.backend not in _backend_names():
            raise InputError(f"unknown backend {self.backend!r}", field="backend", valid=", ".join(_backend_names()))
        if self.max_rounds is not None:
            check_number(self.max_rounds, field="max_rounds", low=1, high=10**9, integer=True)
        for name in ("metrics_port", "api_port"):
            if getattr(self, name) is not None:
                check_number(getattr(self, name), field=name, low=1, high=65535, integer=True,
                             valid="a TCP port in 1..65535")
        if (self.tls_cert is not None or self.tls_key is not None) and self.api_port is None:
            raise InputError("--tls-cert/--tls-key without --api-port", field="api_port",
                             valid="--api-port PORT (HTTPS there), or no TLS options")


def serve_colocation(colocation: Any, gpu_types: Sequence[str], sharing: str,
                     rows: Sequence[tuple[str, str, str, float, float]] | None = None,
                     ) -> tuple[ColocationTable | None, str]:
    """The pair ratios the server starts from, and where they come from: the user's table (``--colocation``: a
    CSV, or a results directory whose measured pairs the command line read into ``rows``);
    else the pairs this project measured on the cluster's GPU types under ``sharing``
    (:func:`scheduler.formats.bundled.measured_table`); else none (the δ predictor's prior, learned online)."""
    from scheduler.formats.bundled import measured_table

    if rows is not None:
        return ColocationTable.from_rows(rows), f"{colocation} (its measured pairs)"
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
        raise InputError(f"{sharing!r} with jobs on the CPU: {reason}", field="sharing",
                         valid=f"{', '.join(usable)} on the CPU; {sharing} with --device cuda (or auto on a GPU node)")


def check_users(users: str, backend: str) -> None:
    """Refuse a ``--users`` mode this server cannot keep (:func:`common.owners.serve_refusal`): each job as its owner
    needs root and a backend that can start a process as another user (not Ray); every job as the server's user
    must not be root's."""
    import os

    from common.owners import serve_refusal

    reason = serve_refusal(users, os.getuid(), backend)
    if reason is not None:
        valid = ("own or single on the ray backend; multi with --backend local or slurm, as root"
                 if backend == "ray" else "multi as root; single as an unprivileged user; own")
        raise InputError(reason, field="--users", valid=valid)


def check_jobs_device(device: str, backend: str) -> None:
    """Refuse ``--device cuda`` where the jobs run on this machine (the local backend) and its torch cannot use
    CUDA: every job would fail at its start. A Ray or Slurm cluster's nodes have their own GPUs (a job there
    without CUDA fails with one line: :func:`scheduler.executor.train.main`)."""
    if backend != "local":
        return
    from profiler.gpu.preflight import check_cuda_usable

    check_cuda_usable(device, source=None, field="device",
                      valid="cpu, auto (cuda where available), or cuda on a machine with a GPU and a CUDA build of torch")


def _state_target(path: Path) -> None:
    """A state directory is a directory we can write to (or nothing yet, under one), whose database, if any, is
    colocate's: refused before anything is written."""
    import os

    valid = "a state directory you can write to (created if missing)"
    if path.is_symlink() and not path.exists():  # exists() follows the link: False for a dangling one or a loop
        raise InputError("is a symbolic link to nothing (dangling, or a loop)", source=path, field="state",
                         valid=valid)
    if path.exists() and not path.is_dir():
        raise InputError("not a directory", source=path, field="state", valid=valid)
    existing = next((p for p in [path, *path.absolute().parents] if p.exists()), None)
    if existing is None or not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"cannot write to {existing if existing is not None else path}", source=path,
                         field="state", valid=valid)
    if path.is_dir():
        StateStore(path, readonly=True, create=False).close()  # a damaged or foreign state.db: refused here


def serve_forever(request: ServeRequest, *, should_stop: Callable[[], bool] = lambda: False,
                  on_round: Callable[[RoundStats], None] | None = None,
                  announce: Callable[[str], None] | None = None) -> None:
    """Check the request and its inputs, take the state directory, build the server and run its rounds."""
    from scheduler.executor.registry import make_executor
    from scheduler.model.cluster import load_cluster

    config = request.config
    check_users(config.users, request.backend)
    check_sharing_device(config.sharing, config.device, request.backend)
    check_jobs_device(config.device, request.backend)
    # the backend refuses before the first write too (Slurm's commands, the cluster file's slurm section, Ray)
    make_executor(request.backend, address=request.address, cluster_file=request.cluster)
    _state_target(request.state)
    cluster = load_cluster(request.cluster)
    base = load_goodput_model(request.profiles) if request.profiles is not None else None
    table, origin = serve_colocation(request.colocation, cluster.type_names, config.sharing, request.colocation_rows)
    tls = tls_context(request.tls_cert, request.tls_key)  # bad files, TLS-less network: refused here
    tcp = listen_tcp(request.api_host, request.api_port, tls) if request.api_port is not None else None
    metrics = None
    if request.metrics_port is not None:  # a busy port is refused before the state directory is touched
        from scheduler.service.metrics import ServeMetrics

        metrics = ServeMetrics()
        metrics.serve(request.metrics_port)
    server = api = None
    try:
        try:
            request.state.mkdir(parents=True, exist_ok=True)
            private(request.state, request.config.users)
        except OSError as err:  # raced into existence as something else since the check
            raise InputError(f"cannot create it ({err.strerror or err})", source=request.state, field="state",
                             valid="a state directory you can write to (created if missing)") from None
        lock = server_lock.take(request.state)  # another server here: refused, nothing written
        state = StateStore(request.state, lock_wait_s=60.0)  # the server outwaits a reader's lock
        if announce is not None:
            announce(f"colocation: {origin}")
        executor = make_executor(request.backend, address=request.address, instance=_instance(state),
                                 cluster_file=request.cluster)
        admission.record_cluster(state, cluster)  # submit refuses what this cluster can never run
        server = Server(state, cluster, executor, config, profiles=base, colocation=table)
        server.acquire(lock)
        api = start_api(server, tcp, tls)
        if metrics is not None:
            server.on_round_end = metrics.update
            server.on_round_failed = metrics.round_failed
            api.on_refused = metrics.api_refused
        server.serve(should_stop, max_rounds=request.max_rounds, on_round=on_round)
    finally:
        if api is not None:
            api.stop()
        elif tcp is not None:
            tcp.close()
        if server is not None and server.probes is not None:
            server.probes.shutdown()  # probes end with the server (groups of jobs run on)
        if metrics is not None:
            metrics.shutdown()


def private(state_dir: Path, users: str = "own") -> None:
    """The state directory is the server's alone (0700): other users reach the server through its socket, never
    its files (a directory of another user's is left as it is: the server refuses to take it elsewhere). With
    ``--users multi`` it, its ``jobs/`` and ``runs/`` are 0711: each job, run as its owner, must pass through them to
    its own directory (0700) and, under Slurm, its group's files (0600), all its owner's; nobody else may list
    them; ``state.db`` stays the server's (0600), and the server's umask becomes 077, so no file it or its
    supervisors write there can be read by a name guessed."""
    import os

    if users == "multi":  # what the server and its supervisors write under a traversable directory is theirs alone
        os.umask(0o077)
    if state_dir.stat().st_uid != os.geteuid():
        return
    mode = 0o711 if users == "multi" else 0o700
    os.chmod(state_dir, mode)
    if users == "multi":  # jobs/: each job's directory; runs/: a Slurm group's document and output, its owner's
        for sub in ("jobs", "runs"):
            (state_dir / sub).mkdir(exist_ok=True)
            os.chmod(state_dir / sub, mode)
    if (state_dir / "state.db").exists():
        os.chmod(state_dir / "state.db", 0o600)


def run_refusal(users: str, backend: str, owner_uid: int) -> str | None:
    """Why a job of ``owner_uid`` could never run on this server (``--users``: :func:`common.owners.may_run_as`),
    None when it can: a submission that would only fail when its group starts is refused at once."""
    import os

    from common.owners import REFUSE, may_run_as

    decision = may_run_as(os.getuid(), owner_uid, users, can_switch=backend != "ray", backend=backend)
    return decision.reason if decision.kind == REFUSE else None


def start_api(server: Server, tcp: Any, tls: Any) -> ApiServer:
    """The API's thread on the socket next to the state directory (and on ``tcp``); its calls run between rounds."""
    from scheduler.service.api.operations import Operations
    from scheduler.service.api.tokens import TokenStore

    ops = Operations(server.state, server.config.api, TokenStore(server.state.dir),
                     run_refusal=partial(run_refusal, server.config.users, server.executor.name))
    api = ApiServer(ops, socket_path(server.state.dir), server.config.api, tcp=tcp, tls=tls)
    api.start()
    server.idle = api.inbox.serve_for
    return api


def _instance(state: StateStore) -> str:
    """This state directory's instance name (it names the executor's detached groups), made once."""
    import uuid

    instance = state.meta("instance")
    if instance is None:
        instance = uuid.uuid4().hex[:8]
        with state.transaction() as db:
            db.set_meta("instance", instance)
    return instance
