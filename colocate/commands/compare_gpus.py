"""``colocate compare-gpus RESULTS_DIR... --types A,B``: the pairs of two GPU types side by side."""

from __future__ import annotations

from pathlib import Path

from colocate import cli_kit
from colocate.cli_config import input_option


def register(app: cli_kit.App) -> None:
    app.command("compare-gpus")(compare_gpus)


def _two(text: str, field: str, valid: str) -> tuple[str, str]:
    from common.errors import InputError

    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(parts):
        raise InputError(f"{text!r}", field=field, valid=valid)
    return parts[0], parts[1]


def compare_gpus(
    results_dirs: list[Path] = cli_kit.Argument(None, metavar="RESULTS_DIR...", help="Results directories."),
    gavel: list[Path] = cli_kit.Option(None, "--gavel", help="Gavel throughput JSON (repeatable)."),
    types: str = cli_kit.Option(..., "--types", help="The two GPU types, A,B (e.g. h100,h200)."),
    match: str = cli_kit.Option("job", "--match",
                              help="How pairs are matched: job (the same job types), batch (network and batch, "
                                   "names without case or '-', precision dropped: Gavel's ResNet-18@64 meets "
                                   "resnet18@64:tf32) or model (the network; medians over batches)."),
    sharing: str = cli_kit.Option(None, "--sharing",
                                help="MODE for both types, or MODE_A,MODE_B (default: every mode both have)."),
    out: Path = input_option("out", show_default="RESULTS_DIR/gpu-compare"),
    top: int = cli_kit.Option(15, "--top", help="Pairs to print, the largest differences first (all: in the CSV)."),
) -> None:
    """Compare the pairs measured on two GPU types: δ on each, differences, pairs worth packing on one only
    (--out: the directory for the CSVs, JSON and plot)."""
    from rich.table import Table

    from colocate.analysis.gavel import load_inputs
    from colocate.analysis.gpu_compare import compare_gpu_types, write_comparison
    from colocate.commands._output import console
    from common.bounds import check_number
    from common.errors import InputError
    from profiler.campaign.outdir import prepare_out_dir

    type_a, type_b = _two(types, "--types", "two different GPU types of the inputs, A,B")
    modes = (None, None) if sharing is None else (
        _two(sharing, "--sharing", "MODE or MODE_A,MODE_B") if "," in sharing else (sharing, sharing))
    check_number(top, field="--top", low=0, high=100000, integer=True)
    if out is None:
        if not results_dirs:
            raise InputError("--out is needed when only --gavel files are given", field="--out",
                             valid="a directory, e.g. --out results/gpu-compare")
        out = results_dirs[0] / "gpu-compare"
    results = load_inputs(results_dirs or [], gavel or [])  # every type, so an unknown one is named with the rest
    comparison = compare_gpu_types(results, type_a, type_b, match=match, sharing=modes)
    prepare_out_dir(out)
    written = write_comparison(comparison, out)
    table = Table(title=f"δ on {type_a} and {type_b} (pairs matched by {match}; largest differences first)")
    for column in ("sharing", "pair", f"δ {type_a}", f"δ {type_b}", "Δδ", f"Σ t/t′ {type_a}", f"Σ t/t′ {type_b}"):
        table.add_column(column, justify="left" if column in ("sharing", "pair") else "right")
    for row in comparison.pairs.head(top).itertuples(index=False):
        mode = row.sharing_a if row.sharing_a == row.sharing_b else f"{row.sharing_a}/{row.sharing_b}"
        table.add_row(mode, f"{row.job_a} + {row.job_b}", f"{row.delta_a:.3f}", f"{row.delta_b:.3f}",
                      f"{row.delta_diff:+.3f}", f"{row.sum_a:.3f}", f"{row.sum_b:.3f}")
    console.print(table)
    s = comparison.summary
    rho = "n/a (fewer than 3 pairs)" if s["spearman_delta"] is None else f"{s['spearman_delta']:.3f}"
    console.print(f"{s['pairs']} pairs on both ({s['only_a']} only on {type_a}, {s['only_b']} only on {type_b}); "
                  f"Spearman ρ of δ {rho}; mean |Δδ| {s['mae_delta']:.3f}; δ > 1 for {s['packing_pairs_a']} on "
                  f"{type_a} and {s['packing_pairs_b']} on {type_b}; {len(s['flips'])} cross δ = 1", highlight=False)
    if s["median_speedup_b_over_a"] is not None:
        console.print(f"solo: {type_b} runs the {s['solo_job_types']} job types both measured "
                      f"{s['median_speedup_b_over_a']:.2f}× as fast as {type_a} (median)", highlight=False)
    if None not in (s["image_size_a"], s["image_size_b"]) and s["image_size_a"] != s["image_size_b"]:
        console.print(f"note: {type_a} ran {s['image_size_a']}-pixel inputs and {type_b} {s['image_size_b']}: the "
                      "two measured different work", highlight=False)
    console.print("wrote " + ", ".join(str(p) for p in written), highlight=False)
