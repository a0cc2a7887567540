"""Write one sbatch script per GPU group: Slurm allocates the GPU, the script runs both jobs on it.

Slurm's own GPU sharing (``--gres=shard``, ``--gres=mps``) has no way to say *which* job shares with
which, so a packed pair is one Slurm job asking for one whole GPU (``--gres=gpu:1``; a group's GPU count
in general) on a node with the group's GPU type (``--constraint=<gpu_type>``: sites that name GPU types as
GRES types can ask for ``--gres=gpu:<type>:N`` instead, see :class:`SlurmOptions`). The script

* starts a private MPS control daemon when the group shares by MPS (pipe and log directories from
  ``mktemp -d``, mode 0700, exported to the daemon and both jobs) and quits exactly that daemon in an
  ``EXIT`` trap, after the jobs are gone;
* starts every job of the group in the background in its own session, logging to ``$LOG_DIR/<job>.log``,
  with ``COLOCATE_CHECKPOINT=$LOG_DIR/<job>.checkpoint.pt`` (the built-in trainer saves it when stopped and
  restores it when the script runs again);
* forwards SIGTERM (``scancel``, and ``--signal=B:TERM@60`` before the time limit) to the jobs' process
  groups, gives them ``grace`` seconds, then SIGKILLs them;
* exits with the first non-zero job status.

A solo job spanning several nodes becomes ``--nodes=K`` with ``srun`` starting ``torchrun`` (c10d
rendezvous on the first node) on each. ``submit_all.sh`` submits every script.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from common.names import comment_text, safe_name
from profiler.gpu.sharing import sharing_mode
from scheduler.executor.command import TRAINER_MODULE, RunSettings, job_argv
from scheduler.executor.plan import GpuGroup, JobLaunch, LaunchPlan, job_environment

PYTHON_VARIABLE = '"$PYTHON"'
RENDEZVOUS_PORT = 29500


@dataclass(frozen=True)
class SlurmOptions:
    """What the scripts ask Slurm for besides the GPUs."""

    log_dir: str = "logs"  # where jobs log on the cluster (relative to the submit directory)
    typed_gres: bool = False  # --gres=gpu:<type>:N instead of --gres=gpu:N + --constraint=<type>
    cpus_per_job: int = 4
    extra: tuple[str, ...] = ()  # more #SBATCH options, e.g. "--partition=gpu", "--time=04:00:00"
    grace_s: int = 30
    python: str = "python3"  # default interpreter on the nodes (COLOCATE_PYTHON overrides it at run time)


def _job_line(job: JobLaunch, group: GpuGroup, run: RunSettings) -> str:
    """The shell line that starts one job in the background, in its own session, with its environment."""
    progress = f"$LOG_DIR/{safe_name(job.name)}.progress.json"
    env = {**job_environment(job, group)}
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    assignments += f' COLOCATE_PROGRESS_FILE="{progress}"'
    # the checkpoint a stopped job writes (scancel, the time limit) and the same script resumes from
    assignments += f' COLOCATE_CHECKPOINT="$LOG_DIR/{safe_name(job.name)}.checkpoint.pt"'
    log = f'"$LOG_DIR/{safe_name(job.name)}.log"'
    if group.multi_node:
        command = _multi_node_command(job, group, run, progress)
    else:
        argv = job_argv(job, run, python="PYTHON", progress_file="PROGRESS")
        command = _render(argv, progress)
    # a client of a mode that owns the group's GPUs (MPS) must not narrow them again (SharingMode.owns_devices)
    unset = "-u CUDA_VISIBLE_DEVICES " if sharing_mode(group.sharing).owns_devices else ""
    return f"env {unset}{assignments} setsid {command} > {log} 2>&1 &"


def _render(argv: list[str], progress: str) -> str:
    """shlex-quote an argv, keeping the $PYTHON and progress-file shell variables expandable."""
    parts = []
    for arg in argv:
        if arg == "PYTHON":
            parts.append(PYTHON_VARIABLE)
        elif arg == "PROGRESS":
            parts.append(f'"{progress}"')
        else:
            parts.append(shlex.quote(arg))
    return " ".join(parts)


def _multi_node_command(job: JobLaunch, group: GpuGroup, run: RunSettings, progress: str) -> str:
    if job.command is not None:
        return f"srun --kill-on-bad-exit=1 /bin/sh -c {shlex.quote(job.command)}"
    single = job_argv(job, run, python="PYTHON", progress_file="PROGRESS")
    trainer = single[single.index(TRAINER_MODULE) - 1:]  # "-m scheduler.executor.train --job ..."
    torchrun = ["srun", "--kill-on-bad-exit=1", "PYTHON", "-m", "torch.distributed.run",
                f"--nnodes={len(group.nodes)}", f"--nproc-per-node={group.gpus_per_node}",
                "--rdzv-backend=c10d", "--rdzv-id=RDZV_ID", "--rdzv-endpoint=RDZV_ENDPOINT", *trainer]
    text = _render(torchrun, progress)
    return (text.replace("--rdzv-id=RDZV_ID", '--rdzv-id="$SLURM_JOB_ID"')
            .replace("--rdzv-endpoint=RDZV_ENDPOINT", f'--rdzv-endpoint="$HEAD_NODE:{RENDEZVOUS_PORT}"'))


def render_script(group: GpuGroup, run: RunSettings, options: SlurmOptions, source: str = "") -> str:
    """The sbatch script of one GPU group."""
    gres = f"gpu:{group.gpu_type}:{group.gpus_per_node}" if options.typed_gres else f"gpu:{group.gpus_per_node}"
    processes = group.gpus_per_node if group.multi_node else len(group.jobs)  # per node
    lines = [
        "#!/bin/bash",
        comment_text(f"# colocate launch --emit slurm{f' ({source})' if source else ''}: GPU group {group.key}"),
        comment_text(f"#   {group.label} on {group.where}; sharing: {group.sharing}"),
        f"#   submit: sbatch {group.slug}.sbatch",
        f"#SBATCH --job-name=colocate-{group.slug}",
        f"#SBATCH --nodes={len(group.nodes)}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gres={gres}",
        f"#SBATCH --cpus-per-task={options.cpus_per_job * processes}",
        f"#SBATCH --output={options.log_dir}/%x-%j.out",
        "#SBATCH --signal=B:TERM@60",
    ]
    if not options.typed_gres:
        lines.append(f"#SBATCH --constraint={group.gpu_type}")
    lines += [f"#SBATCH {extra}" for extra in options.extra]
    lines += [
        "",
        "set -uo pipefail",
        f'PYTHON="${{COLOCATE_PYTHON:-{options.python}}}"',
        f'LOG_DIR="${{COLOCATE_LOG_DIR:-{options.log_dir}}}"',
        'mkdir -p "$LOG_DIR"',
        "PIDS=()",
        "NAMES=()",
        'MPS_ROOT=""',
        'MPS_STARTED=""',
        "",
        "cleanup() {",
        "  trap - EXIT INT TERM",
        '  for pid in "${PIDS[@]+"${PIDS[@]}"}"; do',
        '    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true',
        "  done",
        '  for pid in "${PIDS[@]+"${PIDS[@]}"}"; do',
        f"    for _ in $(seq 1 {options.grace_s}); do kill -0 \"$pid\" 2>/dev/null || break; sleep 1; done",
        '    kill -KILL -- "-$pid" 2>/dev/null || true',
        "  done",
    ]
    lines += sharing_mode(group.sharing).slurm_teardown
    lines += [
        "}",
        "trap cleanup EXIT",
        "trap 'exit 143' TERM",
        "trap 'exit 130' INT",
        "",
    ]
    if group.multi_node:
        lines += ['HEAD_NODE="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"', ""]
    lines += sharing_mode(group.sharing).slurm_setup
    for job in group.jobs:
        lines += [comment_text(f"# job {job.name}: {'model ' + str(job.model) if job.builtin else 'user command'}, "
                               f"global batch {job.batch_size}"),
                  _job_line(job, group, run),
                  f"PIDS+=($!); NAMES+=({shlex.quote(job.name)})"]
    lines += [
        "",
        "status=0",
        'for i in "${!PIDS[@]}"; do',
        '  if wait "${PIDS[$i]}"; then',
        '    echo "colocate: job ${NAMES[$i]} finished"',
        "  else",
        "    rc=$?",
        '    echo "colocate: job ${NAMES[$i]} failed with status $rc" >&2',
        '    [[ "$status" -eq 0 ]] && status=$rc',
        "  fi",
        "done",
        'exit "$status"',
        "",
    ]
    return "\n".join(lines)


def emit_slurm(plan: LaunchPlan, out_dir: str | Path, run: RunSettings, options: SlurmOptions) -> list[Path]:
    """Write ``<group>.sbatch`` per GPU group and ``submit_all.sh``; returns the scripts written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for group in plan.groups:
        path = out / f"{group.slug}.sbatch"
        path.write_text(render_script(group, run, options, plan.source))
        path.chmod(0o755)
        written.append(path)
    submit = out / "submit_all.sh"
    submit.write_text("\n".join([
        "#!/bin/bash",
        "# Submit every GPU group of the allocation (one Slurm job each).",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        f"mkdir -p {shlex.quote(options.log_dir)}",
        *[f"sbatch {shlex.quote(p.name)}" for p in written],
        "",
    ]))
    submit.chmod(0o755)
    return written
