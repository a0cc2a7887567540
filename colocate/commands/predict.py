"""``colocate predict``: fill the colocation table for unmeasured pairs; ``--evaluate``: leave-one-pair-out report."""

from __future__ import annotations

import subprocess
from functools import partial
from pathlib import Path
from typing import Any

import typer

from common.errors import InputError

TABLE_COLUMNS = ["gpu_type", "type_a", "type_b", "ratio_a", "ratio_b", "delta", "source", "repeats", "sharing"]
DIGITS = 4  # ratios and δ are written and printed to 4 decimals: measurement noise is larger than that


def register(app: typer.Typer) -> None:
    app.command("predict")(predict)


def _advance(progress: Any, task: Any, done: int, total: int) -> None:
    progress.update(task, completed=done)


def _default_output_dir(results_dirs: list[Path] | None, out: Path | None) -> Path:
    """The current run's output: beside --out, else the first results directory, else results/gavel."""
    if out is not None:
        return out.parent
    return results_dirs[0] if results_dirs else Path("results") / "gavel"


def _committed(path: Path) -> bool:
    """Whether git tracks ``path`` (a committed report must not be overwritten silently)."""
    if not path.exists():
        return False
    try:
        done = subprocess.run(["git", "-C", str(path.parent), "ls-files", "--error-unmatch", path.name],
                              capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def predict(
    results_dirs: list[Path] = typer.Argument(None, metavar="RESULTS_DIR...", help="Results directories."),
    gavel: list[Path] = typer.Option(None, "--gavel", help="Gavel throughput JSON (repeatable)."),
    gpu_type: list[str] = typer.Option(None, "--gpu-type", help="Only these GPU types (repeatable)."),
    sharing: str = typer.Option(None, "--sharing", help="Sharing mode when the inputs hold several."),
    out: Path = typer.Option(None, "--out", "-o", help="Colocation table CSV.",
                               show_default="RESULTS_DIR/colocation_predicted.csv"),
    evaluate: bool = typer.Option(False, "--evaluate", help="Leave-one-pair-out evaluation against four baselines."),
    report_dir: Path = typer.Option(None, "--report-dir", help="Where --evaluate writes its report.",
                                    show_default="<output>/predictor-evaluation"),
    force: bool = typer.Option(False, "--force", help="Overwrite a report that git tracks (a committed one)."),
    nuclear_lambda: float = typer.Option(0.3, "--nuclear-lambda", min=0.0, help="Matrix-completion shrinkage."),
    ridge_lambda: float = typer.Option(1.0, "--ridge-lambda", min=0.0, help="Ridge penalty of the feature model."),
) -> None:
    """Predict t/t' (and δ) of every pair of measured job types per GPU type and sharing mode."""
    from colocate.analysis.gavel import load_inputs
    from colocate.analysis.results import choose_sharing
    from colocate.prediction.predict import make_datasets
    from scheduler.learning.prior import PredictorConfig

    results = load_inputs(results_dirs or [], gavel or [], gpu_types=gpu_type or None)
    config = PredictorConfig(ridge_lambda=ridge_lambda, nuclear_lambda=nuclear_lambda)
    every_mode = make_datasets(results)  # one per (GPU type, sharing mode)
    if not every_mode:
        raise InputError("no pairs measured", source=results.label, field="kind",
                         valid="a campaign with group_sizes including 2, or a Gavel file")
    modes = [d.sharing for d in every_mode]
    if evaluate:
        if sharing is not None:
            choose_sharing(modes, sharing, results.label)  # an unknown mode: error naming the modes present
        target = report_dir or _default_output_dir(results_dirs, out) / "predictor-evaluation"
        if _committed(target / "report.md") and not force:
            raise InputError("a committed report is there", source=target / "report.md", field="--report-dir",
                             valid="another --report-dir, or --force to overwrite it")
        _evaluate([d for d in every_mode if sharing is None or d.sharing == sharing], config, target, results,
                  results_dirs or [], gavel or [], gpu_type or [])
        return
    mode = choose_sharing(modes, sharing, results.label)  # the table holds one mode
    _fill([d for d in every_mode if d.sharing == mode], config, out or _default_output_dir(results_dirs, None)
          / "colocation_predicted.csv")


def _fill(datasets: list, config, target: Path) -> None:  # noqa: ANN001 - PredictorConfig, imported lazily
    import pandas as pd
    from rich.table import Table

    from colocate.commands._output import console
    from colocate.prediction.predict import predict_dataset
    from profiler.campaign.outdir import prepare_out_file
    from scheduler.formats.colocation_table import write_colocation_table

    table = pd.concat([predict_dataset(d, config) for d in datasets], ignore_index=True)
    table[["ratio_a", "ratio_b", "delta"]] = table[["ratio_a", "ratio_b", "delta"]].astype(float).round(DIGITS)
    prepare_out_file(target)  # --out that is a directory, lies under a file or is unwritable: one line
    write_colocation_table(table[TABLE_COLUMNS], target)
    summary = table.groupby(["gpu_type", "source"]).size().unstack(fill_value=0)
    view = Table(title=f"colocation table → {target}")
    view.add_column("GPU type")
    for column in summary.columns:
        view.add_column(str(column))
    for gpu, row in summary.iterrows():
        view.add_row(str(gpu), *[str(int(v)) for v in row])
    console.print(view)
    preview = Table(title="predicted pairs with the highest δ (ratio = t/t′)")
    for column in ("GPU type", "type a", "type b", "ratio a", "ratio b", "δ"):
        preview.add_column(column)
    best = table[table["source"] == "predicted"].sort_values("delta", ascending=False).head(10)
    for row in best.itertuples(index=False):
        preview.add_row(str(row.gpu_type), row.type_a, row.type_b, f"{row.ratio_a:.{DIGITS}f}",
                        f"{row.ratio_b:.{DIGITS}f}", f"{row.delta:.{DIGITS}f}")
    if len(best):
        console.print(preview)


def _evaluate(datasets: list, config, report_dir: Path, results, results_dirs: list[Path],  # noqa: ANN001
              gavel: list[Path], gpu_types: list[str]) -> None:
    import pandas as pd
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from colocate.commands._output import console, error_console
    from colocate.prediction.predict_eval import evaluation_report, leave_one_pair_out, ties
    from common.files import atomic_write_json
    from profiler.campaign.outdir import prepare_out_dir

    evaluations = []
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=error_console, transient=False) as progress:
        for dataset in datasets:
            task = progress.add_task(f"leave-one-pair-out {dataset.gpu_type}/{dataset.sharing}", total=len(dataset.pairs))
            evaluations.append(leave_one_pair_out(dataset, config, progress=partial(_advance, progress, task)))
    prepare_out_dir(report_dir, field="--report-dir")  # a file or an unwritable place: one line
    command = ("colocate predict --evaluate " + " ".join(str(p) for p in results_dirs)
               + "".join(f" --gavel {g}" for g in gavel) + "".join(f" --gpu-type {g}" for g in gpu_types))
    provenance = [f"Inputs: {', '.join(str(s) for s in results.sources)}.", f"Command: `{command.strip()}`."]
    (report_dir / "report.md").write_text(evaluation_report(evaluations, provenance=provenance))
    summary = pd.concat([e.summary.assign(dataset=e.dataset, pairs=e.pairs, seconds=e.seconds) for e in evaluations],
                        ignore_index=True)
    summary.to_csv(report_dir / "evaluation.csv", index=False)
    pd.concat([e.predictions.assign(dataset=e.dataset) for e in evaluations], ignore_index=True).to_csv(
        report_dir / "loo_predictions.csv", index=False)
    atomic_write_json({"config": evaluations[0].config, "datasets": [
        {"dataset": e.dataset, "pairs": e.pairs, "job_types": e.job_types, "features": list(e.features),
         "baseline_features": list(e.baseline_features), "beats_baselines": e.beats_baselines(),
         "shortfalls": e.shortfalls(), "seconds": round(e.seconds, 2)} for e in evaluations]},
        report_dir / "evaluation.json")
    view = Table(title="leave-one-pair-out: MAE (lower is better); δ > 1 decision (higher is better)")
    for column in ("dataset", "pairs", "method", "MAE δ", "MAE ratio", "acc δ>1", "balanced acc", "precision", "recall"):
        view.add_column(column)
    for e in evaluations:
        for row in e.summary.itertuples(index=False):
            view.add_row(e.dataset, str(e.pairs), row.method, f"{row.mae_delta:.4f}", f"{row.mae_ratio:.4f}",
                         *("–" if v != v else f"{v:.3f}" for v in (row.accuracy_delta_gt_1, row.balanced_accuracy,
                                                                   row.precision, row.recall)))
    console.print(view)
    for e in evaluations:
        falls = e.shortfalls()
        if not falls:
            tied = ties(e)
            console.print(f"{e.dataset}: predictor [green]beats every baseline[/] on MAE and is at least as good on "
                          f"the δ > 1 decision" + (f" (ties {', '.join(tied)})" if tied else ""))
        for f in falls:
            console.print(f"{e.dataset}: predictor [red]does not beat {f['baseline']}[/] on {f['metric']} "
                          f"({f['predictor']:.4f} vs {f['baseline_value']:.4f}, paired SE {f['paired_se']:.4f}"
                          f"{', within noise' if f['within_noise'] else ''})")
    console.print(f"report: {report_dir / 'report.md'} (+ evaluation.csv, loo_predictions.csv, evaluation.json)")
