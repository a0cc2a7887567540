"""``colocate predict``: fill the colocation table for unmeasured pairs, each prediction with its interval;
``--evaluate``: the report of three protocols (leave one pair out, one job type out, one model out)."""

from __future__ import annotations

import subprocess
from functools import partial
from pathlib import Path
from typing import Any

from colocate import cli_kit
from colocate.cli_config import ConfigSpec, config_command, input_option
from common.errors import InputError
from scheduler.learning.predictor.config import PredictorConfig

TABLE_COLUMNS = ["gpu_type", "type_a", "type_b", "ratio_a", "ratio_b", "delta", "source", "repeats", "sharing",
                 "evidence", "low_a", "high_a", "low_b", "high_b", "delta_low", "delta_high", "interval_level"]
DIGITS = 4  # ratios and δ are written and printed to 4 decimals: measurement noise is larger than that


def register(app: cli_kit.App) -> None:
    app.command("predict")(predict)


def _advance(progress: Any, tasks: dict[str, Any], name: str, done: int, total: int) -> None:
    if name not in tasks:
        tasks[name] = progress.add_task(name, total=total)
    progress.update(tasks[name], completed=done)


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


@config_command(ConfigSpec("predictor", PredictorConfig, panel="Predictor"))
def predict(
    results_dirs: list[Path] = cli_kit.Argument(None, metavar="RESULTS_DIR...", help="Results directories."),
    gavel: list[Path] = cli_kit.Option(None, "--gavel", help="Gavel throughput JSON (repeatable)."),
    gpu_type: list[str] = cli_kit.Option(None, "--gpu-type", help="Only these GPU types (repeatable)."),
    sharing: str = cli_kit.Option(None, "--sharing", help="Sharing mode when the inputs hold several."),
    out: Path = input_option("out", show_default="RESULTS_DIR/colocation_predicted.csv"),
    evaluate: bool = cli_kit.Option(False, "--evaluate", help="Leave one pair out, one job type (model@batch) "
                                                            "out and one model (all its batches) out, against five "
                                                            "baselines, with the intervals' coverage."),
    report_dir: Path = cli_kit.Option(None, "--report-dir", help="Where --evaluate writes its report.",
                                    show_default="<output>/predictor-evaluation"),
    force: bool = cli_kit.Option(False, "--force", help="Overwrite a report that git tracks (a committed one)."),
    *, predictor: PredictorConfig,
) -> None:
    """Predict t/t' (and δ), with intervals, of every pair of measured job types per GPU type and sharing mode;
    every GPU type and sharing mode given is evidence for the others (--out: the colocation table CSV)."""
    from colocate.analysis.gavel import load_inputs
    from colocate.analysis.results import choose_sharing
    from colocate.prediction.predict import make_datasets

    results = load_inputs(results_dirs or [], gavel or [], gpu_types=gpu_type or None)
    config = predictor
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
        only = [d.key for d in every_mode if sharing is None or d.sharing == sharing]
        _evaluate(every_mode, only, config, target, results, results_dirs or [], gavel or [], gpu_type or [])
        return
    mode = choose_sharing(modes, sharing, results.label)  # the table holds one mode
    _fill(every_mode, [d.key for d in every_mode if d.sharing == mode], config,
          out or _default_output_dir(results_dirs, None) / "colocation_predicted.csv")


def _fill(datasets: list, only: list[str], config: PredictorConfig, target: Path) -> None:
    from rich.table import Table

    from colocate.commands._output import console
    from colocate.prediction.predict import predict_datasets
    from profiler.campaign.outdir import prepare_out_file
    from scheduler.formats.colocation_table import write_colocation_table

    table = predict_datasets(datasets, config, only=only)
    numbers = ["ratio_a", "ratio_b", "delta", "low_a", "high_a", "low_b", "high_b", "delta_low", "delta_high"]
    table[numbers] = table[numbers].astype(float).round(DIGITS)
    table["interval_level"] = config.level
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
    preview = Table(title=f"predicted pairs with the highest δ (ratio = t/t′; {config.level:.0%} intervals)")
    for column in ("GPU type", "type a", "type b", "ratio a", "ratio b", "δ", "δ interval", "evidence"):
        preview.add_column(column)
    best = table[table["source"] == "predicted"].sort_values("delta", ascending=False).head(10)
    for row in best.itertuples(index=False):
        preview.add_row(str(row.gpu_type), row.type_a, row.type_b, _with_interval(row.ratio_a, row.low_a, row.high_a),
                        _with_interval(row.ratio_b, row.low_b, row.high_b), f"{row.delta:.{DIGITS}f}",
                        _interval(row.delta_low, row.delta_high), str(row.evidence))
    if len(best):
        console.print(preview)


def _interval(low: float, high: float) -> str:
    return "–" if low != low or high != high else f"[{low:.{DIGITS - 1}f}, {high:.{DIGITS - 1}f}]"


def _with_interval(value: float, low: float, high: float) -> str:
    return f"{value:.{DIGITS}f} {_interval(low, high)}"


def _evaluate(datasets: list, only: list[str], config: PredictorConfig, report_dir: Path, results: Any,
              results_dirs: list[Path], gavel: list[Path], gpu_types: list[str]) -> None:
    import pandas as pd
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from colocate.commands._output import console, error_console
    from colocate.prediction.predict_eval import PROTOCOL_TITLES, evaluate, ties
    from colocate.prediction.predict_report import evaluation_report
    from common.files import atomic_write_json
    from profiler.campaign.outdir import prepare_out_dir

    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=error_console, transient=False) as progress:
        evaluations = evaluate(datasets, config, only=only, progress=partial(_advance, progress, {}))
    prepare_out_dir(report_dir, field="--report-dir")  # a file or an unwritable place: one line
    command = ("colocate predict --evaluate " + " ".join(str(p) for p in results_dirs)
               + "".join(f" --gavel {g}" for g in gavel) + "".join(f" --gpu-type {g}" for g in gpu_types))
    provenance = [f"Inputs: {', '.join(str(s) for s in results.sources)}.", f"Command: `{command.strip()}`."]
    (report_dir / "report.md").write_text(evaluation_report(evaluations, provenance=provenance))
    summary = pd.concat([e.summary.assign(dataset=e.dataset, protocol=e.protocol, predictions=e.pairs,
                                          seconds=e.seconds) for e in evaluations], ignore_index=True)
    summary.to_csv(report_dir / "evaluation.csv", index=False)
    pd.concat([e.predictions.assign(dataset=e.dataset, protocol=e.protocol) for e in evaluations],
              ignore_index=True).to_csv(report_dir / "held_out_predictions.csv", index=False, float_format="%.5g")
    atomic_write_json({"config": evaluations[0].config, "datasets": [
        {"dataset": e.dataset, "protocol": e.protocol, "predictions": e.pairs, "measured_pairs": e.measured_pairs,
         "job_types": e.job_types, "features": list(e.features), "baseline_features": list(e.baseline_features),
         "beats_baselines": e.beats_baselines(), "shortfalls": e.shortfalls(),
         "coverage_ratio": e.coverage()[0], "coverage_delta": e.coverage()[1], "calibrated": e.calibrated(),
         "nested_choices": list(e.choices), "seconds": round(e.seconds, 2)} for e in evaluations]},
        report_dir / "evaluation.json")
    view = Table(title="held out: MAE (lower is better); δ > 1 decision (higher is better); interval coverage")
    for column in ("dataset", "protocol", "n", "method", "MAE δ", "MAE ratio", "balanced acc", "coverage r / δ"):
        view.add_column(column)
    for e in evaluations:
        for row in e.summary.itertuples(index=False):
            cover = "" if row.coverage_ratio != row.coverage_ratio else f"{row.coverage_ratio:.3f} / {row.coverage_delta:.3f}"
            view.add_row(e.dataset, PROTOCOL_TITLES[e.protocol], str(e.pairs), row.method, f"{row.mae_delta:.4f}",
                         f"{row.mae_ratio:.4f}", "–" if row.balanced_accuracy != row.balanced_accuracy
                         else f"{row.balanced_accuracy:.3f}", cover)
    console.print(view)
    for e in evaluations:
        falls = e.shortfalls()
        if not falls:
            tied = ties(e)
            console.print(f"{e.title}: predictor [green]beats every baseline[/] on MAE and is at least as good on "
                          f"the δ > 1 decision" + (f" (ties {', '.join(tied)})" if tied else ""))
        for f in falls:
            console.print(f"{e.title}: predictor [red]does not beat {f['baseline']}[/] on {f['metric']} "
                          f"({f['predictor']:.4f} vs {f['baseline_value']:.4f}, paired SE {f['paired_se']:.4f}"
                          f"{', within noise' if f['within_noise'] else ''})")
        if not e.calibrated():
            console.print(f"{e.title}: intervals cover [red]{e.coverage()[0]:.1%}[/] of held-out ratios "
                          f"(level {e.config['level']:.0%})")
    console.print(f"report: {report_dir / 'report.md'} (+ evaluation.csv, held_out_predictions.csv, evaluation.json)")
