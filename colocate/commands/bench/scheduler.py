"""``colocate bench scheduler``: the command line of :mod:`scheduler.bench.scheduler` (parse, run, print)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scheduler.bench.scheduler import (
    DEFAULT_CASES,
    bench_colocation,
    growth_plot,
    run_case,
    sia_cluster,
    summarize,
)
from scheduler.formats.profiles import load_goodput_model
from scheduler.ilp.config import IlpConfig


def print_summary(summary: list[dict[str, Any]], repeats: int, coloc_name: str) -> None:
    """The benchmark's table: one row per case, medians."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Scheduler round time, wall s / CPU s (median of {repeats}); colocation: {coloc_name}")
    for col in ("GPUs", "jobs", "sia (no packing)", "packing: top-k + pricing", "pairs / triples", "packing: all-pairs",
                "speed-up", "gap vs exact (median/max)", "reference", "packing, warm rounds", "warm gap (median/max)"):
        table.add_column(col, justify="right")
    for s in summary:
        all_cell = (f"{s['all_round_s']:.2f} / {s['all_cpu_s']:.2f}" if s["all_round_s"] == s["all_round_s"]
                    else s["all_status"].split("/")[0])
        speed = f"{s['speedup_vs_all_pairs']:.0f}×" if s["speedup_vs_all_pairs"] == s["speedup_vs_all_pairs"] else "—"
        table.add_row(str(s["gpus"]), str(s["jobs"]), f"{s['sia_round_s']:.2f} / {s['sia_cpu_s']:.2f}",
                      f"{s['topk_round_s']:.2f} / {s['topk_cpu_s']:.2f}",
                      f"{s['topk_pairs_used']:.0f} / {s['topk_triples_used']:.0f}", all_cell, speed,
                      f"{100 * s['topk_gap_vs_exact']:.3f} % / {100 * s['max_gap_vs_exact']:.3f} %",
                      s["exact_kind"], _warm_cell(s),
                      f"{100 * s['warm_gap']:.3f} % / {100 * s['max_warm_gap']:.3f} %" if s["warm_rounds"] else "—")
    Console(width=200).print(table)


def _warm_cell(s: dict[str, Any]) -> str:
    if not s["warm_rounds"]:
        return "— (--rounds 1)"
    return f"{s['warm_round_s']:.2f} / {s['warm_cpu_s']:.2f} ({s['warm_rounds']} rounds)"


def register_bench(bench_app: Any) -> None:
    """Add ``colocate bench scheduler`` to the bench sub-app."""
    from colocate import cli_kit
    from colocate.cli_config import ConfigSpec, config_command, input_option

    # the round ILP's settings come from IlpConfig (its defaults, help and checks): --time-limit, and --set
    # ilp.top_k=K, ilp.max_group_size=3, ... for the others
    @bench_app.command("scheduler")
    @config_command(ConfigSpec("ilp", IlpConfig, flags=("time_limit_s",), panel="Round ILP"))
    def scheduler_bench(
        cases: str = cli_kit.Option(",".join(f"{g}:{j}" for g, j in DEFAULT_CASES), "--cases",
                                  help="GPUS:JOBS pairs, comma-separated (GPUS a multiple of 64)."),
        repeats: int = cli_kit.Option(3, "--repeats", help="Random rounds per case (medians are reported)."),
        profiles: Path = input_option("profiles", show_default="<shared data>/sia/traces"),
        colocation: Path = input_option("colocation", show_default="the table transferred from Gavel's measurements"),
        reference: bool = cli_kit.Option(True, "--reference/--no-reference",
                                       help="Compute the exact reference (all-pairs LP bound) for the gap."),
        plot: Path = cli_kit.Option(None, "--plot", help="Write a log-log plot of round CPU time vs GPUs here."),
        all_pairs_time_limit: float = cli_kit.Option(60.0, "--all-pairs-time-limit"),
        all_pairs_max_pairs: int = cli_kit.Option(150_000, "--all-pairs-max-pairs",
                                                help="Skip all-pairs above this many candidate pairs."),
        exact_time_limit: float = cli_kit.Option(120.0, "--exact-time-limit",
                                               help="Limit for the gap-0 all-pairs solve (else LP bound)."),
        out: Path = input_option("out"),
        seed: int = cli_kit.Option(0, "--seed"),
        rounds: int = cli_kit.Option(3, "--rounds", help="Rounds per repeat: the first cold, the rest steady-state "
                                                        "(jobs keep their allocation) with the warm start."),
        turnover: float = cli_kit.Option(0.02, "--turnover", help="Share of jobs replaced between rounds."),
        *,
        ilp: IlpConfig,
    ) -> None:
        """Round solve time at 64..2,048 GPUs, with/without packing, vs all-pairs; gap vs the exact optimum
        (--out: a CSV of per-round rows)."""
        import pandas as pd
        from rich.console import Console
        from rich.progress import Progress

        from common.bounds import check_number
        from common.errors import InputError

        parsed = []
        for item in cases.split(","):
            try:
                g, j = (int(x) for x in item.split(":"))
                sia_cluster(g)
            except ValueError:
                raise InputError(f"bad case {item!r}", field="--cases",
                                 valid="GPUS:JOBS with GPUS a multiple of 64") from None
            parsed.append((g, j))
        from scheduler.formats.shared_data import default_profiles_dir

        path = profiles or default_profiles_dir()
        if not Path(path).is_dir():
            raise InputError("Sia traces not found", source=path, field="--profiles", valid="Sia's traces directory")
        model = load_goodput_model(path)
        coloc, coloc_name = bench_colocation(colocation, sia_cluster(64).type_names)
        check_number(rounds, field="--rounds", low=1, high=1000, integer=True)
        check_number(turnover, field="--turnover", low=0, high=1, valid="a share in [0, 1]")
        console = Console(stderr=True)
        rows: list[dict[str, Any]] = []
        with Progress(console=console) as progress:
            task = progress.add_task("rounds", total=len(parsed) * repeats)
            for g, j in parsed:
                rows += run_case(g, j, model, coloc, repeats=repeats, cfg=ilp, all_pairs_time_limit=all_pairs_time_limit,
                                 all_pairs_max_pairs=all_pairs_max_pairs, exact_time_limit=exact_time_limit,
                                 seed=seed, on_step=lambda: progress.advance(task), reference=reference,
                                 rounds=rounds, turnover=turnover)
        summary = summarize(rows)
        print_summary(summary, repeats, coloc_name)
        if plot is not None:
            growth_plot(summary, plot)
            console.print(f"plot written to {plot}")
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            pd.DataFrame(rows).to_csv(out, index=False)
            Console(stderr=True).print(f"per-round rows written to {out}")
