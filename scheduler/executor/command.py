"""How a job's process is started: the command line of the built-in trainer or the user's shell command.

Shared by the local and Ray executors (which run it) and the Slurm and Kubernetes emitters (which write it
into scripts and manifests), so every backend starts a job the same way.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from scheduler.executor.plan import JobLaunch

TRAINER_MODULE = "scheduler.executor.train"
# exec the job with PR_SET_PDEATHSIG set (kept across execve), without running Python code in a forked
# child of a possibly multi-threaded launcher (a Ray worker, for one).
PDEATHSIG_EXEC = ("import ctypes, os, signal, sys; ctypes.CDLL('libc.so.6').prctl(1, signal.SIGKILL); "
                   "os.getppid() == int(sys.argv[1]) or sys.exit(1); os.execvp(sys.argv[2], sys.argv[2:])")


@dataclass(frozen=True)
class RunSettings:
    """Knobs for built-in jobs (user commands ignore them but get the same environment)."""

    device: str = "auto"  # auto | cpu | cuda — what the built-in trainer trains on
    steps: int = 0  # iterations per built-in job; 0 = until stopped
    threads: int = 1  # CPU threads per built-in job process
    log_every: int = 50  # a log line every this many steps


def job_argv(job: JobLaunch, settings: RunSettings, *, python: str = sys.executable,
             progress_file: str | None = None) -> list[str]:
    """The argv that runs ``job``: the trainer (under torchrun for several GPUs) or ``sh -c COMMAND``."""
    if job.command is not None:
        return ["/bin/sh", "-c", job.command]
    assert job.model is not None
    trainer = ["-m", TRAINER_MODULE, "--job", job.name, "--model", job.model, "--batch-size", str(job.batch_size),
               "--image-size", str(job.image_size), "--device", settings.device, "--steps", str(settings.steps),
               "--threads", str(settings.threads), "--log-every", str(settings.log_every)]
    if progress_file is not None:
        trainer += ["--progress-file", progress_file]
    if job.num_gpus > 1:  # one process per GPU of this node, data-parallel (DDP) inside the trainer
        return [python, "-m", "scheduler.executor.quiet_torchrun", "--standalone", f"--nproc-per-node={job.num_gpus}",
                *trainer]
    return [python, *trainer]
