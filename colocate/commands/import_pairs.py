"""``colocate import-pairs FILE.csv --out DIR``: any table of measured pairs as a results directory."""

from __future__ import annotations

from pathlib import Path

from colocate import cli_kit
from colocate.cli_config import input_option


def register(app: cli_kit.App) -> None:
    app.command("import-pairs")(import_pairs)


def import_pairs(
    file: Path = cli_kit.Argument(..., metavar="FILE.csv", help="One row per measured pair (see the README)."),
    out: Path = input_option("out", ...),
    column: list[str] = cli_kit.Option(None, "--column", help="CANONICAL=THEIRS column mapping (repeatable), "
                                                            "e.g. --column job_a=model1."),
    columns: Path = cli_kit.Option(None, "--columns", help="YAML: {columns: {canonical: theirs}, defaults: {...}}."),
    gpu_type: str = cli_kit.Option(None, "--gpu-type", help="GPU type for rows without a gpu_type column."),
    sharing: str = cli_kit.Option(None, "--sharing", help="Sharing mode for rows without a sharing column.",
                                 show_default="timeslice"),
    matrices: bool = cli_kit.Option(True, "--matrices/--no-matrices", help="Also write compatibility matrices to "
                                                                        "OUT/matrices (at most 32 job types per GPU type)."),
    force: bool = cli_kit.Option(False, "--force", help="Replace an earlier import in OUT (its files are removed first)."),
) -> None:
    """Convert a pair table (solo and co-located times, or speeds t/t′) into our results schema
    (--out: the results directory to write: runs/jobs Parquet + CSV, meta.json)."""
    from colocate.analysis.gavel import write_import
    from colocate.analysis.pairs_import import (
        PairColumns,
        check_matrix_size,
        load_column_map,
        parse_column_flags,
        prepare_results_dir,
    )
    from colocate.analysis.pairs_import import import_pairs as convert
    from colocate.commands._output import console

    prepare_results_dir(out, force=force, clear=False)  # before the conversion: a wrong --out fails at once
    mapping = load_column_map(columns) if columns is not None else PairColumns()
    names = {**mapping.names, **parse_column_flags(column or [])}
    defaults = dict(mapping.defaults)
    if gpu_type:
        defaults["gpu_type"] = gpu_type
    if sharing:
        defaults["sharing"] = sharing
    imported = convert(file, PairColumns(names, defaults))
    if matrices:
        check_matrix_size(imported)
    write_import(imported, prepare_results_dir(out, force=force))
    counts = imported.meta["counts"]
    console.print(f"{file} → {out}: {counts['rows']} pair rows ({counts['infeasible']} infeasible), "
                  f"{counts['job_types']} job types on {', '.join(imported.meta['gpu_types'])}")
    if matrices:
        from colocate.analysis.matrix import write_matrices
        from colocate.analysis.results import load_results

        written = write_matrices(load_results(out), out / "matrices")
        console.print(f"{len(written.matrices)} matrices (CSV + PNG) and graphs in {out / 'matrices'}/")
    console.print(f"wrote {out}/runs.parquet, jobs.parquet (+ CSV) and meta.json; read it with colocate matrix, "
                  f"predict, colocation-table, export-gavel or export-pairs")
