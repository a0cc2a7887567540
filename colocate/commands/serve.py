"""``colocate serve``: run the live scheduler on a state directory until stopped (Ctrl-C / SIGTERM)."""

from __future__ import annotations

import signal
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def serve(
    cluster: Path = typer.Option(..., "--cluster", help="Cluster YAML: gpu_types: {NAME: {nodes, gpus_per_node, memory_gb}}."),
    state: Path = typer.Option(..., "--state", help="State directory (created if missing): database, job logs, checkpoints."),
    backend: str = typer.Option("ray", "--backend", help="ray (a Ray cluster; --address), slurm (a Slurm "
                                                           "cluster: the cluster file's slurm section) or local."),
    policy: str = typer.Option("colocate", "--policy", help="Policy by name: colocate, sia, gavel, tiresias, fifo, ..."),
    round_s: float = typer.Option(60.0, "--round-s", help="Seconds between rounds."),
    colocation: Path = typer.Option(None, "--colocation", help="Colocation table CSV (prior pair ratios); "
                                                          "default: the bundled measured pairs of the cluster's "
                                                          "GPU types under --sharing (h100), if any."),
    profiles: Path = typer.Option(None, "--profiles", help="Throughput profiles (CSV or Sia traces dir); default: a prior "
                                                            "that measurements calibrate."),
    address: str = typer.Option(None, "--address", help="Ray cluster address (default: RAY_ADDRESS, else start one)."),
    device: str = typer.Option("auto", "--device", help="Built-in jobs train on: auto, cpu or cuda."),
    sharing: str = typer.Option("timeslice", "--sharing", help="How packed groups share their GPUs (a registered "
                                                                "sharing mode: timeslice, mps)."),
    restart_cost: float = typer.Option(None, "--restart-cost", help="Sia's restart cost S in seconds (ILP policies) "
                                                                    "[25]."),
    time_limit: float = typer.Option(None, "--time-limit", help="ILP time limit per round, seconds [10]."),
    grace: float = typer.Option(30.0, "--grace", help="Seconds a job has to checkpoint after SIGTERM."),
    threads: int = typer.Option(1, "--threads", help="CPU threads per built-in job process."),
    max_rounds: int = typer.Option(None, "--max-rounds", help="Stop after this many rounds (default: until stopped)."),
    min_run: float = typer.Option(None, "--min-run", help="Seconds a (re)started job keeps its allocation.",
                                 show_default="max(--round-s, 3 x its measured start-up)"),
    metrics_port: int = typer.Option(None, "--metrics-port", help="Expose Prometheus metrics on 127.0.0.1:PORT."),
    probe: bool = typer.Option(None, "--probe/--no-probe", help="Profile never-measured zoo job types briefly on "
                                                                "spare GPUs (default: on with GPUs, off "
                                                                "with --device cpu)."),
    probe_budget: float = typer.Option(None, "--probe-budget", help="GPU-seconds all probes of this state directory "
                                                                    "may use [3600]."),
) -> None:
    """Run packed, adaptive jobs: every round the policy decides, the executor enacts only the changes."""
    from colocate.commands._output import error_console
    from scheduler.service.serve import serve_forever

    stop = {"now": False}

    def request_stop(signum: int, frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    def on_round(stats: object) -> None:
        error_console.print(f"round {stats.round}: {stats.active_jobs} active, {stats.stopped} stopped, "  # type: ignore[attr-defined]
                            f"{stats.started} started, {stats.total_s:.3f} s (policy {stats.policy_s:.3f} s)",  # type: ignore[attr-defined]
                            highlight=False)

    serve_forever(cluster_path=cluster, state_dir=state, backend=backend, policy=policy, round_s=round_s,
                  colocation=colocation, profiles=profiles, address=address, device=device, sharing=sharing,
                  restart_cost=restart_cost, time_limit=time_limit, grace=grace, threads=threads,
                  max_rounds=max_rounds, should_stop=lambda: stop["now"], on_round=on_round, min_run=min_run,
                  metrics_port=metrics_port, probe=probe, probe_budget=probe_budget,
                  announce=lambda line: error_console.print(line, highlight=False, soft_wrap=True))
