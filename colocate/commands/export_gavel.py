"""``colocate export-gavel RESULTS_DIR``: our measurements in Gavel's throughput-file format."""

from __future__ import annotations

from pathlib import Path

from colocate import cli_kit
from colocate.cli_config import input_option


def register(app: cli_kit.App) -> None:
    app.command("export-gavel")(export_gavel)


def export_gavel(
    results_dirs: list[Path] = cli_kit.Argument(..., metavar="RESULTS_DIR...", help="One or more results directories."),
    out: Path = input_option("out", show_default="RESULTS_DIR/gavel_throughputs.json"),
    sharing: str = cli_kit.Option(None, "--sharing", help="Sharing mode to export when the results hold several."),
    scale_factor: int = cli_kit.Option(1, "--scale-factor", min=1, help="Scale factor written into the job keys."),
) -> None:
    """Write solo and pair throughputs (steps/s) as Gavel's simulation_throughputs.json layout
    (--out: the JSON file)."""
    from colocate.analysis.gavel import export_gavel as convert
    from colocate.analysis.results import load_results
    from colocate.commands._output import console
    from common.files import atomic_write_json

    results = load_results(results_dirs)
    data = convert(results, sharing=sharing, scale_factor=scale_factor)
    target = out or results_dirs[0] / "gavel_throughputs.json"
    from profiler.campaign.outdir import prepare_out_file

    prepare_out_file(target)
    atomic_write_json(data, target)
    for gpu, table in data.items():
        pairs = sum(len(entry) - 1 for entry in table.values())
        console.print(f"{gpu}: {len(table)} job types, {pairs} ordered pair entries")
    console.print(f"wrote {target}")
