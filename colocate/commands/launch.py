"""``colocate launch ALLOCATION.json``: execute a scheduling decision — here, on Ray, or as Slurm/K8s files."""

from __future__ import annotations

import sys
from typing import Any

from colocate import cli_kit
from colocate.cli_config import ConfigSpec, config_command, input_option
from scheduler.executor.launch import LaunchRequest


def register(app: cli_kit.App) -> None:
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


@config_command(ConfigSpec("launch", LaunchRequest))
def launch(
    as_json: bool = input_option("as_json", False),
    *,
    launch: LaunchRequest,
) -> None:
    """Start the jobs of a packed placement: one group per GPU (solo or pair), logs and progress per job."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from colocate.commands._output import console, error_console
    from common.safe_load import json_text
    from scheduler.executor.launch import launch as launch_allocation

    request, emit = launch, launch.emit

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
