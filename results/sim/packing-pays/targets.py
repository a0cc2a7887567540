"""Issue 46's targets from the grid's compare runs (grid/{truth,sia,none,predicted}/summary.csv).

python results/sim/packing-pays/targets.py [GRID_DIR]   -> targets.csv and a markdown table on stdout
"""
import sys
from pathlib import Path

import pandas as pd

grid = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "grid")
frames = []
for variant in ("truth", "sia", "none", "predicted"):
    f = grid / variant / "summary.csv"
    if f.exists():
        d = pd.read_csv(f)
        d["variant"] = "sia" if variant == "sia" else variant
        frames.append(d)
d = pd.concat(frames)
jct = d.pivot_table(index="workload", columns="variant", values="avg_jct_s")
rst = d.pivot_table(index="workload", columns="variant", values="restarts")
out = pd.DataFrame(index=jct.index)
for v in ("truth", "none", "predicted"):
    if v in jct:
        out[f"{v}/sia"] = jct[v] / jct["sia"]
        out[f"{v} restarts/sia"] = rst[v] / rst["sia"]
out["truth/none"] = jct["truth"] / jct["none"]
if "predicted" in jct:
    gain = jct["sia"] - jct["truth"]
    out["predicted share of gain"] = (jct["sia"] - jct["predicted"]) / gain.where(gain > 0)
out["sia s"] = jct["sia"]
out["truth s"] = jct["truth"]
out = out.round(3)
out.to_csv(grid.parent / "targets.csv")
print(out.to_string())
for load in ("1x", "2x"):
    rows = out[out.index.str.endswith("@" + load)]
    print(f"\nmean over workloads at {load}: " + ", ".join(f"{c} {rows[c].mean():.3f}" for c in rows.columns
                                                       if "/" in c and "restarts" not in c))
