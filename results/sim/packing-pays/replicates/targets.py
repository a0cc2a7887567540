"""Issue 46's targets on the mean over replicates (NOTES.md, section 8).

python results/sim/packing-pays/replicates/targets.py SUMMARY_CSV [SUMMARY_CSV ...] [ROWS.jsonl ...] [--out CSV]
    -> the table and the verdicts on stdout; targets.csv beside this script (or CSV)

Each SUMMARY_CSV is written by ``scripts/belief_sweep.py`` (one row per run: workload, load, replicate, policy,
belief, avg_jct_s, restarts, packed_fraction). ROWS.jsonl (``colocate bench variants --policies colocate --json``
with variants named truth, none, predicted, on the workloads written at each load as ``<trace>-<load>x/
workload-<i>.csv``) replace the CSVs' `colocate` runs: only `sia` is read from the CSVs then. Every ratio is taken
on the mean JCT over a point's replicates; ``*_lo``/``*_hi`` give the range of the same ratio over the replicates
taken one at a time.
"""
import json
import sys
from pathlib import Path

import pandas as pd

args = sys.argv[1:]
out_csv = Path(args[args.index("--out") + 1]) if "--out" in args else Path(__file__).parent / "targets.csv"
if "--out" in args:
    del args[args.index("--out"):args.index("--out") + 2]


def variant_rows(path: str) -> pd.DataFrame:
    rows = pd.DataFrame([json.loads(line) for line in open(path)])
    folder = rows["workload"].str.split("/").str[0]
    rows["load"] = folder.str.split("-").str[1].str.rstrip("x").astype(float)
    rows["workload"] = (folder.str.split("-").str[0] + "-" + rows["workload"].str.split("/").str[1] + "@"
                        + folder.str.split("-").str[1])
    return rows.assign(avg_jct_s=rows["avg_jct_h"] * 3600, belief=rows["variant"], packed_fraction=float("nan"))


grid = pd.concat([pd.read_csv(f) for f in args if f.endswith(".csv")])
variants = [variant_rows(f) for f in args if f.endswith(".jsonl")]
if variants:
    grid = pd.concat([grid[grid["policy"] == "sia"], *variants])
runs = grid
runs["variant"] = runs["belief"].where(runs["policy"] != "sia", "sia")
point = ["workload", "load"]
per_rep = runs.pivot_table(index=[*point, "replicate"], columns="variant", values="avg_jct_s")
mean = runs.pivot_table(index=point, columns="variant", values="avg_jct_s", aggfunc="mean")
restarts = runs.pivot_table(index=point, columns="variant", values="restarts", aggfunc="mean")
packed = runs.pivot_table(index=point, columns="variant", values="packed_fraction", aggfunc="mean")


def share(frame: pd.DataFrame) -> pd.Series:
    gain = frame["sia"] - frame["truth"]
    return (frame["sia"] - frame["predicted"]) / gain.where(gain > 0)


out = pd.DataFrame(index=mean.index)
out["replicates"] = runs[runs["variant"] == "sia"].groupby(point).size()
for name, a, b in (("truth/sia", "truth", "sia"), ("none/sia", "none", "sia"), ("predicted/sia", "predicted", "sia"),
                   ("truth/none", "truth", "none")):
    out[name] = mean[a] / mean[b]
    ratio = (per_rep[a] / per_rep[b]).groupby(level=point)
    out[f"{name}_lo"], out[f"{name}_hi"] = ratio.min(), ratio.max()
for v in ("truth", "none", "predicted"):
    out[f"restarts {v}/sia"] = restarts[v] / restarts["sia"]
out["predicted share"] = share(mean)
rep_share = share(per_rep).groupby(level=point)
out["predicted share_lo"], out["predicted share_hi"] = rep_share.min(), rep_share.max()
out["packed truth"] = packed["truth"] if "truth" in packed else float("nan")
out["sia s"], out["truth s"] = mean["sia"], mean["truth"]
out = out.round(3)
out.to_csv(out_csv)
pd.set_option("display.width", 250)
print(out[["replicates", "truth/sia", "truth/sia_lo", "truth/sia_hi", "truth/none", "truth/none_lo", "truth/none_hi",
           "none/sia", "predicted/sia", "predicted share", "restarts truth/sia", "restarts none/sia",
           "restarts predicted/sia", "packed truth"]].to_string())
for load, rows in out.groupby(level="load"):
    print(f"\n{load:g}x: mean truth/sia {rows['truth/sia'].mean():.3f} (worst {rows['truth/sia'].max():.3f}), "
          f"truth/none {rows['truth/none'].mean():.3f} (worst {rows['truth/none'].max():.3f}), "
          f"none/sia {rows['none/sia'].mean():.3f} (worst {rows['none/sia'].max():.3f}), "
          f"predicted/sia {rows['predicted/sia'].mean():.3f}, "
          f"restarts/sia worst {rows.filter(like='restarts').max().max():.3f}, "
          f"predicted share min {rows['predicted share'].min():.2f}")
    print(f"   truth <= none + 1 %: {(rows['truth/none'] <= 1.01).sum()} of {len(rows)}; "
          f"none <= 1.02 sia: {(rows['none/sia'] <= 1.02).sum()} of {len(rows)}; "
          f"predicted share >= 0.7: {(rows['predicted share'].fillna(1) >= 0.7).sum()} of {len(rows)}; "
          f"truth <= sia: {(rows['truth/sia'] <= 1).sum()} of {len(rows)}")
