"""``colocate kernels SPEC.yaml --out DIR``: kernel-level profile of every model × batch size, each run alone."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("kernels")(kernels)


def kernels(
    spec_path: Path = typer.Argument(..., metavar="SPEC.yaml", help="Campaign file: models, batch_sizes, image_size, device."),
    out: Path = typer.Option(None, "--out", "-o", help="Results directory [default: results/<name>-kernels]."),
    backend: str = typer.Option("torch", "--backend", help="torch (PyTorch profiler) or ncu (Nsight Compute, CUDA)."),
    iters: int = typer.Option(2, "--iters", min=1, help="Profiled iterations after warm-up."),
    force: bool = typer.Option(False, "--force", help="Profile job types already in kernels.parquet again."),
    plots: bool = typer.Option(True, "--plots/--no-plots", help="Write the bar and histogram PNGs."),
) -> None:
    """Record every kernel (CPU: every operator) of two iterations per job type into kernels.parquet + plots."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from colocate.commands._output import console, error_console
    from colocate.errors import InputError
    from colocate.kernel_store import kernel_meta, read_kernels, write_kernels
    from profiler.kernels import BACKEND_NCU, BACKEND_TORCH, BACKENDS, profile_kernels
    from profiler.ncu import find_ncu
    from profiler.spec import load_spec

    if backend not in BACKENDS:
        raise InputError(f"unknown backend '{backend}'", field="--backend", valid=", ".join(BACKENDS))
    spec = load_spec(spec_path)
    if backend == "ncu":
        if not spec.is_cuda:
            raise InputError("the ncu backend profiles CUDA kernels", source=spec_path, field="device",
                             valid="cuda or cuda:N (or use --backend torch)")
        if find_ncu() is None:
            raise InputError("Nsight Compute (ncu) is not on PATH", field="--backend",
                             valid="torch, or install Nsight Compute for --backend ncu")
    out = out or Path("results") / f"{spec.name}-kernels"
    backend_label = BACKEND_NCU if backend == "ncu" else BACKEND_TORCH
    from profiler.outdir import prepare_out_dir

    prepare_out_dir(out)
    existing = read_kernels(out)
    done = set()
    if not existing.empty and not force:
        same = existing[(existing["backend"] == backend_label) & (existing["image_size"] == spec.image_size)]
        done = set(same["job_type"])
    todo = [(m, b) for m in spec.models for b in spec.batch_sizes if f"{m}@{b}" not in done]
    frames = []
    table = existing
    progress = Progress(TextColumn("[bold]kernels"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[last]}"), console=error_console)
    with progress:
        task = progress.add_task("kernels", total=len(todo), last="")
        for model, batch in todo:
            try:
                frame = profile_kernels(model, batch, spec.image_size, spec.device, warmup_iters=spec.warmup_iters,
                                        num_classes=spec.num_classes, seed=spec.seed, iters=iters, backend=backend,
                                        threads=spec.threads_per_job if not spec.is_cuda else None)
            except ValueError as exc:  # unknown model or size: the spec is wrong
                raise InputError(str(exc), source=spec_path, field="models") from None
            except RuntimeError as exc:  # OOM or ncu failure: record nothing for this job type, go on
                error_console.print(f"[yellow]{model}@{batch}: {exc}[/]")
                progress.update(task, advance=1, last=f"{model}@{batch} failed")
                continue
            frames.append(frame)
            # written after every job type: an interrupted profile keeps what it measured
            table = write_kernels(out, existing, frames, replace_backend=backend_label)
            progress.update(task, advance=1, last=f"{model}@{batch}: {len(frame)} rows")
    kernel_meta(out, spec=spec.to_dict(), backend=backend_label, iters=iters)
    if table.empty:
        console.print(f"no kernel rows in {out}")
        return
    from colocate.plots import kernel_averages

    averages = kernel_averages(table)
    console.print(averages.to_string(index=False, float_format=lambda x: f"{x:.1f}"), highlight=False)
    if plots:
        from colocate.plots import plot_kernel_averages, plot_kernel_histograms

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
