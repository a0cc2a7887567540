"""``colocate bench serve``: the command line of :mod:`scheduler.bench.serve` (parse, run, print)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scheduler.bench.serve import run_serve_benchmark


def register_bench(bench_app: Any) -> None:
    """Add ``colocate bench serve`` to the bench sub-app."""
    from colocate import cli_kit
    from colocate.cli_config import input_option

    @bench_app.command("serve")
    def serve_bench(
        jobs: int = cli_kit.Option(1000, "--jobs", help="Jobs submitted before the first round."),
        rounds: int = cli_kit.Option(5, "--rounds", help="Rounds to run (the first starts groups)."),
        gpus: int = cli_kit.Option(64, "--gpus", help="Cluster size: Sia's 64-GPU cluster scaled (a multiple of 64)."),
        profiles: Path = input_option("profiles", show_default="<shared data>/sia/traces"),
    ) -> None:
        """Round latency of colocate serve with many queued jobs: policy time vs bookkeeping."""
        from rich.console import Console
        from rich.table import Table

        console = Console()

        result = run_serve_benchmark(jobs, rounds, gpus, profiles=profiles)
        table = Table(title=f"colocate serve · {result['jobs']} jobs · {result['gpus']} GPUs · "
                            f"{result['running']} running after {rounds} rounds")
        for column in ("round", "active jobs", "total (s)", "policy (s)", "bookkeeping (s)", "enacting (s)",
                       "policy CPU (s)", "bookkeeping CPU (s)", "started", "stopped"):
            table.add_column(column, justify="right")
        for r in result["rounds"]:
            table.add_row(str(r["round"]), str(r["active_jobs"]), f"{r['total_s']:.3f}", f"{r['policy_s']:.3f}",
                          f"{r['bookkeeping_s']:.3f}", f"{r['enact_s']:.3f}", f"{r['policy_cpu_s']:.3f}",
                          f"{r['bookkeeping_cpu_s']:.3f}", str(r["started"]), str(r["stopped"]))
        console.print(table)
        console.print(f"steady state (rounds 2+): median round {result['total_s_median']:.3f} s = policy "
                      f"{result['policy_s_median']:.3f} s + bookkeeping {result['bookkeeping_s_median']:.3f} s "
                      f"(max {result['bookkeeping_s_max']:.3f} s); CPU time: policy {result['policy_cpu_s_median']:.3f} s, "
                      f"bookkeeping {result['bookkeeping_cpu_s_median']:.3f} s (max {result['bookkeeping_cpu_s_max']:.3f} s)",
                      highlight=False)
