"""What learning pair ratios costs: `colocate` with each ``--belief`` beside `sia` and the truth-given run.

    python scripts/belief_sweep.py --out results/sim/belief [--workloads GLOB,...] [--loads 1,2]
                                   [--beliefs truth,predicted,none,noisy:0.3] [--demo] [--rerun BELIEFS]
                                   [--throughput bootstrap --step-times fitted] [--explore-contention 0]
                                   [--replicates 3]

Each (workload, load) runs `sia` and `colocate` once per belief on Sia's 64-GPU cluster with the bundled
colocation table as the truth (the load sweep's setup, ``results/sim/load-sweep``); ``--demo`` adds the
demo workload on the bundled 32-GPU cluster. ``--replicates N`` runs each point N times, replicate k with
every arrival moved by a seeded draw inside one round (:meth:`Workload.jittered`; replicate 0 is the trace
itself): one run's outcome moves by a few percent with such a shift, so targets are judged on the mean.
Writes ``runs/<workload>/[r<k>/]<policy>/`` (summary.json, rounds and belief.parquet), ``summary.csv`` (one
row per run), ``ratios.csv`` (JCT ratio to `sia` and regret = JCT(belief) / JCT(truth) per workload, load,
replicate and belief), ``ratios-mean.csv`` (the same of the mean JCTs over the replicates, with each ratio's
range across them) and ``jct_vs_load.png``; prints the mean ratios.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from common.errors import InputError

CLUSTER = "scheduler/examples/sia-64gpu.yaml"
WORKLOADS = "/work/shared/data/sia/workloads/philly/workload-1.csv,/work/shared/data/sia/workloads/saturn/workload-1.csv"


def run_one(cluster: Any, work: Any, policy: str, belief: str, out: Path, profiles: Any = None,
            colocation: Any = None, models: dict[str, Any] | None = None) -> dict:
    from scheduler.sim.compare import code_version
    from scheduler.sim.config import SimConfig
    from scheduler.sim.simulator import simulate

    result = simulate(cluster, work, policy, colocation=colocation, profiles=profiles,
                      config=SimConfig(belief=belief if policy != "sia" else "truth", **(models or {})))
    result.meta["code"] = code_version()
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps({**result.to_json(), "meta": result.meta}, indent=2, default=str))
    result.rounds.to_parquet(out / "rounds.parquet", index=False)
    if result.belief is not None:
        result.belief.to_parquet(out / "belief.parquet", index=False)
    return {"policy": policy, "belief": belief if policy != "sia" else "-", **result.to_json()}


def cases(args: argparse.Namespace) -> list[tuple[str, float, int, Any, Any, Any, Any]]:
    """(label, load, replicate, cluster, workload, profiles, colocation) for every run."""
    from scheduler.formats import bundled
    from scheduler.formats.workloads import read_workload
    from scheduler.model.cluster import load_cluster
    from scheduler.sim.compare import expand_workloads, parse_loads, workload_label

    out: list[tuple[str, float, int, Any, Any, Any, Any]] = []
    cluster = load_cluster(CLUSTER)
    for k in range(args.replicates):
        for load in parse_loads(args.loads):
            for f in expand_workloads(args.workloads):
                work = read_workload(f).at_load(load).jittered(k)
                out.append((f"{workload_label(f)}@{load:g}x", load, k, cluster, work, None, None))
        if args.demo:
            out.append(("demo@1x", 1.0, k, load_cluster(bundled.default_cluster()),
                        read_workload("scheduler/examples/demo-workload.csv").jittered(k),
                        bundled.bundled_profiles_dir(), bundled.default_colocation()))
    return out


def ratios(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (workload, load, replicate, belief): JCT / sia's, regret = JCT / truth-given JCT, share of the truth's
    gain over `sia`."""
    rows = []
    if "replicate" not in frame:
        frame = frame.assign(replicate=0)
    for (label, load, k), group in frame.groupby(["workload", "load", "replicate"], sort=False):
        sia = float(group.loc[group["policy"] == "sia", "avg_jct_s"].iloc[0])
        truth = float(group.loc[group["belief"] == "truth", "avg_jct_s"].iloc[0])
        for r in group[group["policy"] == "colocate"].itertuples(index=False):
            gain = sia - truth
            rows.append({"workload": label, "load": load, "replicate": k, "belief": r.belief,
                         "avg_jct_s": r.avg_jct_s, "sia_jct_s": sia, "truth_jct_s": truth,
                         "vs_sia": r.avg_jct_s / sia, "regret": r.avg_jct_s / truth,
                         "gain_share": (sia - r.avg_jct_s) / gain if gain > 0 else float("nan"),
                         "packed_fraction": r.packed_fraction, "restarts": r.restarts})
    return pd.DataFrame(rows)


def mean_ratios(table: pd.DataFrame) -> pd.DataFrame:
    """The ratios of :func:`ratios` taken on the mean JCTs over the replicates, with each per-replicate ratio's
    range (``*_min``, ``*_max``): what the targets are judged on when a point has several replicates."""
    rows = []
    for (label, load, belief), g in table.groupby(["workload", "load", "belief"], sort=False):
        jct, sia, truth = g["avg_jct_s"].mean(), g["sia_jct_s"].mean(), g["truth_jct_s"].mean()
        gain = sia - truth
        rows.append({"workload": label, "load": load, "belief": belief, "replicates": len(g), "avg_jct_s": jct,
                     "sia_jct_s": sia, "truth_jct_s": truth, "vs_sia": jct / sia, "regret": jct / truth,
                     "gain_share": (sia - jct) / gain if gain > 0 else float("nan"),
                     **{f"{c}_{f}": getattr(g[c], f)() for c in ("vs_sia", "regret") for f in ("min", "max")},
                     "restarts": g["restarts"].mean()})
    return pd.DataFrame(rows)


def plot(table: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweep = table[~table["workload"].str.startswith("demo")]  # mean_ratios: one row per point and belief
    mean = sweep.groupby(["belief", "load"])["vs_sia"].mean().unstack(0)
    fig, ax = plt.subplots(figsize=(6, 4))
    for belief in mean.columns:
        ax.plot(mean.index, mean[belief], marker="o", label=f"colocate, belief {belief}")
    ax.axhline(1.0, color="grey", linestyle="--", label="sia")
    ax.set_xlabel("load (× arrival rate)")
    ax.set_ylabel("mean JCT / sia's (mean over workloads)")
    ax.set_title("What learning pair ratios costs")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def plot_belief_error(root: Path, label: str, path: Path) -> None:
    """Mean |belief Σr − true Σr| over the pairs observed so far, against time, per belief, for one run point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for run in sorted((root / "runs" / label).glob("colocate-*/belief.parquet")):
        frame = pd.read_parquet(run)
        if frame.empty:
            continue
        frame["error"] = ((frame["belief_a"] + frame["belief_b"]) - (frame["truth_a"] + frame["truth_b"])).abs()
        errors, current = [], {}
        for row in frame.itertuples(index=False):
            current[(row.gpu_type, row.type_a, row.type_b)] = row.error
            errors.append(sum(current.values()) / len(current))
        ax.plot(frame["time_s"] / 3600, errors, label=run.parent.name.replace("colocate-", "belief "))
    ax.set_xlabel("simulated time (h)")
    ax.set_ylabel("mean |belief Σr − true Σr|, pairs run so far")
    ax.set_title(f"Belief against truth, {label}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/sim/belief"))
    parser.add_argument("--workloads", default=WORKLOADS)
    parser.add_argument("--loads", default="1,2")
    parser.add_argument("--beliefs", default="truth,predicted,none,noisy:0.3")
    parser.add_argument("--demo", action="store_true")
    parser.add_argument("--replicates", type=int, default=1,
                        help="Runs per point, replicate k with arrivals jittered inside one round (seed k; 0: as is).")
    parser.add_argument("--rerun", default=None,
                        help="Run only these beliefs (comma-separated); the other runs are read from their summary.json.")
    parser.add_argument("--throughput", default=None,
                        help="The simulator's throughput belief (default: SimConfig's; the runs of results/sim/belief "
                             "were made with 'bootstrap', the default then).")
    parser.add_argument("--step-times", default=None, help="True step times (default: SimConfig's; 'fitted' then).")
    parser.add_argument("--measure-batches", default=None,
                        help="each | first: which batches a job measures in a round (default: SimConfig's; 'first' "
                             "is the model of results/sim/belief-replicates' top-level runs).")
    parser.add_argument("--explore-contention", type=float, default=None,
                        help="Learning beliefs explore only in rounds whose jobs ask for >= this x the GPUs "
                             "(default: SimConfig's; 0 = in every round, the rule of results/sim/belief-defaults).")
    args = parser.parse_args(argv)
    models: dict[str, Any] = {k: v for k, v in (("throughput", args.throughput), ("step_times", args.step_times),
                                                ("measure_batches", args.measure_batches),
                                                ("explore_contention", args.explore_contention)) if v is not None}
    try:  # a bad model option is refused before any run, in one line naming it
        from scheduler.sim.config import SimConfig

        SimConfig(**models)
    except InputError as exc:
        parser.error(str(exc))
    rows = []
    if args.replicates < 1:
        parser.error(f"--replicates {args.replicates}: valid is an integer >= 1")
    for label, load, k, cluster, work, profiles, colocation in cases(args):
        for policy, belief in [("sia", "-"), *(("colocate", b) for b in args.beliefs.split(","))]:
            name = policy if policy == "sia" else f"colocate-{belief.replace(':', '')}"
            where = args.out / "runs" / label / (f"r{k}" if k else "") / name
            kept = args.rerun is not None and belief not in args.rerun.split(",") and (where / "summary.json").is_file()
            if kept:
                summary = json.loads((where / "summary.json").read_text())
                row = {"policy": policy, "belief": belief if policy != "sia" else "-",
                       **{k: v for k, v in summary.items() if k != "meta"}}
            else:
                row = run_one(cluster, work, policy, belief, where, profiles, colocation, models)
            rows.append({"workload": label, "load": load, "replicate": k, **row})
            print(f"{label} r{k} {name}: {row['avg_jct_s']:.0f} s, packed {row['packed_fraction']:.3f}, "
                  f"{row['wall_s']:.0f} s wall", flush=True)
            pd.DataFrame(rows).to_csv(args.out / "summary.csv", index=False)
    table = ratios(pd.DataFrame(rows))
    table.to_csv(args.out / "ratios.csv", index=False)
    means = mean_ratios(table)
    means.to_csv(args.out / "ratios-mean.csv", index=False)
    plot(means, args.out / "jct_vs_load.png")
    first = table["workload"].iloc[-1] if len(table) else None
    for label in dict.fromkeys(table["workload"]):
        if label.endswith("@2x") and label.startswith("philly"):
            first = label
    if first is not None:
        plot_belief_error(args.out, first, args.out / "belief_error.png")
    print(means.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
