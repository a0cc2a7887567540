"""What a job finds in its environment: the variables ``colocate serve`` / ``launch`` set, and torchrun's.

Read once, checked, into a :class:`JobEnv`. A variable that is set but not valid is an
:class:`~common.errors.InputError` naming it (a job started by hand with a typo fails in one line, never trains
with a silently ignored value); a variable that is unset takes the default of a job run outside the scheduler
(no checkpoint, no progress file, no target, no memory limit: the job runs until stopped).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from common.errors import InputError
from common.lr_scaling import LR_SCALING_ENV, check_lr_scaling


@dataclass(frozen=True)
class JobEnv:
    """One run's allocation and files (``COLOCATE_*``) and its place in a data-parallel world (torchrun's)."""

    job: str = "job"
    batch_size: int | None = None  # the global batch this run trains with (COLOCATE_BATCH_SIZE)
    num_gpus: int = 1
    gpu_type: str = ""
    partner: str = ""
    group: str = ""
    checkpoint: Path | None = None
    progress_file: Path | None = None
    job_dir: Path | None = None
    target_steps: int = 0  # 0: no target
    target_samples: int = 0
    memory_limit_bytes: int | None = None
    oom_file: Path | None = None
    lr_scaling: str | None = None  # the job file's learning-rate scaling (COLOCATE_LR_SCALING); None: not named
    world_size: int = 1
    rank: int = 0
    local_rank: int = 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _int(environ: Mapping[str, str], name: str, default: int | None, low: int) -> int | None:
    text = environ.get(name, "").strip()
    if not text:
        return default
    if not text.lstrip("-").isdigit() or int(text) < low:
        raise InputError(f"{text[:40]!r} is not an integer ≥ {low}", source="environment", field=name,
                         valid=f"an integer ≥ {low}, or unset")
    return int(text)


def _path(environ: Mapping[str, str], name: str) -> Path | None:
    text = environ.get(name, "")
    return Path(text) if text else None


def _lr_scaling(environ: Mapping[str, str]) -> str | None:
    text = environ.get(LR_SCALING_ENV, "").strip()
    return check_lr_scaling(text, source="environment", field=LR_SCALING_ENV) if text else None


def read_env(environ: Mapping[str, str] | None = None) -> JobEnv:
    """The :class:`JobEnv` of ``environ`` (default: this process's environment)."""
    env = os.environ if environ is None else environ
    world = _int(env, "WORLD_SIZE", 1, 1) or 1
    rank = _int(env, "RANK", 0, 0) or 0
    if rank >= world:
        raise InputError(f"rank {rank} is not below WORLD_SIZE {world}", source="environment", field="RANK",
                         valid=f"an integer in [0, {world})")
    return JobEnv(
        job=env.get("COLOCATE_JOB", "") or "job",
        batch_size=_int(env, "COLOCATE_BATCH_SIZE", None, 1),
        num_gpus=_int(env, "COLOCATE_NUM_GPUS", 1, 1) or 1,
        gpu_type=env.get("COLOCATE_GPU_TYPE", ""), partner=env.get("COLOCATE_PARTNER", ""),
        group=env.get("COLOCATE_GROUP", ""),
        checkpoint=_path(env, "COLOCATE_CHECKPOINT"), progress_file=_path(env, "COLOCATE_PROGRESS_FILE"),
        job_dir=_path(env, "COLOCATE_JOB_DIR"),
        target_steps=_int(env, "COLOCATE_TARGET_STEPS", 0, 0) or 0,
        target_samples=_int(env, "COLOCATE_TARGET_SAMPLES", 0, 0) or 0,
        memory_limit_bytes=_int(env, "COLOCATE_MEMORY_LIMIT_BYTES", None, 1),
        oom_file=_path(env, "COLOCATE_OOM_FILE"), lr_scaling=_lr_scaling(env),
        world_size=world, rank=rank, local_rank=_int(env, "LOCAL_RANK", 0, 0) or 0,
    )
