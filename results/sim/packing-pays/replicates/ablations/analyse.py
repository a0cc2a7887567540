"""Issue 46's ablation rows (NOTES.md, sections 8.2 and 8.3) against the replicated grid.

python results/sim/packing-pays/replicates/ablations/analyse.py ROWS.jsonl [ROWS.jsonl ...]

Each ROWS.jsonl is the output of ``colocate bench variants --json`` on the six workloads written at a load
(``<trace>-<load>x/workload-<i>.csv``); its variants are named after what they stand in for (``truth``, ``none``,
``predicted``, or any other name). Ratios are of mean JCTs over the replicates, against `sia` and the default
runs of ``../1x`` and ``../2x``.
"""
import json
import sys
from pathlib import Path

import pandas as pd

here = Path(__file__).parent
grid = pd.concat([pd.read_csv(here.parent / f"{load}x" / "summary.csv") for load in (1, 2)])
grid["variant"] = grid["belief"].where(grid["policy"] != "sia", "sia")


def grid_label(label: str) -> str:
    """``philly-2x/workload-1`` (bench variants) → ``philly-workload-1@2x`` (belief_sweep)."""
    folder, name = label.split("/")
    trace, load = folder.split("-")
    return f"{trace}-{name}@{load}"


rows = pd.concat([pd.DataFrame([json.loads(line) for line in open(f)]) for f in sys.argv[1:]])
rows["workload"] = rows["workload"].map(grid_label)
rows["avg_jct_s"] = rows["avg_jct_h"] * 3600
columns = ["workload", "replicate", "variant", "avg_jct_s", "restarts"]
runs = pd.concat([grid[grid["variant"] == "sia"][columns], rows[columns]])
jct = runs.pivot_table(index="workload", columns="variant", values="avg_jct_s")
restarts = runs.pivot_table(index="workload", columns="variant", values="restarts")
default = grid.pivot_table(index="workload", columns="variant", values="avg_jct_s")
out = pd.DataFrame(index=jct.index)
for variant in (v for v in jct.columns if v != "sia"):
    out[f"{variant}/sia"] = jct[variant] / jct["sia"]
    out[f"restarts {variant}/sia"] = restarts[variant] / restarts["sia"]
    if variant in default:
        out[f"default {variant}/sia"] = default[variant] / default["sia"]
if {"truth", "none"} <= set(jct.columns):
    out["truth/none"] = jct["truth"] / jct["none"]
    out["default truth/none"] = default["truth"] / default["none"]
if {"truth", "predicted"} <= set(jct.columns):
    out["predicted share"] = (jct["sia"] - jct["predicted"]) / (jct["sia"] - jct["truth"])
if "truth" in default and len(jct.columns) == 2:  # one variant: how the default truth run compares with it
    other = next(v for v in jct.columns if v != "sia")
    out[f"truth/{other}"] = default["truth"] / jct[other]
out = out.round(3)
pd.set_option("display.width", 250)
print(out.to_string())
out["load"] = out.index.str.rsplit("@", n=1).str[1]
print("\nmean over workloads:")
print(out.groupby("load").mean().round(3).to_string())
