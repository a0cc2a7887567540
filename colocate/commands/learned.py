"""``colocate learned --state DIR [--out FILE.csv]``: export the colocation table the scheduler learned online.

The CSV is in the colocation-table format (``gpu_type,type_a,type_b,ratio_a,ratio_b``, one row per GPU type
and pair, plus the sample count ``n`` and each ratio's interval), so ``colocate schedule``/``simulate --colocation`` and
``colocate serve --colocation`` read it.
"""

from __future__ import annotations

from pathlib import Path

from colocate import cli_kit
from colocate.cli_config import input_option
from colocate.commands.jobs import SERVER_HELP, STATE_HELP


def register(app: cli_kit.App) -> None:
    app.command("learned")(learned)


def learned(
    state: Path = cli_kit.Option(None, "--state", help=STATE_HELP, readable=False),
    server: str = cli_kit.Option(None, "--server", help=SERVER_HELP, show_default=False),
    out: Path = input_option("out"),
) -> None:
    """Show (or export) measured throughputs and pair ratios, with the number of samples behind each and their
    source (run or probe), the automatic probes, and the gradient statistics jobs report (noise scale, efficiency).
    --out writes the learned colocation table (a CSV)."""
    from rich.table import Table

    from colocate.commands._output import console
    from profiler.campaign.outdir import check_out_file
    from scheduler.learning.online import learned_table_frame
    from scheduler.service.front.views import learned_pairs, learned_view
    from scheduler.service.state.store import StateStore

    if out is not None:
        check_out_file(out)  # a directory, under a file, in a state directory: one line, before anything is read
    from scheduler.service.front.remote import connect

    client = connect(state, server)
    view = client.call("learned") if client is not None else learned_view(StateStore(state, create=False, readonly=True))
    if out is not None:
        from scheduler.formats.colocation_table import write_colocation_table

        frame = learned_table_frame(view["colocation"])
        if not len(frame):
            console.print("no packed pair has been measured against a measured solo time yet; nothing written")
            raise cli_kit.Exit(1)
        write_colocation_table(frame, out)
        console.print(f"wrote {len(frame)} pair(s) to {out}", highlight=False)
        return
    solo = Table(title="measured throughput (solo)")
    for column in ("application", "GPU type", "GPUs", "batch", "iteration (s)", "samples/s", "samples", "source"):
        solo.add_column(column)
    for m in view["throughput"]:
        solo.add_row(m["application"], m["gpu_type"], str(m["num_gpus"]), str(m["batch_size"]),
                     f"{m['iter_time_s']:.4f}", f"{m['samples_per_s']:.1f}", str(m["count"]), m["source"])
    pairs = Table(title="learned colocation ratios t/t'")
    for column in ("GPU type", "job a", "job b", "GPUs", "ratio a", "ratio b", "samples a", "samples b", "solo from",
                   "source"):
        pairs.add_column(column)
    for r in view["colocation"]:  # a pending row waits for its solo time: no ratio yet
        ratios = [f"{r[k]:.3f}" if r["solo_source"] == "measured" else "–" for k in ("ratio_a", "ratio_b")]
        pairs.add_row(r["gpu_type"], r["type_a"], r["type_b"], str(r["num_gpus"]), *ratios, str(r["n_a"]),
                      str(r["n_b"]), r["solo_source"], r["source"])
    console.print(solo)
    console.print(pairs)
    learned = learned_pairs(view["colocation"])
    console.print(f"{learned} learned pair(s) (measured together and alone: what --out writes and the "
                  f"colocate_learned_pairs metric counts); {len(view['colocation']) - learned} pending a solo time",
                  highlight=False)
    if view["gradients"]:
        console.print(_gradients_table(view["gradients"]))
    if view["probes"]:
        from rich.text import Text

        from common.untrusted import printable

        probes = Table(title="automatic probes (colocate serve --probe)")
        for column in ("probe", "GPU type", "job type", "partner", "state", "GPU-s", "error"):
            probes.add_column(column)
        for p in view["probes"]:
            gpu_s = f"{p['gpu_s']:.1f}" if isinstance(p.get("gpu_s"), (int, float)) else "running"
            cells = (p["key"], p["gpu_type"], p["type"], p["partner_type"] or "–", p["state"], gpu_s, p.get("error", ""))
            probes.add_row(*(Text(printable(c)) for c in cells))  # stored texts are neither markup nor escapes
        console.print(probes)


def _gradients_table(rows: list[dict]) -> object:
    """The gradient statistics jobs reported, as serve uses them: noise scale tr Σ / |G|², efficiency at the batch."""
    from rich.table import Table

    def number(value: float | None) -> str:
        return "–" if value is None else f"{value:.4g}"

    table = Table(title="measured gradient statistics (efficiency (B_noise + M0) / (B_noise + M))")
    for column in ("job", "application", "|G|²", "tr Σ", "noise scale", "lr", "batch M", "base M0", "efficiency",
                   "reports"):
        table.add_column(column)
    for g in rows:
        table.add_row(g["job"], g["application"], number(g["grad_sqr"]), number(g["grad_var"]),
                      number(g["noise_scale"]) if g["noise_scale"] is not None else "∞", number(g["lr"]),
                      str(g["batch_size"]), str(g["base_batch"]), number(g["efficiency"]), str(g["gradient_reports"]))
    return table
