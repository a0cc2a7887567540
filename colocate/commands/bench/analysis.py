"""``colocate bench matrices`` and ``colocate bench predictor``: analysis speed figures for results/BENCHMARKS.md.

Both run on Gavel's published throughputs (real measurements: 3 GPU types × 26 job types, 1,131 runs at
scale factor 1) as bundled in the package (``scheduler/data/gavel_throughputs_sf1.json``) unless ``--gavel``
names a file. ``bench predictor --job-types N`` times the leave-one-pair-out evaluation on a synthetic
low-rank dataset of N job types (N(N+1)/2 pairs; 55 → 1,540).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import typer

from scheduler.formats.bundled_files import GAVEL_FILE as DEFAULT_GAVEL

T = TypeVar("T")


def register_bench(bench_app: typer.Typer) -> None:
    bench_app.command("matrices")(bench_matrices)
    bench_app.command("predictor")(bench_predictor)


def _best_of(repeats: int, action: Callable[[], T]) -> tuple[float, T]:
    """The fastest of ``repeats`` calls of ``action`` (seconds) and the last call's value."""
    import time

    started = time.perf_counter()
    value = action()
    best = time.perf_counter() - started
    for _ in range(repeats - 1):
        started = time.perf_counter()
        value = action()
        best = min(best, time.perf_counter() - started)
    return best, value


def bench_matrices(
    gavel: Path = typer.Option(DEFAULT_GAVEL, "--gavel", help="Gavel throughput JSON to build from."),
    copies: int = typer.Option(1, "--copies", min=1, help="Repeat every run this many times (more runs)."),
    repeats: int = typer.Option(3, "--repeats", min=1, help="Timed repetitions; the best is reported."),
) -> None:
    """Time loading a results directory and building every matrix (CSV + GraphML; PNGs timed apart)."""
    import tempfile

    import pandas as pd

    from colocate.analysis.gavel import import_gavel, write_import
    from colocate.analysis.matrix import build_matrices, write_matrices
    from colocate.analysis.results import group_table, load_results
    from colocate.commands._output import console

    imported = import_gavel(gavel)
    runs, jobs = imported.runs, imported.jobs
    if copies > 1:  # extra repeats of the same cells: more rows, same matrices
        def repeat(frame: pd.DataFrame, k: int) -> pd.DataFrame:
            return frame.assign(run_id=frame["run_id"] + f"-c{k}")

        runs = pd.concat([repeat(runs, k) for k in range(copies)], ignore_index=True)
        jobs = pd.concat([repeat(jobs, k) for k in range(copies)], ignore_index=True)
    with tempfile.TemporaryDirectory(prefix="colocate-bench-") as tmp:
        source = Path(tmp) / "results"
        write_import(type(imported)(runs, jobs, imported.meta), source)
        build_s, matrices = _best_of(repeats, lambda: build_matrices(group_table(load_results(source), 2)))
        write_s, _ = _best_of(repeats, lambda: write_matrices(load_results(source), Path(tmp) / "m", plots=False))
        png_s, outputs = _best_of(1, lambda: write_matrices(load_results(source), Path(tmp) / "p", by_batch=False))
    console.print(f"{len(runs):,} runs ({gavel.name}, {copies} cop{'y' if copies == 1 else 'ies'}): "
                  f"load + pairs + {len(matrices)} matrices in {build_s:.3f} s (target < 2 s); "
                  f"with CSV/GraphML files {write_s:.3f} s; with {len(outputs.matrices)} PNG heatmaps {png_s:.2f} s")


def bench_predictor(
    gavel: Path = typer.Option(DEFAULT_GAVEL, "--gavel", help="Gavel throughput JSON to fit on."),
    gpu_type: str = typer.Option("v100", "--gpu-type", help="Worker type to fit."),
    repeats: int = typer.Option(3, "--repeats", min=1, help="Timed repetitions; the best is reported."),
    job_types: int = typer.Option(0, "--job-types", min=0, help="Instead: a synthetic dataset of this many job "
                                                                "types (all pairs), leave-one-pair-out only."),
) -> None:
    """Time one predictor fit (features, ridge, matrix completion) and a full table fill and LOO evaluation."""
    from colocate.analysis.gavel import gavel_results
    from colocate.commands._output import console
    from colocate.prediction.predict import feature_matrix, make_datasets, predict_dataset
    from colocate.prediction.predict_eval import leave_one_pair_out
    from scheduler.learning.prior import fit_ratio_model

    if job_types:
        from colocate.prediction.predict_eval import synthetic_dataset

        dataset = synthetic_dataset(job_types)
        loo_s, result = _best_of(1, lambda: leave_one_pair_out(dataset))
        console.print(f"synthetic: {len(dataset.pairs)} pairs, {job_types} job types: leave-one-pair-out "
                      f"({len(dataset.pairs)} folds, every method) {loo_s:.1f} s (target <= 30 s for 1,500 pairs)")
        return
    dataset = make_datasets(gavel_results(gavel, gpu_types=(gpu_type,)))[0]
    fit_s, _ = _best_of(repeats, lambda: fit_ratio_model(dataset.pairs, feature_matrix(dataset.solo)[0]))
    fill_s, table = _best_of(repeats, lambda: predict_dataset(dataset))
    loo_s, result = _best_of(1, lambda: leave_one_pair_out(dataset))
    console.print(f"{dataset.name}: {len(dataset.pairs)} pairs, {len(dataset.job_types)} job types: "
                  f"fit {fit_s:.3f} s (target < 10 s); fit + fill {len(table)} pairs {fill_s:.3f} s; "
                  f"leave-one-pair-out ({len(dataset.pairs)} folds, every method) {loo_s:.1f} s")
