"""``colocate bench matrices`` and ``colocate bench predictor``: analysis speed figures for results/BENCHMARKS.md.

Both run on Gavel's published throughputs (real measurements: 3 GPU types × 26 job types, 1,131 runs at
scale factor 1) as bundled in the package (``scheduler/data/gavel_throughputs_sf1.json``) unless ``--gavel``
names a file; ``bench predictor`` adds the project's own CPU and H100 campaigns where present and times the
evaluation of every dataset under every protocol (leave one pair, job type, model out). ``bench predictor
--job-types N`` times leave one pair out on a synthetic low-rank dataset of N job types (N(N+1)/2 pairs; 55 → 1,540).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from colocate import cli_kit
from scheduler.formats.bundled_files import GAVEL_FILE as DEFAULT_GAVEL

T = TypeVar("T")


def register_bench(bench_app: cli_kit.App) -> None:
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
    gavel: Path = cli_kit.Option(DEFAULT_GAVEL, "--gavel", help="Gavel throughput JSON to build from."),
    copies: int = cli_kit.Option(1, "--copies", min=1, help="Repeat every run this many times (more runs)."),
    repeats: int = cli_kit.Option(3, "--repeats", min=1, help="Timed repetitions; the best is reported."),
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


DEFAULT_RESULTS = (Path("results/cpu-pairs"), Path("results/h100/first-call"), Path("results/h100/thesis-grid"))


def bench_predictor(
    gavel: Path = cli_kit.Option(DEFAULT_GAVEL, "--gavel", help="Gavel throughput JSON to evaluate on."),
    results_dir: list[Path] = cli_kit.Option(
        None, "--results", help="Results directories to evaluate on as well (repeatable).",
        show_default="results/cpu-pairs and results/h100/{first-call,thesis-grid} where present"),
    job_types: int = cli_kit.Option(0, "--job-types", min=0, help="Instead: a synthetic dataset of this many job "
                                                                "types (all pairs), leave one pair out only."),
) -> None:
    """Time the evaluation of every dataset under every protocol (the predictor and five baselines, every fold)
    and one table fill with its intervals' calibration; CPU seconds (this process) and wall seconds."""
    import time
    from dataclasses import replace

    from colocate.analysis.gavel import load_inputs
    from colocate.commands._output import console
    from colocate.prediction.predict import make_datasets, predict_datasets
    from colocate.prediction.predict_eval import evaluate

    if job_types:
        from colocate.prediction.predict_eval import synthetic_dataset

        dataset = synthetic_dataset(job_types)
        loo_s, _ = _best_of(1, lambda: evaluate([dataset], protocols=("pair",)))
        console.print(f"synthetic: {len(dataset.pairs)} pairs, {job_types} job types: leave one pair out "
                      f"({len(dataset.pairs)} folds, every method) {loo_s:.1f} s")
        return
    dirs = [d for d in (results_dir or DEFAULT_RESULTS) if d.is_dir()]
    datasets = make_datasets(load_inputs(dirs, [gavel]))
    cpu, wall = time.process_time(), time.perf_counter()
    results = evaluate(datasets)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    pairs = sum(len(d.pairs) for d in datasets)
    console.print(f"{len(datasets)} datasets ({', '.join(d.key for d in datasets)}), {pairs} measured pairs: "
                  f"{len({r.protocol for r in results})} protocols, {sum(r.pairs for r in results)} held-out predictions, "
                  f"every method: "
                  f"{cpu:.1f} s CPU, {wall:.1f} s wall (target < 120 s CPU)")
    k = max(range(len(datasets)), key=lambda i: len(datasets[i].pairs))
    sparse = [replace(d, pairs=d.pairs.iloc[::2].reset_index(drop=True)) if i == k else d for i, d in enumerate(datasets)]
    fill_s, table = _best_of(1, lambda: predict_datasets(sparse, only=[sparse[k].key]))
    predicted = int((table["source"] == "predicted").sum())
    console.print(f"fill {sparse[k].key} with every other pair dropped: {predicted} of {len(table)} pairs predicted "
                  f"with calibrated intervals in {fill_s:.1f} s")
