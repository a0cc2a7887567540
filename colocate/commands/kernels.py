"""``colocate kernels SPEC.yaml --out DIR``: kernel-level profile of every model × batch size, each run alone."""

from __future__ import annotations

from pathlib import Path

from colocate import cli_kit
from colocate.cli_config import input_option


def register(app: cli_kit.App) -> None:
    app.command("kernels")(kernels)


def kernels(
    spec_path: Path = cli_kit.Argument(..., metavar="SPEC.yaml", help="Campaign file: models, batch_sizes, image_size, device."),
    out: Path = input_option("out", show_default="results/<name>-kernels"),
    backend: str = cli_kit.Option("torch", "--backend", help="torch (PyTorch profiler) or ncu (Nsight Compute, CUDA)."),
    iters: int = cli_kit.Option(2, "--iters", min=1, help="Profiled iterations after warm-up."),
    force: bool = cli_kit.Option(False, "--force", help="Profile job types already in kernels.parquet again."),
    plots: bool = cli_kit.Option(True, "--plots/--no-plots", help="Write the bar and histogram PNGs."),
) -> None:
    """Record every kernel (CPU: every operator) of two iterations per job type into kernels.parquet + plots."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from colocate.analysis.kernel_store import profile_spec_kernels
    from colocate.commands._output import console, error_console
    from profiler.campaign.spec import load_spec

    spec = load_spec(spec_path)
    out = out or Path("results") / f"{spec.name}-kernels"
    progress = Progress(TextColumn("[bold]kernels"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[last]}"), console=error_console)
    task = progress.add_task("kernels", total=None, last="")

    def job_done(job_type: str, rows: int | None, error: str | None) -> None:
        if error is not None:
            error_console.print(f"[yellow]{job_type}: {error}[/]")
        progress.update(task, advance=1, last=f"{job_type} failed" if error is not None else f"{job_type}: {rows} rows")

    with progress:
        table = profile_spec_kernels(spec, spec_path, out, backend=backend, iters=iters, force=force,
                                     on_start=lambda todo: progress.update(task, total=todo), on_job=job_done)
    if table.empty:
        console.print(f"no kernel rows in {out}")
        return
    from colocate.analysis.plots import kernel_averages

    averages = kernel_averages(table)
    console.print(averages.to_string(index=False, float_format=lambda x: f"{x:.1f}"), highlight=False)
    if plots:
        from colocate.analysis.plots import plot_kernel_averages, plot_kernel_histograms

        bars, notes = plot_kernel_averages(table, out)
        hists, more = plot_kernel_histograms(table, out)
        for note in notes + more:
            console.print(f"[dim]{note}[/]")
        console.print(f"{len(bars) + len(hists)} plots in {out}/ (kernels_avg_*.png, kernels_hist_*.png)")
    if spec.device == "cpu":
        console.print("CPU: rows are PyTorch CPU operators with their self time (no CUDA kernels, so no occupancy).")
    elif backend == "torch":
        console.print("occupancy_pct is the CUDA occupancy-calculator estimate (the same alone or co-located); "
                      "use --backend ncu for achieved occupancy and DRAM/SM throughput.")
    console.print(f"wrote {out}/kernels.parquet (+ kernels.csv, kernels_meta.json)")
