"""``colocate bench simulator``: time to simulate a workload (targets: a 160-job workload in ≤ 10 s, a
1,000-job one in ≤ 2 min, with colocate; Sia's 960-job ``newtrace`` sets stand for the latter).

Runs each policy on each workload in this process, one after the other (one core; the compare command is
what uses several), and prints wall time, simulated rounds, and the per-round policy time (median, p95,
max) so a slow run can be attributed to the policy or to the simulator's own bookkeeping. The Sia profiles
are loaded once before timing (≈2 s, shared by every run of a process).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SIA_CLUSTER = Path(__file__).resolve().parents[1] / "examples" / "sia-64gpu.yaml"
DEFAULT_WORKLOADS = ("sia/workloads/philly/workload-1.csv", "sia/workloads/saturn/workload-1.csv")


def run_benchmark(workloads: list[Path], policies: list[str], cluster: Path, profiles: Path | None) -> list[dict[str, Any]]:
    """One row per (workload, policy): jobs, rounds, wall seconds, policy seconds per round."""
    import time

    import numpy as np

    from scheduler.formats.workloads import read_workload
    from scheduler.model.cluster import load_cluster
    from scheduler.sim.simulator import SimConfig, load_goodput_model, simulate

    cluster_obj = load_cluster(cluster)
    rows = []
    for path in workloads:
        work = read_workload(path)
        model = load_goodput_model(profiles, applications=work.applications, gpu_types=cluster_obj.type_names,
                                   step_times=SimConfig().step_times)
        for policy in policies:
            cpu0 = time.process_time()
            result = simulate(cluster_obj, work, policy, profiles=model)
            cpu = time.process_time() - cpu0
            per_round = result.rounds["policy_s"].to_numpy(float)
            rows.append({
                "workload": f"{path.parent.name}/{path.stem}", "policy": policy, "jobs": len(work),
                "rounds": len(per_round), "wall_s": result.summary["wall_s"], "cpu_s": cpu,
                "policy_s": float(per_round.sum()), "round_median_ms": float(np.median(per_round) * 1e3),
                "round_p95_ms": float(np.percentile(per_round, 95) * 1e3), "round_max_ms": float(per_round.max() * 1e3),
                "avg_jct_h": result.summary["avg_jct_s"] / 3600,
            })
    return rows


def register_bench(bench_app: Any) -> None:
    """Add ``colocate bench simulator`` to the bench sub-app."""
    import typer

    @bench_app.command("simulator")
    def simulator_bench(
        workloads: str = typer.Option(None, "--workloads",
                                      help="Comma-separated workload files (default: Sia's philly and saturn "
                                           "workload-1, 160 jobs each)."),
        policies: str = typer.Option("colocate", "--policies", help="Comma-separated policies."),
        cluster: Path = typer.Option(SIA_CLUSTER, "--cluster"),
        profiles: Path = typer.Option(None, "--profiles", help="Sia traces directory (default <shared>/sia/traces)."),
        target_s: float = typer.Option(None, "--target",
                                       help="Wall-time target per run, seconds (default: 10 s up to 200 jobs, "
                                            "120 s above)."),
    ) -> None:
        """Simulate 160-job workloads and print the wall time of each run against the target."""
        from rich.console import Console
        from rich.table import Table

        from scheduler.formats.workloads import shared_data_dir
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
