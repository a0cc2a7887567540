"""The H100-typed cluster's figures (NOTES.md, section 8.5), on the mean over the replicates.

python results/sim/packing-pays/h100/table.py   (reads transferred/, bundled/ and r<k>-{transferred,bundled}/ here)

``transferred``: `colocate` and `sia` with the pair table of inputs.py; ``bundled``: `colocate` with the bundled
tables (which know no pair of Sia's applications on the h100, so nothing is packed). Replicate k > 0 is the same
comparison on the workloads with every arrival moved inside one round (``Workload.jittered(k)``).
"""
from pathlib import Path

import pandas as pd

here = Path(__file__).parent
frames = []
for rep, prefix in enumerate(("", "r1-", "r2-")):
    for table in ("transferred", "bundled"):
        f = here / f"{prefix}{table}" / "summary.csv"
        if not f.is_file():
            continue
        d = pd.read_csv(f)
        d["replicate"] = rep
        d["workload"] = d["workload"].str.replace(r"^r\d+-", "", regex=True)
        d["variant"] = d["policy"].where(d["policy"] == "sia", "pairs" if table == "transferred" else "no pairs")
        frames.append(d)
runs = pd.concat(frames)
point = ["load", "workload"]
jct = runs.pivot_table(index=point, columns="variant", values="avg_jct_s", aggfunc="mean")
restarts = runs.pivot_table(index=point, columns="variant", values="restarts", aggfunc="mean")
packed = runs.pivot_table(index=point, columns="variant", values="packed_fraction", aggfunc="mean")
out = pd.DataFrame({"replicates": runs[runs["variant"] == "sia"].groupby(point).size(),
                    "pairs/sia": jct["pairs"] / jct["sia"], "no pairs/sia": jct["no pairs"] / jct["sia"],
                    "pairs/no pairs": jct["pairs"] / jct["no pairs"],
                    "restarts pairs/sia": restarts["pairs"] / restarts["sia"],
                    "restarts no pairs/sia": restarts["no pairs"] / restarts["sia"],
                    "packed": packed["pairs"], "sia s": jct["sia"]}).round(3)
pd.set_option("display.width", 200)
print(out.to_string())
print("\nmean over workloads per load:")
print(out.groupby(level="load").mean().round(3).to_string())
