"""``colocate import-gavel FILE.json --out DIR``: Gavel's published throughputs as a results directory."""

from __future__ import annotations

from pathlib import Path

from colocate import cli_kit
from colocate.cli_config import input_option


def register(app: cli_kit.App) -> None:
    app.command("import-gavel")(import_gavel)


def import_gavel(
    file: Path = cli_kit.Argument(..., metavar="FILE.json", help="Gavel throughput file (e.g. simulation_throughputs.json)."),
    out: Path = input_option("out", ...),
    gpu_type: list[str] = cli_kit.Option(None, "--gpu-type", help="Worker types to import (repeatable).",
                                        show_default="all"),
    scale_factor: int = cli_kit.Option(1, "--scale-factor", min=1, help="Gavel scale factor (GPUs per job) to import."),
    matrices: bool = cli_kit.Option(True, "--matrices/--no-matrices", help="Also write compatibility matrices to OUT/matrices."),
) -> None:
    """Convert Gavel's solo and pair throughputs into our results schema ([0, 0] pairs become infeasible;
    --out: the results directory to write)."""
    from rich.table import Table

    from colocate.analysis.gavel import import_gavel as convert
    from colocate.analysis.gavel import write_import
    from colocate.commands._output import console
    from profiler.campaign.outdir import check_out_dir, prepare_out_dir

    check_out_dir(out)  # a wrong --out fails at once, creating nothing
    imported = convert(file, scale_factor=scale_factor, gpu_types=tuple(gpu_type) if gpu_type else None)
    if matrices and not (imported.runs["kind"] == "pair").any():  # refused before the tables are written
        from common.errors import InputError

        raise InputError("has no pairs to draw matrices of", source=file, field="--matrices",
                         valid="--no-matrices for solo throughputs alone, or a file with pair entries")
    write_import(imported, prepare_out_dir(out))
    table = Table(title=f"Gavel {file.name} → {out}")
    for column in ("GPU type", "job types", "pairs", "infeasible", "asymmetric (kept as 2 repeats)"):
        table.add_column(column)
    for gpu, counts in imported.meta["counts"].items():
        table.add_row(gpu, str(counts["job_types"]), str(counts["pairs"]), str(counts["infeasible_pairs"]),
                      str(counts["asymmetric_pairs"]))
    console.print(table)
    if matrices:
        from colocate.analysis.matrix import write_matrices
        from colocate.analysis.results import load_results

        outputs = write_matrices(load_results(out), out / "matrices")
        console.print(f"{len(outputs.matrices)} matrices (CSV + PNG) and graphs in {out / 'matrices'}/")
    console.print(f"wrote {out}/runs.parquet, jobs.parquet (+ CSV) and meta.json")
