"""``colocate predict``: fill the colocation table for unmeasured pairs; ``--evaluate``: leave-one-pair-out report."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import typer


def register(app: typer.Typer) -> None:
    app.command("predict")(predict)


def _advance(progress: Any, task: Any, done: int, total: int) -> None:
    progress.update(task, completed=done)


def predict(
    results_dirs: list[Path] = typer.Argument(None, metavar="RESULTS_DIR...", help="Results directories."),
    gavel: list[Path] = typer.Option(None, "--gavel", help="Gavel throughput JSON (repeatable)."),
    gpu_type: list[str] = typer.Option(None, "--gpu-type", help="Only these GPU types (repeatable)."),
    sharing: str = typer.Option(None, "--sharing", help="Sharing mode when the inputs hold several."),
    out: Path = typer.Option(None, "--out", "-o", help="Colocation table CSV [default: RESULTS_DIR/colocation_predicted.csv]."),
    evaluate: bool = typer.Option(False, "--evaluate", help="Leave-one-pair-out evaluation against two baselines."),
    report_dir: Path = typer.Option(Path("results/predictor"), "--report-dir", help="Where --evaluate writes its report."),
    nuclear_lambda: float = typer.Option(0.3, "--nuclear-lambda", min=0.0, help="Matrix-completion shrinkage."),
    ridge_lambda: float = typer.Option(1.0, "--ridge-lambda", min=0.0, help="Ridge penalty of the feature model."),
) -> None:
    """Predict t/t' (and δ) of every pair of measured job types per GPU type and sharing mode."""
    from colocate.gavel import load_inputs
    from colocate.predict import PredictorConfig

    results = load_inputs(results_dirs or [], gavel or [], gpu_types=gpu_type or None)
    config = PredictorConfig(ridge_lambda=ridge_lambda, nuclear_lambda=nuclear_lambda)
    if not evaluate:
        _write_predicted_table(results, config, sharing, out, results_dirs)
        return
    command = (f"colocate predict --evaluate {' '.join(str(p) for p in results_dirs or [])}"
               + "".join(f" --gavel {g}" for g in gavel or []) + "".join(f" --gpu-type {g}" for g in gpu_type or []))
    _evaluate(results, config, sharing, report_dir, command)


def _write_predicted_table(results: Any, config: Any, sharing: str | None, out: Path | None,
                           results_dirs: list[Path] | None) -> None:
    """Predict every pair of one sharing mode, write the colocation table and show what it holds."""
    from rich.table import Table

    from colocate.commands._output import console
    from colocate.errors import InputError
    from colocate.predict import make_datasets, predict_dataset
    from colocate.results import choose_sharing

    every_mode = make_datasets(results)  # one per (GPU type, sharing mode); the output holds one mode
    mode = choose_sharing([d.sharing for d in every_mode], sharing, results.label)
    datasets = [d for d in every_mode if d.sharing == mode]
    if not datasets:
        raise InputError("no pairs measured", source=results.label, field="kind",
                         valid="a campaign with group_sizes including 2, or a Gavel file")
    import pandas as pd

    from colocate.colocation_table import write_colocation_table

    table = pd.concat([predict_dataset(d, config) for d in datasets], ignore_index=True)
    target = out or (results_dirs[0] if results_dirs else Path("results") / "gavel") / "colocation_predicted.csv"
    write_colocation_table(table[["gpu_type", "type_a", "type_b", "ratio_a", "ratio_b", "delta", "source",
                                  "repeats", "sharing"]], target)
    summary = table.groupby(["gpu_type", "source"]).size().unstack(fill_value=0)
    view = Table(title=f"colocation table → {target}")
    view.add_column("GPU type")
    for column in summary.columns:
        view.add_column(str(column))
    for gpu, row in summary.iterrows():
        view.add_row(str(gpu), *[str(int(v)) for v in row])
    console.print(view)


def _evaluate(results: Any, config: Any, sharing: str | None, report_dir: Path, command: str) -> None:
    """Leave-one-pair-out evaluation: report.md, evaluation.csv/json, loo_predictions.csv, and a table."""
    from rich.progress import Progress
    from rich.table import Table

    from colocate.commands._output import console, error_console
    from colocate.errors import InputError
    from colocate.predict import evaluation_report, leave_one_pair_out, make_datasets
    from colocate.results import atomic_write_json

    datasets = make_datasets(results, sharing=sharing)
    if not datasets:
        raise InputError("no pairs measured", source=results.label, field="kind",
                         valid="a campaign with group_sizes including 2, or a Gavel file")
    evaluations = []
    with Progress(console=error_console, transient=True) as progress:
        for dataset in datasets:
            task = progress.add_task(f"leave-one-pair-out {dataset.gpu_type}/{dataset.sharing}", total=len(dataset.pairs))
            evaluations.append(leave_one_pair_out(dataset, config, progress=partial(_advance, progress, task)))
    report_dir.mkdir(parents=True, exist_ok=True)
    provenance = [f"Inputs: {', '.join(str(s) for s in results.sources)}.",
                  f"Command: `{command}`."]
    (report_dir / "report.md").write_text(evaluation_report(evaluations, provenance=provenance))
    import pandas as pd

    summary = pd.concat([e.summary.assign(dataset=e.dataset, pairs=e.pairs, seconds=e.seconds) for e in evaluations],
                        ignore_index=True)
    summary.to_csv(report_dir / "evaluation.csv", index=False)
    pd.concat([e.predictions.assign(dataset=e.dataset) for e in evaluations], ignore_index=True).to_csv(
        report_dir / "loo_predictions.csv", index=False)
    atomic_write_json({"config": evaluations[0].config, "datasets": [
        {"dataset": e.dataset, "pairs": e.pairs, "job_types": e.job_types, "features": list(e.features),
         "baseline_features": list(e.baseline_features), "beats_baselines": e.beats_baselines(),
         "seconds": round(e.seconds, 2)} for e in evaluations]}, report_dir / "evaluation.json")
    view = Table(title="leave-one-pair-out: MAE (lower is better), accuracy of δ>1 (higher is better)")
    for column in ("dataset", "pairs", "method", "MAE δ", "MAE ratio a", "MAE ratio b", "acc δ>1"):
        view.add_column(column)
    for e in evaluations:
        for row in e.summary.itertuples(index=False):
            view.add_row(e.dataset, str(e.pairs), row.method,
                         f"{row.mae_delta:.4f}", f"{row.mae_ratio_a:.4f}", f"{row.mae_ratio_b:.4f}",
                         f"{row.accuracy_delta_gt_1:.3f}")
    console.print(view)
    for e in evaluations:
        verdict = "[green]beats both baselines[/]" if e.beats_baselines() else "[red]does not beat both baselines[/]"
        console.print(f"{e.dataset}: predictor {verdict}")
    console.print(f"report: {report_dir / 'report.md'} (+ evaluation.csv, loo_predictions.csv, evaluation.json)")
