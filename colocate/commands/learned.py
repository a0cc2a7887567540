"""``colocate learned --state DIR [--out FILE.csv]``: export the colocation table the scheduler learned online.

The CSV is in the colocation-table format (``gpu_type,type_a,type_b,ratio_a,ratio_b`` plus the GPU count,
sample counts and where the solo times came from), so ``colocate schedule``/``simulate --colocation`` and
``colocate serve --colocation`` read it.
"""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("learned")(learned)


def learned(
    state: Path = typer.Option(..., "--state", help="State directory of the scheduler."),
    out: Path = typer.Option(None, "--out", "-o", help="Write the learned colocation table here (CSV)."),
) -> None:
    """Show (or export) measured throughputs and pair ratios, with the number of samples behind each."""
    from rich.table import Table

    from colocate.commands._output import console
    from scheduler.service.learning import learned_table_frame
    from scheduler.service.state import StateStore
    from scheduler.service.views import learned_view

    view = learned_view(StateStore(state, create=False))
    if out is not None:
        from scheduler.formats.colocation_table import write_colocation_table

        if not view["colocation"]:
            console.print("no packed pair has been measured yet; nothing written")
            raise typer.Exit(1)
        write_colocation_table(learned_table_frame(view["colocation"]), out)
        console.print(f"wrote {len(view['colocation'])} pair(s) to {out}", highlight=False)
        return
    solo = Table(title="measured throughput (solo)")
    for column in ("application", "GPU type", "GPUs", "batch", "iteration (s)", "samples/s", "samples"):
        solo.add_column(column)
    for m in view["throughput"]:
        solo.add_row(m["application"], m["gpu_type"], str(m["num_gpus"]), str(m["batch_size"]),
                     f"{m['iter_time_s']:.4f}", f"{m['samples_per_s']:.1f}", str(m["count"]))
    pairs = Table(title="learned colocation ratios t/t'")
    for column in ("GPU type", "job a", "job b", "GPUs", "ratio a", "ratio b", "samples a", "samples b", "solo from"):
        pairs.add_column(column)
    for r in view["colocation"]:
        pairs.add_row(r["gpu_type"], r["type_a"], r["type_b"], str(r["num_gpus"]), f"{r['ratio_a']:.3f}",
                      f"{r['ratio_b']:.3f}", str(r["n_a"]), str(r["n_b"]), r["solo_source"])
    console.print(solo)
    console.print(pairs)
