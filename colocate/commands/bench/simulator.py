"""``colocate bench simulator``: the command line of :mod:`scheduler.bench.simulator` (parse, run, print)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scheduler.bench.simulator import DEFAULT_WORKLOADS, SIA_CLUSTER, run_benchmark


def register_bench(bench_app: Any) -> None:
    """Add ``colocate bench simulator`` to the bench sub-app."""
    from colocate import cli_kit
    from colocate.cli_config import input_option

    @bench_app.command("simulator")
    def simulator_bench(
        workloads: str = cli_kit.Option(None, "--workloads",
                                      help="Comma-separated workload files (default: Sia's philly and saturn "
                                           "workload-1, 160 jobs each)."),
        policies: str = cli_kit.Option("colocate", "--policies", help="Comma-separated policies."),
        cluster: Path = input_option("cluster", SIA_CLUSTER),
        profiles: Path = input_option("profiles", show_default="<shared data>/sia/traces"),
        target_s: float = cli_kit.Option(None, "--target",
                                       help="Wall-time target per run, seconds (default: 10 s up to 200 jobs, "
                                            "120 s above)."),
    ) -> None:
        """Simulate 160-job workloads and print the wall time of each run against the target."""
        from rich.console import Console
        from rich.table import Table

        from scheduler.formats.shared_data import shared_data_dir
        from scheduler.policies import policy_spec

        files = ([Path(p.strip()) for p in workloads.split(",") if p.strip()] if workloads
                 else [shared_data_dir() / p for p in DEFAULT_WORKLOADS])
        names = [policy_spec(p).name for p in policies.split(",") if p.strip()]
        rows = run_benchmark(files, names, cluster, profiles)
        table = Table(title=f"colocate bench simulator · {cluster.name}")
        for col in ("workload", "policy", "jobs", "rounds", "wall s", "CPU s", "policy s", "round median ms",
                    "round p95 ms", "round max ms", "avg JCT h", "target"):
            table.add_column(col, justify="left" if col in ("workload", "policy") else "right")
        for r in rows:
            target = target_s if target_s is not None else (10.0 if r["jobs"] <= 200 else 120.0)
            ok = r["wall_s"] <= target
            table.add_row(r["workload"], r["policy"], str(r["jobs"]), str(r["rounds"]),
                          f"{r['wall_s']:.1f}", f"{r['cpu_s']:.1f}",
                          f"{r['policy_s']:.1f}", f"{r['round_median_ms']:.1f}", f"{r['round_p95_ms']:.1f}",
                          f"{r['round_max_ms']:.0f}", f"{r['avg_jct_h']:.3f}",
                          f"[green]≤ {target:g} s met[/]" if ok else f"[red]≤ {target:g} s missed[/]")
        Console(width=200).print(table)
        Console(width=200).print("wall s = the run's wall-clock time (what the target is about); CPU s = this "
                                 "process's CPU time, which is what a busy shared machine cannot inflate.")
