"""``colocate matrix RESULTS_DIR...``: compatibility matrices (CSV + heatmaps), triples ranking, GraphML."""

from __future__ import annotations

from pathlib import Path

from colocate import cli_kit
from colocate.cli_config import input_option


def register(app: cli_kit.App) -> None:
    app.command("matrix")(matrix)


def matrix(
    results_dirs: list[Path] = cli_kit.Argument(None, metavar="RESULTS_DIR...",
                                              help="Results directories (several GPU types are kept apart)."),
    gavel: list[Path] = cli_kit.Option(None, "--gavel", help="Also read a Gavel throughput JSON (repeatable)."),
    metric: str = cli_kit.Option("delta", "--metric", help="delta, throughput_sum or slowdown."),
    out: Path = input_option("out", show_default="RESULTS_DIR/matrices"),
    gpu_type: list[str] = cli_kit.Option(None, "--gpu-type", help="Only these GPU types (repeatable)."),
    by_batch: bool = cli_kit.Option(True, "--by-batch/--no-by-batch", help="Also one matrix per shared batch size."),
    plots: bool = cli_kit.Option(True, "--plots/--no-plots", help="Draw PNG heatmaps (CSV and GraphML are always written)."),
) -> None:
    """Pivot measured pairs into job-type × job-type matrices per GPU type, sharing mode and batch size."""
    from rich.table import Table

    from colocate.analysis.gavel import load_inputs
    from colocate.analysis.matrix import METRICS, write_matrices
    from colocate.commands._output import console
    from common.errors import InputError

    if metric not in METRICS:
        raise InputError(f"unknown metric '{metric}'", field="--metric", valid=", ".join(METRICS))
    results = load_inputs(results_dirs or [], gavel or [], gpu_types=gpu_type or None)
    if out is None:
        out = (results_dirs[0] if results_dirs else Path("results") / "gavel") / "matrices"
    from profiler.campaign.outdir import prepare_out_dir

    prepare_out_dir(out)  # a file, under a file, not writable: one line, before any work
    outputs = write_matrices(results, out, metric=metric, by_batch=by_batch, plots=plots)
    table = Table(title=f"{metric} matrices → {out}")
    for column in ("GPU type", "sharing", "scope", "job types", "measured", "ok", "infeasible", f"best {metric}"):
        table.add_column(column)
    for m in outputs.matrices:
        n = len(m.job_types)
        cells = [(i, j) for i in range(n) for j in range(i, n) if m.status.iat[i, j]]
        ok = [(i, j) for i, j in cells if m.status.iat[i, j] == "ok"]
        infeasible = sum(1 for i, j in cells if m.status.iat[i, j] == "infeasible")
        best = ""
        if ok:
            pick = (min if metric == "slowdown" else max)(ok, key=lambda c: m.values.iat[c])
            best = f"{m.job_types[pick[0]]}+{m.job_types[pick[1]]} {m.values.iat[pick]:.2f}"
        table.add_row(m.gpu_type, m.sharing, m.scope, str(n), str(len(cells)), str(len(ok)), str(infeasible), best)
    console.print(table)
    if not outputs.triples.empty:
        console.print(f"triples ranked by δ: {out / 'triples.csv'} ({len(outputs.triples)} triples)")
    console.print(f"wrote {len(outputs.files)} files to {out}/ (pairs.csv, matrix_*.csv/png, graph_*.graphml)")
