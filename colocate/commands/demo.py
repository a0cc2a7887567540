"""``colocate demo``: the embedded default pipeline on this machine's device (the README's main command)."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def demo_spec(device: str | None = None):  # -> CampaignSpec
    """The bundled demo campaign, moved to CUDA (with MPS beside time-slicing) when a GPU is present."""
    import dataclasses
    from importlib import resources

    import yaml

    from profiler.mps import mps_unavailable_reason
    from profiler.spec import spec_from_dict

    source = resources.files("colocate") / "examples" / "demo.yaml"
    spec = spec_from_dict(yaml.safe_load(source.read_text()), source=str(source))
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        sharing = ("timeslice", "mps") if mps_unavailable_reason(device) is None else ("timeslice",)
        spec = dataclasses.replace(spec, device=device, sharing=sharing, batch_sizes=(64,), image_size=224,
                                   num_classes=1000, min_window_iters=20, warmup_iters=10, repeats=3)
    return spec


def demo(
    out: Path = typer.Option(Path("results/demo"), "--out", "-o", help="Results directory."),
    device: str = typer.Option(None, "--device", help="cpu or cuda[:N] [default: cuda if available]."),
) -> None:
    """Run the embedded default: a small campaign (solo + pairs) on this device and its δ table."""
    from colocate.commands._output import campaign_progress, console, summary_table
    from colocate.summary import cell_summary
    from profiler.campaign import run_campaign

    spec = demo_spec(device)
    console.print(f"[bold]1/1 profiling[/] {', '.join(spec.models)} at batch {list(spec.batch_sizes)} on "
                  f"{spec.device} ({', '.join(spec.sharing)}), {spec.repeats} repeats → {out}")
    with campaign_progress("demo campaign") as on_progress:
        store = run_campaign(spec, out, on_progress=on_progress)
    summary = cell_summary(store.runs(), store.jobs())
    console.print(summary_table(summary, "δ = Σ t / max t′ (mean ± 95% CI over repeats)"))
    console.print(f"results: {out}/runs.parquet, jobs.parquet, meta.json (+ CSV copies)")
