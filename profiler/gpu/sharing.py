"""The registry of GPU sharing modes: how two or three jobs share one GPU.

Each :class:`SharingMode` says everything a layer needs about a mode, so no code tests a mode's name:

* ``name`` (what specs, plans and results rows store) and ``label`` (a short name for messages);
* ``unavailable_reason(device)``: None when the mode can run on ``device``, else why not (a skip reason);
* ``enter(stack, physical_gpu, thread_percentage)``: set the mode up for one group on one GPU and return
  the environment its clients need; tear-down is registered on the ``ExitStack`` (the local executor);
* ``start_service(pin, nvml_index)`` / ``stop_service(handle)``: the set-up and tear-down of a service that
  outlives one run (the MPS daemon a profiling campaign's warm workers stay clients of); None: the mode
  needs no service and its workers are plain CUDA processes (the profiler's worker pool);
* ``worker_environment(handle, private_root, base_env, thread_percentage)``: what a profiler worker of the
  mode gets (:class:`WorkerEnvironment`); plain modes isolate their workers from every MPS daemon;
* ``check_clients(handle, workers)``: why a run's workers are not served by the service (they ran as
  plain CUDA), or None: the proof the profiler asks for before it trusts a run;
* ``slurm_setup`` / ``slurm_teardown``: the same set-up and tear-down as bash lines for a Slurm batch
  script (``scheduler.executor.slurm``: launch's scripts and serve's batch jobs); the tear-down runs in its ``cleanup`` trap;
* ``k8s_mode``: the HAMi ``nvidia.com/vgpu-mode`` annotation for co-located pods (``scheduler.executor.k8s``);
* ``thread_partitions``: whether ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``-style SM partitions apply, which
  makes cells of this mode carry a percentage and labels like ``mps50``;
* ``client_memory_env(limit_bytes, devices)``: what one client's environment needs so that the mode itself holds
  it to ``limit_bytes`` of each of its ``devices`` GPUs (MPS: the client's pinned device-memory limit,
  ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``); ``{}`` where the mode has no such limit (time-slicing: the job's own
  allocator cap is the limit, ``colocate serve``'s trainer sets it);
* ``owns_devices``: the mode's service owns the group's GPUs and shows them to its clients renumbered from 0 (MPS:
  a daemon started with ``CUDA_VISIBLE_DEVICES``), so a client must not narrow them again;
  :meth:`SharingMode.client_environment` builds a client's environment from the group's accordingly — the one
  place every executor (``colocate serve``'s supervisor on every backend, ``colocate launch``) takes it from;
* ``one_user_at_a_time``: the mode's service serves one Unix user at a time (legacy MPS: a second user's clients
  wait until the first user's end), so the scheduler never groups jobs of several owners with it unless the GPU
  type says its MPS is multi-user (:mod:`scheduler.model.owners`).

To add a mode, build a :class:`SharingMode` and :func:`register_sharing_mode` it (see ARCHITECTURE.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.errors import SharingUnavailable
from profiler.gpu.mps import (
    MpsDaemon,
    mps_daemon,
    mps_unavailable_reason,
    pinned_memory_env,
    start_daemon,
    stop_daemon,
)
from profiler.gpu.nvml import mps_client_pids

SHARING_SOLO = "none"  # solo runs share nothing; their t is reused by every sharing mode


def _always_available(device: str) -> str | None:
    return None


def _no_environment(stack: ExitStack, physical_gpu: str | None, thread_percentage: int | None) -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class WorkerEnvironment:
    """A profiler worker's environment: ``env`` is set and ``unset`` removed (after every inherited
    ``CUDA_MPS_*`` variable is dropped); ``pipe_dir`` is the ``CUDA_MPS_PIPE_DIRECTORY`` its hello must report."""

    env: dict[str, str]
    unset: tuple[str, ...] = ()
    pipe_dir: str | None = None


def isolated_worker_environment(handle: Any, private_root: Path, base_env: Mapping[str, str],
                                thread_percentage: int | None) -> WorkerEnvironment:
    """Plain CUDA workers get a private, empty MPS pipe directory: no MPS daemon on the host can capture them."""
    pipe = str(private_root / "pipe")
    env = {**base_env, "CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_LOG_DIRECTORY": str(private_root / "log")}
    return WorkerEnvironment(env, (), pipe)


def _no_memory_limit(limit_bytes: int, devices: int) -> dict[str, str]:
    return {}


def _nothing_to_stop(handle: Any) -> bool:
    return True


def _nothing_to_prove(handle: Any, workers: Sequence[tuple[str, int]]) -> str | None:
    return None


@dataclass(frozen=True)
class SharingMode:
    """One way of sharing a GPU; see the module docstring for what each field is used for."""

    name: str
    label: str
    unavailable_reason: Callable[[str], str | None] = _always_available
    enter: Callable[[ExitStack, str | None, int | None], dict[str, str]] = _no_environment
    slurm_setup: tuple[str, ...] = ()
    slurm_teardown: tuple[str, ...] = ()
    k8s_mode: str = "hami-core"
    thread_partitions: bool = False
    start_service: Callable[[str | None, int | None], Any] | None = None
    stop_service: Callable[[Any], bool] = _nothing_to_stop
    worker_environment: Callable[[Any, Path, Mapping[str, str], int | None], WorkerEnvironment] = (
        isolated_worker_environment)
    check_clients: Callable[[Any, Sequence[tuple[str, int]]], str | None] = _nothing_to_prove
    client_memory_env: Callable[[int, int], dict[str, str]] = _no_memory_limit
    owns_devices: bool = False
    shared: bool = True  # False only for the solo pseudo-mode
    one_user_at_a_time: bool = False  # its service serves one Unix user at a time (legacy MPS): owners do not mix

    def client_environment(self, group_env: Mapping[str, str], limit_bytes: int | None = None) -> dict[str, str]:
        """One client's environment, built from its group's: ``group_env`` is the environment the mode was set up in
        — its ``CUDA_VISIBLE_DEVICES`` the group's GPUs — plus what :attr:`enter` returned (or, in a Slurm batch
        script, what ``slurm_setup`` exported). Where the mode's service owns the GPUs (MPS) the client gets no
        ``CUDA_VISIBLE_DEVICES``: the daemon shows it the group's GPUs as 0..n-1, and narrowing them again by the
        daemon's indices finds none for a group not on GPU 0 (NVIDIA's MPS documentation, "CUDA_VISIBLE_DEVICES").
        A memory limit (``limit_bytes`` per GPU) names every GPU of the group as the client enumerates it."""
        gpus = [g for g in group_env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
        env = dict(group_env)
        if self.owns_devices:
            env.pop("CUDA_VISIBLE_DEVICES", None)
        if limit_bytes:
            env.update(self.client_memory_env(int(limit_bytes), max(len(gpus), 1)))
        return env

    def mode_label(self, thread_percentage: Any = None) -> str:
        """``timeslice``, ``mps`` or ``mps50`` (a thread partition of 50 % of the SMs)."""
        if not self.thread_partitions or thread_percentage is None:
            return self.name
        if isinstance(thread_percentage, float) and math.isnan(thread_percentage):
            return self.name
        try:
            return f"{self.name}{int(thread_percentage)}"
        except (TypeError, ValueError):  # pandas' NA and friends: no partition recorded
            return self.name


def _enter_mps(stack: ExitStack, physical_gpu: str | None, thread_percentage: int | None) -> dict[str, str]:
    if not physical_gpu:
        raise SharingUnavailable("MPS needs a CUDA device (no GPU is assigned to this group)")
    daemon = stack.enter_context(mps_daemon(physical_gpu))
    return daemon.client_env(thread_percentage)


def _start_mps(pin: str | None, nvml_index: int | None) -> MpsDaemon:
    return start_daemon(pin, nvml_index=nvml_index)


def _mps_worker_environment(daemon: MpsDaemon, private_root: Path, base_env: Mapping[str, str],
                            thread_percentage: int | None) -> WorkerEnvironment:
    # The daemon owns the device (pinned by UUID): a client must not narrow CUDA_VISIBLE_DEVICES itself.
    return WorkerEnvironment(daemon.client_env(thread_percentage), ("CUDA_VISIBLE_DEVICES",), str(daemon.pipe_dir))


def _check_mps_clients(daemon: MpsDaemon, workers: Sequence[tuple[str, int]]) -> str | None:
    """Every worker must be a client of our daemon (proof, not assumption)."""
    missing = daemon.missing_clients([pid for _, pid in workers], mps_client_pids)
    if not missing:
        return None
    names = ", ".join(f"{name} (pid {pid})" for name, pid in workers if pid in missing)
    return (f"not an MPS client of our daemon: {names} — neither get_client_list nor NVML lists it, so it ran "
            f"as plain CUDA; partners stopped")


_MPS_SLURM_SETUP = (
    "# private MPS control daemon for this GPU group (pipe/log dirs 0700, exported to both jobs)",
    'MPS_ROOT="$(mktemp -d "${TMPDIR:-/tmp}/colocate-mps.XXXXXX")"',
    'chmod 700 "$MPS_ROOT"',
    'export CUDA_MPS_PIPE_DIRECTORY="$MPS_ROOT/pipe" CUDA_MPS_LOG_DIRECTORY="$MPS_ROOT/log"',
    'mkdir -m 700 "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"',
    'nvidia-cuda-mps-control -d || { echo "colocate: could not start the MPS daemon" >&2; exit 1; }',
    "MPS_STARTED=1",
    "",
)
_MPS_SLURM_TEARDOWN = (
    "  # quit only the daemon this script started (its pipe directory is private), after its clients",
    '  if [[ -n "$MPS_STARTED" ]]; then echo quit | nvidia-cuda-mps-control || true; fi',
    '  if [[ -n "$MPS_ROOT" ]]; then rm -rf "$MPS_ROOT"; fi',
)

_REGISTRY: dict[str, SharingMode] = {}


def register_sharing_mode(mode: SharingMode) -> SharingMode:
    """Add ``mode`` to the registry (a name can be registered once)."""
    if mode.name in _REGISTRY:
        raise ValueError(f"sharing mode {mode.name!r} is already registered")
    _REGISTRY[mode.name] = mode
    return mode


def sharing_mode(name: str) -> SharingMode:
    """The registered mode called ``name`` (including the solo pseudo-mode ``none``)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown sharing mode {name!r} (valid: {', '.join(sharing_mode_names())})") from None


def sharing_mode_names() -> tuple[str, ...]:
    """Names of the modes a user may ask for (every registered mode but solo), in registration order."""
    return tuple(name for name, mode in _REGISTRY.items() if mode.shared)


def sharing_label(name: Any, thread_percentage: Any = None) -> str:
    """What users read for a stored ``(sharing, mps_thread_percentage)``; unknown names are shown as they are."""
    mode = _REGISTRY.get(str(name))
    return mode.mode_label(thread_percentage) if mode is not None else str(name)


register_sharing_mode(SharingMode(SHARING_SOLO, "solo", shared=False))
register_sharing_mode(SharingMode("timeslice", "time-slicing"))  # CUDA's default for several processes
register_sharing_mode(SharingMode(
    "mps", "MPS",  # NVIDIA Multi-Process Service
    unavailable_reason=mps_unavailable_reason, enter=_enter_mps,
    slurm_setup=_MPS_SLURM_SETUP, slurm_teardown=_MPS_SLURM_TEARDOWN,
    k8s_mode="mps", thread_partitions=True, one_user_at_a_time=True,
    start_service=_start_mps, stop_service=stop_daemon, worker_environment=_mps_worker_environment,
    check_clients=_check_mps_clients, client_memory_env=pinned_memory_env, owns_devices=True,
))

SHARING_MODES: tuple[str, ...] = sharing_mode_names()  # the modes at import time; later registrations: call the function
