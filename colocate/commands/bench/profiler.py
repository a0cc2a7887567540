"""``colocate bench profiler``: NVML sampler overhead and campaign efficiency (window / wall time).

``--estimate SPEC`` prints the protocol's wall-time estimate of a campaign instead (nothing is run);
``--results DIR`` takes measured solo times from a results directory, ``--set NAME=VALUE`` changes an
assumption (:class:`profiler.campaign.estimate.EstimateAssumptions`).
"""

from __future__ import annotations

from pathlib import Path

from colocate import cli_kit


def register_bench(bench_app: cli_kit.App) -> None:
    bench_app.command("profiler")(bench_profiler)


def bench_profiler(
    spec_path: Path = cli_kit.Option(None, "--spec", help="Campaign to time.", show_default="the demo campaign"),
    device: str = cli_kit.Option(None, "--device", help="cpu or cuda[:N].", show_default="cuda if available"),
    model: str = cli_kit.Option("resnet18", "--model", help="Job type model for the sampler-overhead runs."),
    batch_size: int = cli_kit.Option(None, "--batch", help="Batch size.", show_default="the spec's first"),
    pairs: int = cli_kit.Option(3, "--pairs", help="On/off pairs of solo runs for the sampler overhead."),
    estimate: Path = cli_kit.Option(None, "--estimate", help="Only estimate this campaign's wall time on one GPU "
                                  "from its protocol (runs nothing)."),
    gpu: str = cli_kit.Option("h100", "--gpu", help="GPU type the estimate assumes."),
    results: Path = cli_kit.Option(None, "--results", help="With --estimate: a results directory whose measured "
                                 "solo times replace the FLOP-rate model."),
    assume: list[str] = cli_kit.Option([], "--set", help="With --estimate: NAME=VALUE for an estimate assumption "
                                     "(e.g. process_start_s=6, achieved_tflops=tf32:30); repeatable."),
) -> None:
    """Print the NVML sampler's overhead and the campaign efficiency for results/BENCHMARKS.md."""
    import dataclasses

    if estimate is not None:
        _print_estimate(estimate, gpu, results, assume)
        return

    from colocate.commands._output import console
    from colocate.commands.demo import demo_spec
    from profiler.bench import campaign_efficiency, sampler_overhead
    from profiler.campaign.cells import JobType
    from profiler.campaign.spec import load_spec
    from profiler.gpu.devices import resolve_device

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
                  f"wall = {efficiency.efficiency:.1%} over {efficiency.runs} runs (target ≥ 80 %)")


def _print_estimate(spec_path: Path, gpu: str, results: Path | None, assume: list[str]) -> None:
    from colocate.commands._output import console
    from common.errors import InputError
    from profiler.campaign.estimate import (
        GPU_ASSUMPTIONS,
        EstimateAssumptions,
        assumptions_for,
        estimate_campaign,
        measured_solo_times,
    )
    from profiler.campaign.spec import load_spec

    if gpu not in GPU_ASSUMPTIONS and results is None:
        raise InputError(f"no estimate assumptions for GPU type '{gpu}'", field="--gpu",
                         valid=f"{', '.join(GPU_ASSUMPTIONS)}, or --results DIR with solo times measured on that GPU")
    values = {}
    for item in assume:
        name, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"'{item}' is not NAME=VALUE", field="--set", valid="e.g. process_start_s=6")
        values[name.strip()] = value.strip()
    try:
        assumptions = assumptions_for(gpu).with_values(values)
    except ValueError as exc:
        raise InputError(str(exc), field="--set", valid="a field of EstimateAssumptions and a number >= 0") from None
    if results is not None:
        if not results.is_dir():
            raise InputError("is not a directory", source=results, field="--results",
                             valid="a results directory written by `colocate profile`")
        assumptions = EstimateAssumptions(**{**assumptions.__dict__, "solo_times_s": measured_solo_times(results)})
    spec = load_spec(spec_path)
    result = estimate_campaign(spec, assumptions)
    console.print(f"estimate for {spec.name} on one {gpu}: {result.runs} runs ({result.infeasible} refused by the "
                  f"memory pre-check), {result.total_s / 60:.1f} min wall = window {result.window_s:.0f} s + "
                  f"warm-up {result.warmup_s:.0f} s + process start {result.startup_s:.0f} s + other "
                  f"{result.overhead_s:.0f} s + {result.windows} device call(s) {result.per_window_s:.0f} s; "
                  f"efficiency {result.efficiency:.0%} (workers: {spec.workers}; measured solo times for "
                  f"{result.measured} job type(s))")
