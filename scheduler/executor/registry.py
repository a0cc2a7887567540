"""Executors by name, all behind :class:`scheduler.executor.base.Executor` (like :mod:`scheduler.policies`).

=========  =====================================================================================
``local``  this node: processes, MPS per group when asked (:mod:`scheduler.executor.local`)
``ray``    a Ray cluster: one whole-GPU task or actor per group on a node of its GPU type
           (:mod:`scheduler.executor.ray.backend`; needs the ``ray`` extra)
``slurm``  a Slurm cluster, for ``colocate serve``: one batch job per group, GPUs as GRES of its type
           (:mod:`scheduler.executor.slurm.live`; Slurm's commands on PATH)
=========  =====================================================================================

For ``colocate launch``, Slurm and Kubernetes are emitters (they write scripts, nothing runs here):
:mod:`scheduler.executor.slurm.emit`, :mod:`scheduler.executor.k8s`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.errors import InputError
from scheduler.executor.base import Executor


@dataclass(frozen=True)
class ExecutorSpec:
    name: str
    description: str
    factory: Callable[..., Executor]
    launches: bool = True  # `colocate launch --backend NAME` runs a plan on it (else: serve only)


def _local(**options: Any) -> Executor:
    from scheduler.executor.local import LocalExecutor

    return LocalExecutor()


def _ray(**options: Any) -> Executor:
    from profiler.campaign.ray_backend import require_ray
    from scheduler.executor.ray.backend import RayExecutor

    require_ray()
    return RayExecutor(address=options.get("address"), num_cpus=options.get("num_cpus", 0.0),
                       instance=options.get("instance", "default"))


def _slurm(**options: Any) -> Executor:
    import shutil

    from scheduler.executor.slurm.live import SlurmExecutor, check_controller
    from scheduler.executor.slurm.settings import SlurmSettings, load_slurm_settings

    missing = [c for c in ("sbatch", "squeue", "scancel", "scontrol") if shutil.which(c) is None]
    if missing:
        raise InputError(f"Slurm's {', '.join(missing)} not found on PATH", field="backend",
                         valid="a machine that submits jobs to your Slurm cluster (Debian: apt-get install slurm-client)")
    cluster = options.get("cluster_file")
    settings = load_slurm_settings(cluster) if cluster is not None else SlurmSettings()
    check_controller()  # a client without a reachable controller would fail every sbatch: refused up front
    return SlurmExecutor(settings, instance=options.get("instance", "default"))


EXECUTORS: dict[str, ExecutorSpec] = {
    s.name: s for s in (
        ExecutorSpec("local", "this node: one process per job, MPS per group when asked", _local),
        ExecutorSpec("ray", "a Ray cluster: whole-GPU groups routed by accelerator_type", _ray),
        ExecutorSpec("slurm", "a Slurm cluster: one batch job per group (colocate serve)", _slurm, launches=False),
    )
}
EXECUTOR_NAMES: tuple[str, ...] = tuple(EXECUTORS)
LAUNCH_BACKENDS: tuple[str, ...] = tuple(name for name, spec in EXECUTORS.items() if spec.launches)


def make_executor(name: str, **options: Any) -> Executor:
    """The executor called ``name``; options it does not use are ignored (``address``, ``num_cpus``, ...)."""
    spec = EXECUTORS.get(name.strip().lower())
    if spec is None:
        raise InputError(f"unknown backend {name!r}", field="backend", valid=", ".join(EXECUTOR_NAMES))
    return spec.factory(**options)


__all__ = ["EXECUTORS", "EXECUTOR_NAMES", "LAUNCH_BACKENDS", "ExecutorSpec", "make_executor"]
