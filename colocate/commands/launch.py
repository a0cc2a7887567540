"""``colocate launch ALLOCATION.json``: execute a scheduling decision — here, on Ray, or as Slurm/K8s files."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

from scheduler.executor.launch import LaunchRequest as _Defaults  # the defaults' one source


def register(app: typer.Typer) -> None:
    app.command("launch")(launch)


def _plan_table(plan: Any) -> Any:
    from rich.table import Table

    table = Table(title=f"{len(plan.groups)} GPU groups from {plan.source}")
    for column in ("group", "GPU type", "node", "GPUs", "sharing", "jobs", "runs"):
        table.add_column(column)
    for group in plan.groups:
        runs = "; ".join(f"{job.model}@{job.batch_size}" if job.builtin else f"$ {job.command}" for job in group.jobs)
        table.add_row(group.key, group.gpu_type, ",".join(map(str, group.nodes)), ",".join(map(str, group.gpus)),
                      group.sharing, group.label, runs)
    return table


def _report_table(report: Any) -> Any:
    from rich.table import Table

    table = Table(title="launch results" + (" (interrupted)" if report.interrupted else ""))
    for column in ("job", "group", "host", "state", "steps", "samples/s", "exit", "log / error"):
        table.add_column(column, overflow="fold")
    for job in report.jobs:
        rate = f"{job.samples_per_s:.1f}" if job.samples_per_s else ""
        steps = f"{job.step}/{job.steps}" if job.steps else str(job.step)
        exit_code = "" if job.exit_code is None else str(job.exit_code)
        table.add_row(job.job, job.group, job.host, job.state, steps, rate, exit_code, job.error or job.log)
    return table


class _JobBars:
    """A Rich progress bar per job (steps done / total, samples/s, state), fed by executor snapshots."""

    def __init__(self, progress: Any) -> None:
        self.progress = progress
        self.tasks: dict[str, Any] = {}

    def __call__(self, statuses: list[Any]) -> None:
        for status in statuses:
            if status.job not in self.tasks:
                self.tasks[status.job] = self.progress.add_task(status.job, total=status.steps, state="", rate="")
            rate = f"{status.samples_per_s:.1f} samples/s" if status.samples_per_s else ""
            self.progress.update(self.tasks[status.job], completed=status.step, total=status.steps,
                                 state=status.state, rate=rate)


def launch(
    allocation: Path = typer.Argument(..., metavar="ALLOCATION.json", help="Output of colocate schedule --json."),
    jobs: Optional[Path] = typer.Option(None, "--jobs", help="Jobs CSV given to colocate schedule (applications)."),
    cluster: Optional[Path] = typer.Option(None, "--cluster", help="Cluster YAML given to colocate schedule: "
                                                                   "refuse node or GPU indices outside it."),
    commands: Optional[Path] = typer.Option(None, "--commands", help="YAML: job or application -> shell command."),
    backend: str = typer.Option(_Defaults.backend, "--backend", help="local (this node) or ray (needs the ray extra)."),
    emit: Optional[tuple[str, Path]] = typer.Option(None, "--emit", metavar="slurm|k8s DIR",
                                                    help="Write sbatch scripts or pod manifests to DIR instead.",
                                                    show_default=False),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address for --backend ray."),
    node: Optional[str] = typer.Option(None, "--node", help="local: run the groups of TYPE:N (e.g. h100:0), or all."),
    sharing: str = typer.Option(_Defaults.sharing, "--sharing", help="How pairs share a GPU unless the allocation says "
                                                               "(a registered sharing mode: timeslice, mps)."),
    device: str = typer.Option(_Defaults.device, "--device", help="Built-in jobs train on: auto, cpu or cuda."),
    steps: int = typer.Option(_Defaults.steps, "--steps", help="Iterations per built-in job; 0 = until stopped."),
    duration: Optional[float] = typer.Option(None, "--duration", help="Stop every job after this many seconds."),
    threads: int = typer.Option(_Defaults.threads, "--threads", help="CPU threads per built-in job process."),
    image_size: Optional[int] = typer.Option(None, "--image-size", help="Input size of built-in jobs [32; "
                                                                         "imagenet: 224]."),
    log_dir: Optional[Path] = typer.Option(None, "--log-dir", help="Logs and progress files "
                                                                   "(default: launch-logs/ALLOCATION-NAME)."),
    grace: float = typer.Option(_Defaults.grace_s, "--grace", help="Seconds between SIGTERM and SIGKILL at teardown."),
    num_cpus: float = typer.Option(_Defaults.num_cpus, "--num-cpus", help="ray: CPUs each group task reserves."),
    sbatch_option: list[str] = typer.Option([], "--sbatch-option", help="slurm: extra #SBATCH line, e.g. "
                                                                        "--partition=gpu (repeatable)."),
    typed_gres: bool = typer.Option(_Defaults.typed_gres, "--typed-gres", help="slurm: --gres=gpu:TYPE:N instead of "
                                                                "--gres=gpu:N + --constraint=TYPE."),
    image: str = typer.Option(_Defaults.image, "--image", help="k8s: container image with colocate installed."),
    namespace: Optional[str] = typer.Option(None, "--namespace", help="k8s: namespace of the pods."),
    inventory: Optional[Path] = typer.Option(None, "--inventory", help="k8s: YAML of node names and GPU UUIDs."),
    as_json: bool = typer.Option(False, "--json", help="Print the final job statuses as JSON."),
) -> None:
    """Start the jobs of a packed placement: one group per GPU (solo or pair), logs and progress per job."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from colocate.commands._output import console, error_console
    from common.safe_load import json_text
    from scheduler.executor.launch import LaunchRequest
    from scheduler.executor.launch import launch as launch_allocation

    request = LaunchRequest(
        allocation=allocation, jobs=jobs, cluster=cluster, commands=commands, backend=backend, emit=emit,
        address=address, node=node, sharing=sharing, device=device, steps=steps, duration_s=duration, threads=threads,
        image_size=image_size,
        log_dir=log_dir, grace_s=grace, num_cpus=num_cpus, sbatch_options=tuple(sbatch_option), typed_gres=typed_gres,
        image=image, namespace=namespace, inventory=inventory,
    )

    def show_plan(plan: Any) -> None:
        if plan.not_launched:
            error_console.print(f"not launched (unallocated or unplaced): {', '.join(plan.not_launched)}")
        if emit is None and not as_json:
            console.print(_plan_table(plan))
            console.print(f"logs and progress files in {request.settings.log_dir}", highlight=False)

    bars = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("{task.fields[state]}"), TextColumn("{task.fields[rate]}"),
                    console=error_console, disable=as_json or emit is not None)
    with bars:
        outcome = launch_allocation(request, on_plan=show_plan, on_progress=_JobBars(bars))
    if outcome.emitted is not None:
        _print_emitted(outcome.plan, outcome.emitted, as_json)
        return
    report = outcome.report
    if report is None:  # launch() returns a report whenever it did not emit files
        raise RuntimeError("launch returned neither files nor a report")
    if as_json:
        print(json_text({"interrupted": report.interrupted, "jobs": [j.to_dict() for j in report.jobs]}, indent=2))
    else:
        console.print(_report_table(report))
    if report.interrupted:
        sys.exit(130)
    if not report.ok:
        sys.exit(1)


def _print_emitted(plan: Any, emitted: Any, as_json: bool) -> None:
    from colocate.commands._output import console
    from common.safe_load import json_text

    if as_json:
        print(json_text({"emit": emitted.kind, "files": [str(p) for p in emitted.files]}, indent=2))
        return
    console.print(_plan_table(plan))
    for path in emitted.files:
        console.print(f"wrote {path}", highlight=False)
    console.print(emitted.hint, highlight=False)
