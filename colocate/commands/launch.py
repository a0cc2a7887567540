"""``colocate launch ALLOCATION.json``: execute a scheduling decision — here, on Ray, or as Slurm/K8s files."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional, Tuple

import typer


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
    commands: Optional[Path] = typer.Option(None, "--commands", help="YAML: job or application -> shell command."),
    backend: str = typer.Option("local", "--backend", help="local (this node) or ray (needs the ray extra)."),
    emit: Optional[Tuple[str, Path]] = typer.Option(None, "--emit", metavar="slurm|k8s DIR",
                                                    help="Write sbatch scripts or pod manifests to DIR instead.",
                                                    show_default=False),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address for --backend ray."),
    node: Optional[str] = typer.Option(None, "--node", help="local: run the groups of TYPE:N (e.g. h100:0), or all."),
    sharing: str = typer.Option("timeslice", "--sharing", help="How pairs share a GPU unless the allocation says: "
                                                               "timeslice or mps."),
    device: str = typer.Option("auto", "--device", help="Built-in jobs train on: auto, cpu or cuda."),
    steps: int = typer.Option(0, "--steps", help="Iterations per built-in job; 0 = until stopped."),
    duration: Optional[float] = typer.Option(None, "--duration", help="Stop every job after this many seconds."),
    threads: int = typer.Option(1, "--threads", help="CPU threads per built-in job process."),
    image_size: Optional[int] = typer.Option(None, "--image-size", help="Input size of built-in jobs [32; "
                                                                         "imagenet: 224]."),
    log_dir: Optional[Path] = typer.Option(None, "--log-dir", help="Logs and progress files "
                                                                   "(default: launch-logs/ALLOCATION-NAME)."),
    grace: float = typer.Option(10.0, "--grace", help="Seconds between SIGTERM and SIGKILL at teardown."),
    num_cpus: float = typer.Option(1.0, "--num-cpus", help="ray: CPUs each group task reserves."),
    sbatch_option: list[str] = typer.Option([], "--sbatch-option", help="slurm: extra #SBATCH line, e.g. "
                                                                        "--partition=gpu (repeatable)."),
    typed_gres: bool = typer.Option(False, "--typed-gres", help="slurm: --gres=gpu:TYPE:N instead of "
                                                                "--gres=gpu:N + --constraint=TYPE."),
    image: str = typer.Option("colocate:latest", "--image", help="k8s: container image with colocate installed."),
    namespace: Optional[str] = typer.Option(None, "--namespace", help="k8s: namespace of the pods."),
    inventory: Optional[Path] = typer.Option(None, "--inventory", help="k8s: YAML of node names and GPU UUIDs."),
    as_json: bool = typer.Option(False, "--json", help="Print the final job statuses as JSON."),
) -> None:
    """Start the jobs of a packed placement: one group per GPU (solo or pair), logs and progress per job."""
    from colocate.commands._output import console, error_console
    from colocate.errors import InputError
    from scheduler.executor.command import RunSettings
    from scheduler.executor.local import LaunchSettings
    from scheduler.executor.plan import SHARING_MODES, load_plan, safe_name

    if sharing not in SHARING_MODES:
        raise InputError(f"unknown sharing mode {sharing!r}", field="--sharing", valid=", ".join(SHARING_MODES))
    if device not in ("auto", "cpu", "cuda"):
        raise InputError(f"unknown device {device!r}", field="--device", valid="auto, cpu, cuda")
    for name, value, low in (("--steps", steps, 0), ("--threads", threads, 1)):
        if value < low:
            raise InputError(f"{value}", field=name, valid=f"an integer >= {low}")
    if duration is not None and duration <= 0:
        raise InputError(f"{duration}", field="--duration", valid="seconds > 0")
    plan = load_plan(allocation, jobs_path=jobs, commands_path=commands, sharing=sharing, image_size=image_size)
    if not plan.groups:
        raise InputError("allocates no job", source=allocation, field="allocations", valid="at least one placed job")
    run = RunSettings(device=device, steps=steps, threads=threads)
    if plan.not_launched:
        error_console.print(f"not launched (unallocated or unplaced): {', '.join(plan.not_launched)}")

    emit_kind, emit_dir = emit if emit else (None, None)
    if emit_kind is not None:
        from scheduler.executor.k8s import K8sOptions, emit_k8s, load_inventory
        from scheduler.executor.slurm import SlurmOptions, emit_slurm

        if emit_kind == "slurm":
            for option in sbatch_option:
                if not option.startswith("--"):
                    raise InputError(f"{option!r}", field="--sbatch-option",
                                     valid="an sbatch option such as --time=04:00:00")
            written = emit_slurm(plan, emit_dir, run, SlurmOptions(extra=tuple(sbatch_option), typed_gres=typed_gres,
                                                                   grace_s=int(grace)))
            hint = f"submit with {Path(emit_dir) / 'submit_all.sh'}"
        elif emit_kind == "k8s":
            inv = load_inventory(inventory) if inventory is not None else None
            written = emit_k8s(plan, emit_dir, run, K8sOptions(image=image, namespace=namespace), inv,
                               str(inventory) if inventory else "<inventory>")
            hint = f"apply with kubectl apply -f {emit_dir}" + ("" if inv else
                                                                  " after filling in the GPU-UUID placeholders "
                                                                  "(or pass --inventory)")
        else:
            raise InputError(f"unknown emitter {emit_kind!r}", field="--emit", valid="slurm DIR, k8s DIR")
        if as_json:
            print(json.dumps({"emit": emit_kind, "files": [str(p) for p in written]}, indent=2))
            return
        console.print(_plan_table(plan))
        for path in written:
            console.print(f"wrote {path}", highlight=False)
        console.print(hint, highlight=False)
        return

    settings = LaunchSettings(run=run, log_dir=(log_dir or Path("launch-logs") / safe_name(allocation.stem)).resolve(),
                              duration_s=duration, stop_grace_s=grace)
    from scheduler.executor.registry import make_executor

    executor = make_executor(backend, address=address, num_cpus=num_cpus)
    if executor.name == "local":
        keys = plan.node_keys()
        if node is None and len(keys) > 1:
            raise InputError(f"the allocation uses {len(keys)} nodes: " + ", ".join(f"{t}:{n}" for t, n in keys),
                             field="--node", valid="one of them (this node), 'all' to run every group here, "
                                                   "or --backend ray / --emit slurm DIR")
        if node is not None and node != "all":
            gpu_type, _, index = node.partition(":")
            if not index.isdigit() or (gpu_type, int(index)) not in keys:
                raise InputError(f"{node!r}", field="--node",
                                 valid=", ".join(f"{t}:{n}" for t, n in keys) + ", all")
            plan = plan.on_node(gpu_type, int(index))
        executor.check(plan, settings)  # Ray checks the cluster inside run, once connected
    if not as_json:
        console.print(_plan_table(plan))
        console.print(f"logs and progress files in {settings.log_dir}", highlight=False)

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bars = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("{task.fields[state]}"), TextColumn("{task.fields[rate]}"),
                    console=error_console, disable=as_json)
    with bars:
        on_progress = _JobBars(bars)
        report = executor.run(plan, settings, on_progress=on_progress)
    if as_json:
        print(json.dumps({"interrupted": report.interrupted, "jobs": [j.to_dict() for j in report.jobs]}, indent=2))
    else:
        console.print(_report_table(report))
    if report.interrupted:
        sys.exit(130)
    if not report.ok:
        sys.exit(1)
