"""``colocate bench profiler``: NVML sampler overhead and campaign efficiency (window / wall time)."""

from __future__ import annotations

from pathlib import Path

import typer


def register_bench(bench_app: typer.Typer) -> None:
    bench_app.command("profiler")(bench_profiler)


def bench_profiler(
    spec_path: Path = typer.Option(None, "--spec", help="Campaign to time [default: the demo campaign]."),
    device: str = typer.Option(None, "--device", help="cpu or cuda[:N] [default: cuda if available]."),
    model: str = typer.Option("resnet18", "--model", help="Job type model for the sampler-overhead runs."),
    batch_size: int = typer.Option(None, "--batch", help="Batch size [default: the spec's first]."),
    pairs: int = typer.Option(3, "--pairs", help="On/off pairs of solo runs for the sampler overhead."),
) -> None:
    """Print the NVML sampler's overhead and the campaign efficiency for results/BENCHMARKS.md."""
    import dataclasses

    from colocate.commands._output import console
    from colocate.commands.demo import demo_spec
    from profiler.bench import campaign_efficiency, sampler_overhead
    from profiler.cells import JobType
    from profiler.devices import resolve_device
    from profiler.spec import load_spec

    spec = load_spec(spec_path) if spec_path else demo_spec(device)
    if device:
        spec = dataclasses.replace(spec, device=device)
    target = resolve_device(spec.device)
    console.print(f"device: {spec.device} ({target.name}); campaign: {spec.name}")
    job = JobType(model, batch_size or spec.batch_sizes[0])
    overhead = sampler_overhead(spec, job, pairs=pairs)
    if overhead.applicable:
        console.print(f"NVML sampler overhead on {job.label}: {overhead.overhead_pct:+.2f} % "
                      f"± {overhead.ci_pct:.2f} % (t on {overhead.t_on_s * 1e3:.2f} ms, off "
                      f"{overhead.t_off_s * 1e3:.2f} ms, {overhead.pairs} on/off pairs; target ≤ 1 %)")
    else:
        console.print(f"NVML sampler overhead: {overhead.reason}")
    efficiency = campaign_efficiency(spec)
    console.print(f"campaign efficiency: {efficiency.window_s:.1f} s measured window / {efficiency.wall_s:.1f} s "
                  f"wall = {efficiency.efficiency:.1%} over {efficiency.runs} runs (target on GPU ≥ 50 %)")
