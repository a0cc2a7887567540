"""The comparison report: a markdown table (mean ± std over workloads), target checks and three plots.

Input is a list of finished runs (one per workload × policy, as ``colocate compare`` produces them, each
with its per-job and per-round tables). Output in ``out_dir``:

* ``report.md`` — setup, the table, per-workload figures, the targets of the simulator issue with pass/miss
  and by how much, diagnostics (load, migrations caused by packing), the co-location data provenance.
* ``summary.csv`` — one row per (workload, policy) with the ``colocate simulate --json`` fields (with
  replicates, one row per run and a ``replicate`` column; the tables and targets read their means per workload).
* ``jct_cdf.png`` — JCT CDF per policy, all workloads pooled (log time axis).
* ``utilization.png`` — busy-GPU share of the cluster over simulated time per policy (mean over workloads).
* ``packed_fraction.png`` — share of busy GPU-time that hosted a packed pair, per policy and workload.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from scheduler.report.figures import pyplot as _plt
from scheduler.report.figures import save_figure as _save

POLICY_ORDER = ("colocate", "colocate-triples", "sia", "gavel-sia", "gavel-refill", "gavel-packed", "tiresias", "gandiva",
                "fifo")


@dataclass
class SimulationRecord:
    """One finished simulation as the report needs it."""

    workload: str
    policy: str
    summary: Mapping[str, Any]
    jobs: Any          # pandas.DataFrame (jobs.parquet)
    rounds: Any        # pandas.DataFrame (rounds.parquet)
    migrations: int = 0         # restarts on the same (type, count) but other GPUs
    pair_migrations: int = 0    # ... of which the job is packed afterwards
    load: float = 1.0           # arrival rate as a multiple of the workload's own
    replicate: int = 0          # 0: the trace; k: its arrivals jittered with seed k (``colocate compare --replicates``)


def migrations_of(allocations: Any) -> tuple[int, int]:
    """Restarts that kept the configuration (type, GPU count) but moved GPUs, and how many joined a pair."""
    if allocations is None or len(allocations) == 0:
        return 0, 0
    a = allocations.sort_values(["job", "round"]).copy()
    a["cfg"] = a["gpu_type"].astype(str) + "x" + a["num_gpus"].astype(str)
    a["key"] = a["cfg"] + "|" + a["nodes"].astype(str) + "|" + a["gpus"].astype(str)
    g = a.groupby("job", sort=False)
    prev_key, prev_cfg = g["key"].shift(), g["cfg"].shift()
    moved = prev_key.notna() & (a["key"] != prev_key) & (a["cfg"] == prev_cfg)
    return int(moved.sum()), int((moved & a["partner"].notna()).sum())


def natural_sorted(names: Any) -> list[str]:
    """``workload-2`` before ``workload-10``."""
    import re

    return sorted(set(names), key=lambda n: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(n))])


def _order(policies: Iterable[str]) -> list[str]:
    rank = {p: i for i, p in enumerate(POLICY_ORDER)}
    return sorted(set(policies), key=lambda p: (rank.get(p, len(rank)), p))


def summary_frame(runs: Sequence[SimulationRecord]) -> Any:
    import pandas as pd

    replicated = any(r.replicate for r in runs)  # the column only where there are replicates: one run, as before
    rows = [{"workload": r.workload, "load": r.load, **({"replicate": r.replicate} if replicated else {}),
             **dict(r.summary), "migrations": r.migrations, "pair_migrations": r.pair_migrations} for r in runs]
    return pd.DataFrame(rows)


def replicate_means(frame: Any) -> Any:
    """One row per (workload, load, policy): each number the mean over the point's replicates (the frame itself
    when it has none), so that every table and target below reads one value per workload."""
    if "replicate" not in frame:
        return frame
    numeric = [c for c in frame.select_dtypes("number").columns if c not in ("load", "replicate")]
    keys = ["workload", "load", "policy"]
    means = frame.groupby(keys, sort=False)[numeric].mean()
    means["replicates"] = frame.groupby(keys, sort=False).size()
    means = means.reset_index()
    others = [c for c in frame.columns if c not in numeric and c not in keys and c != "replicate"]
    return means.merge(frame.groupby(keys, sort=False)[others].first().reset_index(), on=keys) if others else means


def _fmt(mean: float, std: float, scale: float = 1.0, digits: int = 2) -> str:
    if not math.isfinite(mean):
        return "–"
    if not math.isfinite(std):
        std = 0.0
    return f"{mean / scale:.{digits}f} ± {std / scale:.{digits}f}"


def aggregate_table(frame: Any) -> list[str]:
    """Markdown lines: one row per policy, mean ± std over workloads (each workload's figure the mean over its
    replicates; ``runs`` counts every run, ``completed`` the jobs of one run per workload)."""
    cols = [
        ("avg JCT (h)", "avg_jct_s", 3600.0, 2), ("p50 JCT (h)", "p50_jct_s", 3600.0, 2),
        ("p99 JCT (h)", "p99_jct_s", 3600.0, 1), ("makespan (h)", "makespan_s", 3600.0, 1),
        ("GPU-hours", "gpu_hours", 1.0, 0), ("utilization", "utilization", 1.0, 2),
        ("restarts", "restarts", 1.0, 0), ("packed fraction", "packed_fraction", 1.0, 3),
        ("wall (s)", "wall_s", 1.0, 1),
    ]
    if has_triples(frame):  # GPU-time share with three jobs on the GPUs (part of the packed fraction)
        cols.insert(-1, ("triple fraction", "triple_fraction", 1.0, 3))
    if "worst_slowdown" in frame:  # how slow jobs ran in groups (runs logged before the bound lack it)
        cols[-1:-1] = [("worst slowdown", "worst_slowdown", 1.0, 2), ("time above bound", "over_bound_fraction", 1.0, 3)]
    lines = ["| policy | runs | completed | " + " | ".join(c[0] for c in cols) + " |",
             "|---|---|---|" + "---|" * len(cols)]
    for policy in _order(frame["policy"]):
        sub = frame[frame["policy"] == policy]
        cells = [_fmt(float(sub[c].mean()), float(sub[c].std(ddof=1)) if len(sub) > 1 else 0.0, s, d)
                 for _, c, s, d in cols]
        runs = int(sub["replicates"].sum()) if "replicates" in sub else len(sub)
        done = f"{round(sub['completed'].sum())}/{round(sub['jobs'].sum())}"
        lines.append(f"| `{policy}` | {runs} | {done} | " + " | ".join(cells) + " |")
    return lines


def has_triples(frame: Any) -> bool:
    """Whether any run could pack groups of three (a triples policy) or did."""
    if "triple_fraction" not in frame:
        return False
    return bool((frame["triple_fraction"].fillna(0) > 0).any() or frame["policy"].str.contains("triples").any())


TRIPLES_NOTE = ("Groups of three: no measured triples are in the table, so a triple's ratios are predicted from its "
                "three pairs by adding slowdowns (1/ρ_x = 1 + Σ_partners (1/ρ_x|partner − 1)), the same prediction "
                "the ILP plans with; the simulated benefit of triples rests on that assumption. *Triple fraction* "
                "is the share of busy GPU-time with three jobs on the GPUs (included in the packed fraction).")


def per_workload_table(frame: Any, metric: str = "avg_jct_s", scale: float = 3600.0) -> list[str]:
    policies = _order(frame["policy"])
    lines = ["| workload | " + " | ".join(f"`{p}`" for p in policies) + " |", "|---|" + "---|" * len(policies)]
    for workload in natural_sorted(frame["workload"].unique()):
        sub = frame[frame["workload"] == workload].set_index("policy")
        cells = [f"{sub.loc[p, metric] / scale:.2f}" if p in sub.index else "–" for p in policies]
        lines.append(f"| {workload} | " + " | ".join(cells) + " |")
    return lines


@dataclass(frozen=True)
class TargetCheck:
    name: str
    value: float
    limit: float
    passed: bool
    detail: str


def target_checks(frame: Any) -> list[TargetCheck]:
    """The simulator issue's targets, on per-workload means (needs colocate and sia; gavel optional)."""
    pol = set(frame["policy"])
    out: list[TargetCheck] = []
    if not {"colocate", "sia"} <= pol:
        return out

    def mean(policy: str, metric: str) -> float:
        return float(frame[frame["policy"] == policy][metric].mean())

    r = mean("colocate", "avg_jct_s") / mean("sia", "avg_jct_s")
    out.append(TargetCheck("avg JCT colocate / sia ≤ 0.85", r, 0.85, r <= 0.85,
                           f"{mean('colocate', 'avg_jct_s') / 3600:.3f} h vs {mean('sia', 'avg_jct_s') / 3600:.3f} h"))
    if "gavel-sia" in pol:
        r = mean("colocate", "avg_jct_s") / mean("gavel-sia", "avg_jct_s")
        out.append(TargetCheck("avg JCT colocate / gavel-sia ≤ 0.5", r, 0.5, r <= 0.5,
                               f"{mean('colocate', 'avg_jct_s') / 3600:.3f} h vs "
                               f"{mean('gavel-sia', 'avg_jct_s') / 3600:.3f} h"))
    r = mean("colocate", "p99_jct_s") / mean("sia", "p99_jct_s")
    out.append(TargetCheck("p99 JCT colocate / sia ≤ 1", r, 1.0, r <= 1.0,
                           f"{mean('colocate', 'p99_jct_s') / 3600:.2f} h vs {mean('sia', 'p99_jct_s') / 3600:.2f} h"))
    r = mean("colocate", "gpu_hours") / mean("sia", "gpu_hours")
    out.append(TargetCheck("GPU-hours colocate / sia < 1", r, 1.0, r < 1.0,
                           f"{mean('colocate', 'gpu_hours'):.0f} vs {mean('sia', 'gpu_hours'):.0f} GPU-h"))
    return out


TARGETS_NOTE = ("The project's goals for the `colocate` policy (`colocate compare --targets`): average JCT at most "
                "0.85× Sia's and 0.5× Gavel's, p99 JCT no worse than Sia's, fewer GPU-hours than Sia.")


def target_lines(checks: Sequence[TargetCheck]) -> list[str]:
    if not checks:
        return ["(targets need the `colocate` and `sia` policies in the comparison)"]
    lines = ["| target | measured | result |", "|---|---|---|"]
    for c in checks:
        verdict = "**met**" if c.passed else f"**missed** by {abs(c.value - c.limit) / c.limit * 100:.1f} %"
        lines.append(f"| {c.name} | {c.value:.3f} ({c.detail}) | {verdict} |")
    return lines


# --------------------------------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------------------------------

def plot_jct_cdf(runs: Sequence[SimulationRecord], path: Path) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    by_policy: dict[str, list[float]] = {}
    for r in runs:
        done = r.jobs[r.jobs["completed"]]
        by_policy.setdefault(r.policy, []).extend((done["jct_s"] / 3600.0).tolist())
    for policy in _order(by_policy):
        values = np.sort(np.asarray(by_policy[policy], dtype=float))
        if len(values) == 0:
            continue
        ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post", label=policy,
                linewidth=2.2 if policy == "colocate" else 1.3)
    ax.set_xscale("log")
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda hours, _: f"{hours:g}"))  # 0.1, 1, 10 — not 10^-1
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT CDF (all workloads pooled)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return _save(fig, path)


def plot_utilization(runs: Sequence[SimulationRecord], path: Path, bin_s: float = 1800.0) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    by_policy: dict[str, list[Any]] = {}
    for r in runs:
        if len(r.rounds) == 0:
            continue
        rounds = r.rounds
        bins = (rounds["time_s"] // bin_s).astype(int)
        series = rounds.groupby(bins)["utilization"].mean()
        by_policy.setdefault(r.policy, []).append(series)
    for policy in _order(by_policy):
        import pandas as pd

        merged = pd.concat(by_policy[policy], axis=1).mean(axis=1).sort_index()
        ax.plot(merged.index * bin_s / 3600.0, merged.values, label=policy,
                linewidth=2.2 if policy == "colocate" else 1.2)
    ax.set_xlabel("simulated time (hours)")
    ax.set_ylabel("busy GPUs / all GPUs")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"GPU utilization over time ({bin_s / 60:.0f}-min bins, mean over workloads)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    return _save(fig, path)


def plot_packed_fraction(frame: Any, path: Path) -> Path:
    plt = _plt()
    policies = _order(frame["policy"])
    workloads = natural_sorted(frame["workload"].unique())
    fig, ax = plt.subplots(figsize=(7, 4.2))
    width = 0.8 / max(len(workloads), 1)
    for i, w in enumerate(workloads):
        sub = frame[frame["workload"] == w].set_index("policy")
        values = [float(sub.loc[p, "packed_fraction"]) if p in sub.index else 0.0 for p in policies]
        where = np.arange(len(policies)) + i * width - 0.4 + width / 2
        ax.bar(where, values, width=width, alpha=0.8, edgecolor="black", linewidth=0.5,
               label=w if len(workloads) <= 10 else None)
        for x, value in zip(where, values):
            if value == 0:  # a bar of height 0 is invisible: say it is there, and 0
                ax.text(x, 0.005, "0", ha="center", va="bottom", fontsize=6)
    ax.set_xticks(np.arange(len(policies)))
    ax.set_xticklabels(policies, rotation=20)
    ax.set_ylabel("packed GPU-time / busy GPU-time")
    ax.set_ylim(bottom=-0.01)  # the outline of a zero bar stays above the axis line
    ax.set_title("Packed fraction per policy (one bar per workload)")
    ax.grid(True, axis="y", alpha=0.3)
    if len(workloads) <= 10:
        ax.legend(fontsize=6, ncol=2)
    return _save(fig, path)


# --------------------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------------------

def diagnostics_lines(runs: Sequence[SimulationRecord], frame: Any) -> list[str]:
    lines = ["| policy | mean active jobs | rounds with waiting jobs | restarts | of which moves at same config "
             "| ... into a pair |", "|---|---|---|---|---|---|"]
    for policy in _order(frame["policy"]):
        rs = [r for r in runs if r.policy == policy]
        active = np.mean([r.rounds["active"].mean() for r in rs if len(r.rounds)]) if rs else float("nan")
        waiting = np.mean([(r.rounds["waiting"] > 0).mean() for r in rs if len(r.rounds)]) if rs else float("nan")
        restarts = np.mean([r.summary["restarts"] for r in rs])
        moves = np.mean([r.migrations for r in rs])
        pairs = np.mean([r.pair_migrations for r in rs])
        lines.append(f"| `{policy}` | {active:.1f} | {waiting * 100:.0f} % | {restarts:.0f} | {moves:.0f} | {pairs:.0f} |")
    return lines


def write_report(runs: Sequence[SimulationRecord], out_dir: str | Path, *, title: str, setup: Mapping[str, str],
                 colocation_note: str = "", notes: str = "", targets: bool = False) -> Path:
    """Write ``report.md``, ``summary.csv`` and the plots into ``out_dir``; returns the report path.

    With several load points (``SimulationRecord.load``) the report adds JCT across load (table and plot). The
    project's own targets (colocate against sia and gavel) are checked only when ``targets`` asks for them:
    a user's comparison has no targets to miss."""
    from scheduler.report.load import load_table, load_target_lines, plot_jct_vs_load, run_date

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs_frame = summary_frame(runs)
    runs_frame.to_csv(out / "summary.csv", index=False)
    frame = replicate_means(runs_frame)
    plot_jct_cdf(runs, out / "jct_cdf.png")
    plot_utilization(runs, out / "utilization.png")
    plot_packed_fraction(frame, out / "packed_fraction.png")
    loads = sorted(frame["load"].unique())
    nominal = frame[frame["load"] == 1.0] if 1.0 in loads else frame[frame["load"] == loads[0]]
    checks = target_checks(nominal)
    lines = [f"# {title}", "", f"Generated by `colocate compare`, {run_date()}."]
    lines += ["", "## Setup", ""]
    lines += [f"- **{k}**: {v}" for k, v in setup.items()]
    if len(loads) > 1:
        policies = _order(frame["policy"])
        plot_jct_vs_load(frame, policies, out / "jct_vs_load.png")
        lines += ["", "## JCT across load (hours, mean over workloads)", ""] + load_table(frame, policies)
        lines += ["", "![JCT vs load](jct_vs_load.png)"]
        if targets:
            lines += ["", "### Targets across load", ""] + load_target_lines(frame)
        lines += ["", f"The sections below are for load {nominal['load'].iloc[0]:g}×."]
        frame = nominal
    lines += ["", "## Results (mean ± std over workloads)", ""] + aggregate_table(frame)
    lines += ["", "Average JCT per workload (hours):", ""] + per_workload_table(frame)
    if targets:
        lines += ["", "## Targets", "", TARGETS_NOTE, ""] + target_lines(checks)
    lines += ["", "## Diagnostics", "",
              "Load and churn, mean per workload. A *move at the same config* is a checkpoint-restore that kept "
              "the GPU type and count but changed GPUs (for packing policies mostly a job moving onto its new "
              "partner's GPUs).", ""] + diagnostics_lines(runs, frame)
    lines += ["", "## Plots", "", "![JCT CDF](jct_cdf.png)", "", "![GPU utilization](utilization.png)", "",
              "![Packed fraction](packed_fraction.png)", ""]
    if colocation_note:
        lines += ["## Co-location data", "", colocation_note, ""]
        if has_triples(frame):
            lines += [TRIPLES_NOTE, ""]
    if notes:
        lines += ["## Analysis", "", notes.strip(), ""]
    lines += ["## Files", "",
              "- `summary.csv`: one row per (workload, policy) with the `colocate simulate --json` fields plus "
              "`migrations`/`pair_migrations` (with replicates: one row per run, and a `replicate` column; replicate "
              "k > 0 lives in `runs/<workload>/r<k>/<policy>/`).",
              "- `runs/<workload>/<policy>/`: `jobs.parquet` (per job: arrival, start, completion, JCT, restarts, "
              "GPU-hours, packed seconds), `rounds.parquet` (per round: active/running/waiting jobs, busy GPUs, "
              "utilization, packed and triple GPU-seconds, restarts, solver status and time), `allocations.parquet` "
              "(per round and running job: GPU type, count, nodes, GPUs, batch, partners, group size, solo and "
              "packed rates), "
              "`summary.json`.", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def colocation_provenance(tables: Sequence[str | Path], gpu_types: Sequence[str]) -> str:
    """A paragraph on where the co-location ratios the runs used came from: of each table, the rows of the
    cluster's GPU types only (transferred from Gavel's pairs vs measured), naming the tables that had none."""
    import pandas as pd

    wanted = set(gpu_types)
    parts, unused = [], []
    for path in tables:
        frame = pd.read_csv(path, comment="#")
        frame = frame[frame["gpu_type"].astype(str).isin(wanted)]
        shown = _as_typed(path)
        if frame.empty:
            unused.append(f"`{shown}`")
            continue
        n = len(frame)
        flags = frame["transferred"].astype(str).str.lower() if "transferred" in frame.columns else None
        transferred = int(flags.isin(["true", "1"]).sum()) if flags is not None else 0
        # a table of `colocate predict` marks its predictions (with intervals): they are not measurements
        predicted = int((frame["source"].astype(str) == "predicted").sum()) if "source" in frame.columns else 0
        types = ", ".join(sorted(frame["gpu_type"].astype(str).unique()))
        parts.append(f"Table `{shown}`: {n} rows for the cluster's GPU types {types}; **{transferred} of {n} values "
                     f"are transferred** from Gavel's measured pairs (K80/P100/V100) by the mapping of "
                     f"`scheduler/formats/transfer.py`, "
                     + (f"**{predicted} are predicted** by the δ predictor (`colocate predict`), " if predicted else "")
                     + f"{n - transferred - predicted} are measurements."
                     + (" Each row's `source` column names the Gavel pair used." if transferred else ""))
    if not parts:
        return (f"No co-location table covers the cluster's GPU types ({', '.join(sorted(wanted))}): packing "
                f"policies could not pair jobs.")
    if unused:
        parts.append(f"Not used (no rows for these GPU types): {', '.join(unused)}.")
    return " ".join(parts)


def _as_typed(path: str | Path) -> Path:
    """The path relative to the working directory when it is under it, as the user would type it."""
    try:
        return Path(path).resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return Path(path)
