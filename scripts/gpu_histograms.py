"""Histograms of what each measured run did to the GPU: mean SM occupancy and DRAM bandwidth use (NVML GPM, over
the run's window) and the device memory of its jobs, by how the GPU was shared (alone, pairs and triples, time-sliced or
under MPS). One PNG, three panels; the figures behind the occupancy and memory claims of results/<gpu>/REPORT.md.

Usage: python scripts/gpu_histograms.py OUT.png RESULTS_DIR [RESULTS_DIR ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

PANELS = (("gpm_sm_occupancy_mean", "mean SM occupancy over the window (%)"),
          ("gpm_dram_bw_util_mean", "mean DRAM bandwidth use over the window (%)"),
          ("group_memory_gib", "device memory of the run's jobs, summed (GiB)"))


def load_runs(dirs: list[Path]) -> pd.DataFrame:
    """Every ok run of the directories, with a ``mode`` label: solo, or the sharing mode and group size."""
    from profiler.results.store import read_results_dir

    found = [read_results_dir(d) for d in dirs]
    runs = pd.concat([f.runs for f in found], ignore_index=True)
    runs = runs[runs["status"] == "ok"].copy()
    # NVML's per-process memory of each member (context included) summed over the run's jobs; the run's own
    # device-wide figure (memory_used_max_mib) also counts the campaign's idle warm workers
    jobs = pd.concat([f.jobs for f in found], ignore_index=True)
    memory = jobs.groupby("run_id")["nvml_process_memory_mib"].sum(min_count=1).astype(float) / 1024
    runs["group_memory_gib"] = runs["run_id"].map(memory)
    size = runs["group_size"].astype(int)
    runs["mode"] = ["solo" if n == 1 else f"{s}, {'pairs' if n == 2 else 'triples'}"
                    for s, n in zip(runs["sharing"], size)]
    return runs


def plot(runs: pd.DataFrame, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gpu = ", ".join(sorted(runs["gpu_type"].astype(str).unique()))
    fig, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 3.8))
    for ax, (column, label) in zip(axes, PANELS):
        values = runs[column].astype(float)
        bins = 20 if values.notna().any() else 1
        for mode, rows in runs.groupby("mode"):
            data = rows[column].astype(float).dropna()
            if len(data):
                ax.hist(data, bins=bins, range=(values.min(), values.max()), alpha=0.5,
                        label=f"{mode} ({len(data)})")
        ax.set_xlabel(label)
        ax.set_ylabel("runs")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"What each run did to the GPU ({gpu}; {len(runs)} ok runs)")
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    dirs = [Path(d) for d in argv[1:]]
    missing = [str(d) for d in dirs if not d.is_dir()]
    if missing:
        print(f"error: not a results directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    runs = load_runs(dirs)
    if runs.empty:
        print(f"error: no ok runs in {', '.join(map(str, dirs))} (runs.parquet / runs.csv, status 'ok')",
              file=sys.stderr)
        return 2
    plot(runs, Path(argv[0]))
    summary = runs.groupby("mode")[[c for c, _ in PANELS]].median().round(1)
    print(summary.to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
