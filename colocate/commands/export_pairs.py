"""``colocate export-pairs RESULTS_DIR... --out pairs.csv``: the tidy CSV + JSON format for sharing measurements."""

from __future__ import annotations

from pathlib import Path

from colocate import cli_kit
from colocate.cli_config import input_option


def register(app: cli_kit.App) -> None:
    app.command("export-pairs")(export_pairs)


def export_pairs(
    results_dirs: list[Path] = cli_kit.Argument(None, metavar="RESULTS_DIR...", help="Results directories."),
    gavel: list[Path] = cli_kit.Option(None, "--gavel", help="Gavel throughput JSON (repeatable)."),
    out: Path = input_option("out", show_default="RESULTS_DIR/pairs_export.csv"),
    gpu_type: list[str] = cli_kit.Option(None, "--gpu-type", help="Only these GPU types (repeatable)."),
) -> None:
    """Write every measured pair with both jobs' solo and co-located figures, units and provenance
    (--out: the CSV; the JSON goes beside it)."""
    from colocate.analysis.gavel import load_inputs
    from colocate.analysis.pairs_export import check_export_targets
    from colocate.analysis.pairs_export import export_pairs as write
    from colocate.commands._output import console
    from common.errors import InputError

    if out is None:
        if not results_dirs:
            raise InputError("--out is needed when only --gavel files are given", field="--out",
                             valid="a CSV path, e.g. --out pairs.csv")
        out = results_dirs[0] / "pairs_export.csv"
    check_export_targets(out, results_dirs or [], gavel or [])  # before anything is read or written
    results = load_inputs(results_dirs or [], gavel or [], gpu_types=gpu_type or None)
    csv_path, json_path = write(results, out)
    console.print(f"wrote {csv_path} (one row per pair: solo and co-located times, speeds t/t′, δ with 95 % CI) "
                  f"and {json_path} (the same with units and provenance); `colocate import-pairs {csv_path.name}` "
                  f"reads it back")
