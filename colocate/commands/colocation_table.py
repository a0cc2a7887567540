"""``colocate colocation-table (RESULTS_DIR...|--gavel FILE) --out FILE``: the scheduler's pair-ratio input."""

from __future__ import annotations

from pathlib import Path

from colocate import cli_kit
from colocate.cli_config import input_option


def register(app: cli_kit.App) -> None:
    app.command("colocation-table")(colocation_table)


def colocation_table(
    results_dirs: list[Path] = cli_kit.Argument(None, metavar="RESULTS_DIR...", help="Results directories."),
    gavel: list[Path] = cli_kit.Option(None, "--gavel", help="Gavel throughput JSON (repeatable)."),
    out: Path = input_option("out", ...),
    sharing: str = cli_kit.Option(None, "--sharing", help="Sharing mode to use when the inputs hold several."),
    gpu_type: list[str] = cli_kit.Option(None, "--gpu-type", help="Only these GPU types (repeatable)."),
) -> None:
    """Write measured pair ratios t/t' per GPU type (0 = infeasible) for `colocate schedule --colocation`:
    --out is the CSV to write (gpu_type,type_a,type_b,ratio_a,ratio_b,...)."""
    from colocate.analysis.gavel import load_inputs
    from colocate.analysis.matrix import measured_colocation_table
    from colocate.commands._output import console

    results = load_inputs(results_dirs or [], gavel or [], gpu_types=gpu_type or None)
    table = measured_colocation_table(results, sharing=sharing)
    from profiler.campaign.outdir import prepare_out_file
    from scheduler.formats.colocation_table import write_colocation_table

    prepare_out_file(out)
    write_colocation_table(table, out)
    counts = table.groupby("gpu_type").size()
    summary = ", ".join(f"{gpu}: {n} pairs" for gpu, n in counts.items())
    console.print(f"wrote {out} ({summary}; {int((table['ratio_a'] == 0).sum())} infeasible)")
