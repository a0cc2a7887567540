import pandas as pd, json, sys
rep = pd.concat([pd.read_csv(f"results/sim/packing-pays/replicates/{l}x/summary.csv") for l in (1, 2)])
rep["variant"] = rep["belief"].where(rep["policy"] != "sia", "sia")
def key(w):
    t, rest = w.split("/"); tr, l = t.split("-"); return f"{tr}-{rest}@{l}"
k = pd.concat([pd.DataFrame([json.loads(l) for l in open(f)]) for f in sys.argv[1:]])
k["workload"] = k["workload"].map(key); k["avg_jct_s"] = k["avg_jct_h"] * 3600
sia = rep[rep.variant == "sia"][["workload", "replicate", "variant", "avg_jct_s", "restarts"]]
both = pd.concat([sia, k[["workload", "replicate", "variant", "avg_jct_s", "restarts"]]])
m = both.pivot_table(index="workload", columns="variant", values="avg_jct_s")
r = both.pivot_table(index="workload", columns="variant", values="restarts")
base = rep.pivot_table(index="workload", columns="variant", values="avg_jct_s")
out = pd.DataFrame({"truth/sia": m["truth"] / m["sia"], "main truth/sia": base["truth"] / base["sia"],
                    "truth/none": m["truth"] / m["none"], "main truth/none": base["truth"] / base["none"],
                    "none/sia": m["none"] / m["sia"], "pred/sia": m["predicted"] / m["sia"],
                    "share": (m["sia"] - m["predicted"]) / (m["sia"] - m["truth"]),
                    "restarts truth/sia": r["truth"] / r["sia"]}).round(3)
print(out.to_string()); out["load"] = out.index.str[-2:]; print(out.groupby("load").mean().round(3).to_string())
